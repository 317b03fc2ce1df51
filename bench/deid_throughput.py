"""Benchmark de-identification throughput of a trained model or ensemble: notes/s, tokens/s, memory.

    python bench/deid_throughput.py --model results/train_ner/physionet/real_only/model \\
        --notes results/split_notes/physionet/notes.parquet --parts holdout --threads 2

Each configuration runs in its own process (so peak memory is its own) on the
same notes, after one warm-up batch:

- ``fp32 unsorted``: batches in note order, padded to their longest window
  (the baseline that length bucketing improves on);
- ``fp32``: length-sorted batches, as ``synthdeid predict-ner`` runs;
- ``bf16``: the same with weights and products in bfloat16 (fast where the
  CPU has AVX512-BF16 or AMX);
- ``int8``: the same with dynamic int8 quantization of the Linear layers;
- ``cuda fp32`` where a GPU is visible.

Ratios are against ``fp32 unsorted`` measured in the same run. With
``--repeats N`` each configuration times N passes over the notes and reports
the median notes/s with the slowest and fastest pass (bf16 varies by up to
a fifth between runs on the shared 2-core machine). Detection
recall, precision and document leakage against the notes' gold spans are
printed for every configuration, so a faster path is only a win at equal
recall. ``--safe-harbor-ages`` scores the spans as ``predict_ner`` writes
them where ``ner.deid.safe_harbor_ages`` is on (ages of 89 or under
dropped). The reference point: PhysioNet's rule-based ``deid.pl`` does 20.1
notes/s on the 1,631 developer notes on this 2-core machine kind (dictionary
loading included; measured twice, 20.09 and 20.17).
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONFIGS = {
    "fp32 unsorted": {"precision": "fp32", "length_sorted": False, "device": "cpu"},
    "fp32": {"precision": "fp32", "length_sorted": True, "device": "cpu"},
    "bf16": {"precision": "bf16", "length_sorted": True, "device": "cpu"},
    "int8": {"precision": "int8", "length_sorted": True, "device": "cpu"},
    "cuda fp32": {"precision": "fp32", "length_sorted": True, "device": "cuda"},
}
PERL_DEID_NOTES_PER_SECOND = 20.1


def measure(args: argparse.Namespace) -> dict[str, float]:
    """One configuration, in this process: throughput, memory, quality."""
    import torch

    from synthdeid.ner.ages import drop_young_ages
    from synthdeid.ner.loading import load_tagger
    from synthdeid.notes import read_notes
    from synthdeid.scoring.metrics import headline_metrics

    torch.set_num_threads(args.threads)
    config = CONFIGS[args.worker]
    notes = [n for n in read_notes(args.notes) if not args.parts or n.split in args.parts]
    notes = (notes * (args.n // max(len(notes), 1) + 1))[: args.n] if args.n else notes
    tagger = load_tagger(args.model, device=config["device"], precision=config["precision"])
    encoded_warmup = tagger.encode(notes[: args.batch_size])
    tagger.token_probabilities(encoded_warmup, batch_size=args.batch_size)
    if config["device"] == "cuda":
        torch.cuda.synchronize()
    timings = []
    for _ in range(args.repeats):
        started = time.perf_counter()
        encoded = tagger.encode(notes)
        probabilities = tagger.token_probabilities(
            encoded, batch_size=args.batch_size, length_sorted=config["length_sorted"]
        )
        predicted = {}
        for note, enc, probs in zip(notes, encoded, probabilities, strict=True):
            spans = tagger.decode(probs, enc, note.text)
            predicted[note.note_id] = (
                drop_young_ages(spans, note.text) if args.safe_harbor_ages else spans
            )
        if config["device"] == "cuda":
            torch.cuda.synchronize()
        timings.append(time.perf_counter() - started)
    seconds = statistics.median(timings)
    unique = {note.note_id: note for note in notes}
    quality = headline_metrics(list(unique.values()), predicted)
    tokens = sum(e.n_tokens for e in encoded)
    return {
        "notes": len(notes),
        "seconds": seconds,
        "notes_per_second": len(notes) / seconds,
        "notes_per_second_min": len(notes) / max(timings),
        "notes_per_second_max": len(notes) / min(timings),
        "tokens_per_second": tokens / seconds,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "detection_recall": quality["detection_recall"],
        "detection_precision": quality["detection_precision"],
        "leakage_overlap_all": quality["leakage_overlap_all"],
    }


def run_config(name: str, args: argparse.Namespace) -> dict[str, float] | None:
    command = [
        sys.executable,
        __file__,
        "--worker",
        name,
        "--model",
        str(args.model),
        "--notes",
        str(args.notes),
        "--threads",
        str(args.threads),
        "--n",
        str(args.n),
        "--repeats",
        str(args.repeats),
        "--batch-size",
        str(args.batch_size),
        *(["--safe-harbor-ages"] if args.safe_harbor_ages else []),
        "--parts",
        *args.parts,
    ]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        print(f"{name}: failed\n{result.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--notes", type=Path, required=True)
    parser.add_argument("--parts", nargs="*", default=["holdout"])
    parser.add_argument("--n", type=int, default=0, help="notes to process (0 = all selected)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--repeats", type=int, default=1, help="timed passes per configuration; the median counts"
    )
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument(
        "--safe-harbor-ages",
        action="store_true",
        help="drop predicted ages of 89 or under before scoring, as predict_ner can",
    )
    parser.add_argument(
        "--configs", nargs="+", choices=sorted(CONFIGS), default=None, help="default: all"
    )
    parser.add_argument("--worker", choices=sorted(CONFIGS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    if args.worker:
        print(json.dumps(measure(args)))
        return

    import torch

    names = [n for n in CONFIGS if n != "cuda fp32" or torch.cuda.is_available()]
    if args.configs:
        names = [n for n in names if n in args.configs]
    rows = {name: run_config(name, args) for name in names}
    baseline = rows.get("fp32 unsorted")
    ages = ", Safe Harbor ages dropped" if args.safe_harbor_ages else ""
    print(f"model {args.model}, notes {args.notes} {args.parts}, {args.threads} threads{ages}")
    print(
        "| config | notes | notes/s (median) | min-max | tokens/s | peak MB | speed vs fp32 unsorted "
        "| vs deid.pl (20.1 notes/s) | detection recall | detection precision | leakage |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, row in rows.items():
        if row is None:
            continue
        # n/a, not nan: no fp32 unsorted row to compare with, or a score with an empty
        # denominator (precision with no predicted span)
        ratio = (
            f"{row['notes_per_second'] / baseline['notes_per_second']:.2f}x" if baseline else "n/a"
        )
        print(
            f"| {name} | {row['notes']} | {row['notes_per_second']:.1f} "
            f"| {row['notes_per_second_min']:.1f}-{row['notes_per_second_max']:.1f} "
            f"| {row['tokens_per_second']:.0f} | {row['peak_rss_mb']:.0f} | {ratio} "
            f"| {row['notes_per_second'] / PERL_DEID_NOTES_PER_SECOND:.1f}x "
            f"| {_score(row['detection_recall'])} | {_score(row['detection_precision'])} "
            f"| {_score(row['leakage_overlap_all'])} |"
        )


def _score(value: float | None) -> str:
    """A score to 4 places, n/a where it is undefined (None or NaN)."""
    return "n/a" if value is None or math.isnan(value) else f"{value:.4f}"


if __name__ == "__main__":
    main()
