"""Benchmark causal-LM training throughput with and without DP-SGD on the same model and data.

    python bench/dplm_throughput.py [--notes PATH] [--steps 20] [--batch 16] [--max-length 256]
        [--model bundled:smollm2 | DIR] [--lora RANK] [--no-full]

The notes are a Parquet notes table (e.g. the mask step's ``masked.parquet``;
default: the embedded synthetic demo corpus, read and masked here). The model
is a small GPT-2 built from a config (default) or a pretrained model
(``--model``, any form ``synth.dplm.model`` takes). Every configuration
trains a freshly built or loaded copy (same seed, same tokenizer) for the same
number of steps through ``synthdeid.dplm.training.train_lm``:

- non-DP (the baseline: the same loop without clipping or noise);
- DP-SGD with per-sample gradients (Opacus hooks, "flat" clipping);
- DP-SGD with ghost clipping (LM head untied), unless ``--no-ghost``;

for every weight (unless ``--no-full``) and, with ``--lora RANK`` and a
pretrained model, for LoRA adapters plus the added tokens' rows.

Two untimed non-DP steps warm up first. Poisson sampling makes batch sizes
vary; every configuration draws the same batches (same sampler seed), so
steps/s compare like with like. Printed: steps/s, notes/s, tokens/s, peak
resident memory of the process so far (it only grows), and each DP
configuration's step time over that of the non-DP run of the same kind
(full or LoRA) measured in this run.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import warnings
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def load_texts(path: Path | None) -> list[str]:
    from synthdeid.mask import mask_note
    from synthdeid.notes import read_notes
    from synthdeid.readers import get_reader

    if path is not None:
        return [n.text for n in read_notes(path)]
    from synthdeid.labels import LabelMap
    from synthdeid.readers.base import ReaderOptions

    reader = get_reader("jsonl")(ReaderOptions(LabelMap.identity(), "demo-synthetic"))
    notes = reader.read(REPO / "resources/demo/notes.jsonl")
    return [mask_note(n).note.text for n in notes]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--notes", type=Path, default=None, help="notes Parquet (masked text)")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=16, help="logical (expected) batch size")
    parser.add_argument("--physical", type=int, default=16, help="physical batch size")
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--embd", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=4000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-ghost", action="store_true")
    parser.add_argument(
        "--model", default=None, help="pretrained model (bundled:smollm2, a directory, ...)"
    )
    parser.add_argument("--lora", type=int, default=0, help="also LoRA adapters of this rank")
    parser.add_argument("--no-full", action="store_true", help="skip full fine-tuning")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()

    import torch

    from synthdeid.dplm.adapters import LoraSettings
    from synthdeid.dplm.corpus import ControlCoder, control_token, training_examples
    from synthdeid.dplm.model import ScratchConfig, build_lm
    from synthdeid.dplm.privacy import PrivacyConfig
    from synthdeid.dplm.training import LmTrainingConfig, encode_examples, train_lm

    if args.lora and args.model is None:
        parser.error("--lora needs a pretrained --model")
    torch.set_num_threads(args.threads)
    texts = load_texts(args.notes)
    coder = ControlCoder.fit(["pii"], texts)
    examples = training_examples([(f"n{i}", t) for i, t in enumerate(texts)], [], coder)
    special = [control_token(c) for c in coder.all_codes()]
    scratch = ScratchConfig(
        n_layer=args.layers,
        n_head=args.heads,
        n_embd=args.embd,
        n_positions=max(args.max_length, 64),
        vocab_size=args.vocab,
        min_frequency=2,
    )
    training = LmTrainingConfig(
        max_steps=args.steps,
        logical_batch_size=args.batch,
        physical_batch_size=args.physical,
        max_length=args.max_length,
        log_every=max(args.steps, 1),
    )
    kinds: list[tuple[str, LoraSettings | None]] = []
    if not args.no_full:
        kinds.append(("full", None))
    if args.lora:
        kinds.append((f"LoRA r{args.lora}", LoraSettings(rank=args.lora, alpha=2.0 * args.lora)))
    privacies: list[tuple[str, PrivacyConfig | None]] = [
        ("non-DP", None),
        ("DP-SGD flat", PrivacyConfig(noise_multiplier=1.0)),
    ]
    if not args.no_ghost:
        privacies.append(("DP-SGD ghost", PrivacyConfig(noise_multiplier=1.0, clipping="ghost")))

    def run(privacy: PrivacyConfig | None, lora: LoraSettings | None, config: LmTrainingConfig):
        built = build_lm(args.model, scratch, texts, special, seed=0, resize=lora is None)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = train_lm(
                examples,
                built.model,
                built.tokenizer,
                config,
                privacy,
                device=torch.device("cpu"),
                progress=False,
                lora=lora,
                base_vocabulary=built.base_vocabulary,
            )
        return built, result

    # warm-up (allocator, thread pools, kernel selection): two untimed non-DP steps
    run(None, kinds[0][1], replace(training, max_steps=2))
    results = []
    for kind, lora in kinds:
        for name, privacy in privacies:
            built, result = run(privacy, lora, training)
            encoded, _ = encode_examples(examples, built.tokenizer, training.max_length)
            notes = sum(h["batch"] for h in result.history)
            seconds = result.timing["seconds"]
            tokens_per_note = sum(len(e) for e in encoded) / len(encoded)
            results.append(
                {
                    "kind": kind,
                    "configuration": name,
                    "steps": len(result.history),
                    "seconds": seconds,
                    "steps_per_s": len(result.history) / seconds,
                    "notes_per_s": notes / seconds,
                    "tokens_per_s": notes * tokens_per_note / seconds,
                    "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                    "parameters": built.described["parameters"],
                    "trained_parameters": result.trained["trained"],
                }
            )
    model = f"GPT-2 {args.layers}x{args.embd}" if args.model is None else f"pretrained {args.model}"
    print(
        f"{len(texts)} notes, {args.steps} steps, expected batch {args.batch} "
        f"(physical {args.physical}), max length {args.max_length}, "
        f"{model} ({results[0]['parameters']:,} parameters), {args.threads} threads"
    )
    print(
        f"{'kind':<10} {'configuration':<14} {'trained':>12} {'steps/s':>8} {'notes/s':>8} "
        f"{'tokens/s':>9} {'peak MB':>8} {'time vs non-DP':>15}"
    )
    for row in results:
        base = next(
            r for r in results if r["kind"] == row["kind"] and r["configuration"] == "non-DP"
        )
        row["time_vs_non_dp"] = base["steps_per_s"] / row["steps_per_s"]
        print(
            f"{row['kind']:<10} {row['configuration']:<14} {row['trained_parameters']:>12,} "
            f"{row['steps_per_s']:>8.4f} {row['notes_per_s']:>8.2f} {row['tokens_per_s']:>9.0f} "
            f"{row['peak_rss_mb']:>8.0f} {row['time_vs_non_dp']:>14.2f}x"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
