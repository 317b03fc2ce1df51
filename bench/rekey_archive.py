"""Rewrite archives of format 1 (note ids hashed without a key) to the keyed format.

An archive written before its note ids were keyed cannot be read together with
runs archived since (their ids no longer pair), and anyone could test a guessed
note id against it. Each format-1 run folder under the given archives is
rewritten in place by ``synthdeid.evaluation.archive.rekey_archived_run``: its
note ids keyed by the texts of the notes it scored, from ``--notes`` (the notes
table the runs were scored on, e.g. the corpus's split_notes output). Runs
keyed already are left alone; a run whose note ids the table does not hold
stops the script with the folder unchanged.

    python bench/rekey_archive.py --notes results/split_notes/physionet/notes.parquet \\
      docs/results/physionet-study-full-runs docs/results/physionet-levers-runs
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from synthdeid.evaluation.archive import RUN_RECORD, rekey_archived_run


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--notes", type=Path, required=True, help="the notes the runs scored")
    parser.add_argument("archives", type=Path, nargs="+", help="folders of archived runs")
    args = parser.parse_args(argv)
    for archive in args.archives:
        runs = sorted(path.parent for path in archive.glob(f"*/{RUN_RECORD}"))
        rekeyed = sum(rekey_archived_run(folder, args.notes) for folder in runs)
        print(f"{archive}: {rekeyed} of {len(runs)} runs rekeyed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
