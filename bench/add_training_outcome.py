"""Add the training outcome to runs archived before run records kept it.

A run record names the epoch whose weights were kept, the epochs run, the
number format and the machine (``trained``) since archive-run reads them from
the model folder's ``training_history.json``. For a run archived before, the
history is still on the machine that trained it; this script adds its outcome
by ``synthdeid.evaluation.archive.add_training_outcome``, which accepts only
the very history the run was archived from (the digest its record holds).
Runs whose history is not here, or is another one, are listed and left alone;
histories written before they named the machine give ``environment: null``.

    python bench/add_training_outcome.py --models results/train_ner/physionet \\
      docs/results/physionet-study-full-runs
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from synthdeid.errors import InputError
from synthdeid.evaluation.archive import RUN_RECORD, add_training_outcome, training_history


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--models", type=Path, required=True, help="train-ner's folder: <run>/model per run"
    )
    parser.add_argument("archives", type=Path, nargs="+", help="folders of archived runs")
    args = parser.parse_args(argv)
    for archive in args.archives:
        runs = sorted(path.parent for path in archive.glob(f"*/{RUN_RECORD}"))
        added, left = 0, []
        for folder in runs:
            history = training_history(args.models / folder.name / "model")
            if not history.is_file():
                left.append(f"{folder.name} (no history here)")
                continue
            try:
                added += add_training_outcome(folder, history)
            except InputError as error:
                left.append(f"{folder.name} ({error})")
        print(f"{archive}: outcome added to {added} of {len(runs)} runs", flush=True)
        for line in left:
            print(f"  left alone: {line}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
