"""Placeholders in the DP language model's samples: free sampling against the constraint.

    python bench/dplm_placeholders.py --model results/train_dp_lm/physionet/dp/model \
        --masked results/mask_seeds/physionet/masked.parquet \
        --notes results/split_notes/physionet/notes.parquet \
        --removed results/mask_seeds/physionet/local/removed_values.parquet \
        --settings '{"per_code": 50, "max_new_tokens": 128}' \
        --out results/measure_dplm_placeholders/physionet

Runs ``sample-dp-lm`` on one trained model once per placeholder setting
(``free``; ``constrained`` with each ``--bias``), the same seed and settings
otherwise, and prints a Markdown table: per control code the share of samples
holding at least one placeholder (before validation, with a Wilson 95%
interval), the samples the validator accepts and the notes of the PII pool
after the fill, dedup and screen. Every run keeps its outputs under
``--out/<setting>/`` (the pools are synthetic; the removals table names seed
surfaces only by note id).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from synthdeid.stats import wilson_interval

REPO = Path(__file__).resolve().parents[1]
ALLOWLIST = REPO / "resources" / "placeholders.yaml"
POOLS = {"encoder": False}


def sample(args: argparse.Namespace, name: str, sampling: dict[str, object]) -> dict[str, object]:
    """One sample-dp-lm run; its summary."""
    out = args.out / name
    command = [
        sys.executable, "-m", "synthdeid", "sample-dp-lm", "--model", str(args.model),
        "--masked", str(args.masked), "--notes", str(args.notes), "--removed", str(args.removed),
        "--allowlist", str(ALLOWLIST), "--settings", json.dumps(sampling),
        "--pool-settings", json.dumps(POOLS), "--name", name,
        "--samples", str(out / "samples.parquet"), "--pii", str(out / "pii.parquet"),
        "--no-pii", str(out / "no_pii.parquet"), "--removals", str(out / "removals.parquet"),
        "--summary", str(out / "summary.json"), "--threads", str(args.threads), "--no-progress",
    ]  # fmt: skip
    subprocess.run(command, check=True)
    summary: dict[str, object] = json.loads((out / "summary.json").read_text())["summary"]
    return summary


def share_cell(entry: dict[str, int]) -> str:
    """``k/n = p% [lo-hi%]``, or n/a without samples."""
    n, k = entry["samples"], entry["with_placeholder"]
    if not n:
        return "n/a"
    interval = wilson_interval(k, n)
    return f"{k}/{n} = {100 * k / n:.0f}% [{100 * interval.lo:.0f}-{100 * interval.hi:.0f}%]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name in ("model", "masked", "notes", "removed", "out"):
        parser.add_argument(f"--{name}", type=Path, required=True)
    parser.add_argument("--settings", type=json.loads, default={}, help="JSON: sampling")
    parser.add_argument("--bias", type=float, nargs="*", default=[0.0, 4.0])
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    runs = {"free": {**args.settings, "placeholders": "free"}}
    for bias in args.bias:
        runs[f"constrained-bias{bias:g}"] = {
            **args.settings,
            "placeholders": "constrained",
            "placeholder_bias": bias,
        }
    print("| sampling | pii samples with a placeholder [95% CI] | no_pii samples with one "
          "| accepted | PII pool notes |")  # fmt: skip
    print("|---|---|---|---|---|")
    for name, sampling in runs.items():
        summary = sample(args, name, sampling)
        shares = summary["with_placeholder"]
        assert isinstance(shares, dict)
        print(
            f"| {name} | {share_cell(shares.get('pii', {'samples': 0, 'with_placeholder': 0}))} "
            f"| {share_cell(shares.get('no_pii', {'samples': 0, 'with_placeholder': 0}))} "
            f"| {summary['accepted']}/{summary['samples']} | {summary['pii_notes']} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
