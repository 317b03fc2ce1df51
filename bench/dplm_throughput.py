"""Benchmark causal-LM training throughput with and without DP-SGD on the same model and data.

    python bench/dplm_throughput.py [--notes PATH] [--steps 20] [--batch 16] [--max-length 256]

The notes are a Parquet notes table (e.g. the mask step's ``masked.parquet``;
default: the embedded synthetic demo corpus, read and masked here). Every
configuration trains a freshly built small GPT-2 (same seed, same tokenizer)
for the same number of steps through ``synthdeid.dplm.training.train_lm``:

- non-DP (the baseline: the same loop without clipping or noise);
- DP-SGD with per-sample gradients (Opacus hooks, "flat" clipping);
- DP-SGD with ghost clipping (LM head untied), unless ``--no-ghost``.

Two untimed non-DP steps warm up first. Poisson sampling makes batch sizes vary; every configuration draws the same
batches (same sampler seed), so steps/s compare like with like. Printed:
steps/s, notes/s, tokens/s, peak resident memory of the process so far, and
the ratio of each DP configuration's steps/s to the non-DP one measured in
this run.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def load_texts(path: Path | None) -> list[str]:
    from synthdeid.mask import mask_note
    from synthdeid.notes import read_notes
    from synthdeid.readers import get_reader

    if path is not None:
        return [n.text for n in read_notes(path)]
    notes = get_reader("jsonl").read(REPO / "resources/demo/notes.jsonl", source="demo-synthetic")
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
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()

    import torch

    from synthdeid.dplm.corpus import ControlCoder, control_token, training_examples
    from synthdeid.dplm.model import ScratchConfig, build_lm
    from synthdeid.dplm.privacy import PrivacyConfig
    from synthdeid.dplm.training import LmTrainingConfig, encode_examples, train_lm

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
    configurations: list[tuple[str, PrivacyConfig | None]] = [
        ("non-DP", None),
        ("DP-SGD (per-sample, flat)", PrivacyConfig(noise_multiplier=1.0)),
    ]
    if not args.no_ghost:
        configurations.append(
            ("DP-SGD (ghost clipping)", PrivacyConfig(noise_multiplier=1.0, clipping="ghost"))
        )
    # warm-up (allocator, thread pools, kernel selection): two untimed non-DP steps
    model, tokenizer, _ = build_lm(None, scratch, texts, special, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        train_lm(
            examples,
            model,
            tokenizer,
            LmTrainingConfig(
                max_steps=2,
                logical_batch_size=args.batch,
                physical_batch_size=args.physical,
                max_length=args.max_length,
            ),
            None,
            device=torch.device("cpu"),
            progress=False,
        )
    results = []
    for name, privacy in configurations:
        model, tokenizer, described = build_lm(None, scratch, texts, special, seed=0)
        encoded, _ = encode_examples(examples, tokenizer, training.max_length)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = train_lm(
                examples,
                model,
                tokenizer,
                training,
                privacy,
                device=torch.device("cpu"),
                progress=False,
            )
        notes = sum(h["batch"] for h in result.history)
        seconds = result.timing["seconds"]
        tokens_per_note = sum(len(e) for e in encoded) / len(encoded)
        results.append(
            {
                "configuration": name,
                "steps": len(result.history),
                "seconds": seconds,
                "steps_per_s": len(result.history) / seconds,
                "notes_per_s": notes / seconds,
                "tokens_per_s": notes * tokens_per_note / seconds,
                "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                "parameters": described["parameters"],
            }
        )
    base = results[0]["steps_per_s"]
    print(
        f"{len(texts)} notes, {args.steps} steps, expected batch {args.batch} "
        f"(physical {args.physical}), max length {args.max_length}, "
        f"GPT-2 {args.layers}x{args.embd} ({results[0]['parameters']:,} parameters), "
        f"{args.threads} threads"
    )
    print(
        f"{'configuration':<28} {'steps/s':>8} {'notes/s':>8} {'tokens/s':>9} {'peak MB':>8} {'vs non-DP':>10}"
    )
    for row in results:
        row["ratio_to_non_dp"] = row["steps_per_s"] / base
        print(
            f"{row['configuration']:<28} {row['steps_per_s']:>8.3f} {row['notes_per_s']:>8.1f} "
            f"{row['tokens_per_s']:>9.0f} {row['peak_rss_mb']:>8.0f} {row['ratio_to_non_dp']:>9.2f}x"
        )
    slowdown = base / results[1]["steps_per_s"]
    print(f"DP-SGD (flat) takes {slowdown:.2f}x the time of a non-DP step")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
