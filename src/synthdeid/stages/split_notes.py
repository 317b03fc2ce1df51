"""Split notes by patient into seed / train / holdout, deterministically.

How patients are assigned to parts, and the two passes that keep memory flat
in the number of notes: :mod:`synthdeid.split`.
"""

from __future__ import annotations

import argparse
import logging

from synthdeid.artifacts import make_provenance, write_json_atomic
from synthdeid.cli_types import input_file, output_file
from synthdeid.split import PARTS, check_fractions, split_notes_file

log = logging.getLogger(__name__)


def register_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--notes", required=True, type=input_file, help="notes.parquet from ingest")
    parser.add_argument("--seed", required=True, type=int, help="split seed")
    for part in PARTS:
        parser.add_argument(
            f"--{part}-fraction", required=True, type=float, help=f"share of patients in {part}"
        )
    parser.add_argument("--out", required=True, type=output_file)
    parser.add_argument("--summary", required=True, type=output_file)


def run(args: argparse.Namespace) -> None:
    fractions = {part: getattr(args, f"{part}_fraction") for part in PARTS}
    check_fractions(fractions)
    provenance = make_provenance(
        "split", {"seed": args.seed, "fractions": fractions}, {"notes": args.notes}
    )
    summary = split_notes_file(args.notes, args.out, fractions, args.seed, provenance)
    write_json_atomic({"summary": summary, "provenance": provenance}, args.summary)
    log.info("split %d notes: %s", sum(summary["notes"].values()), summary["patients"])
