"""Split notes by patient into seed / train / holdout, deterministically.

How patients are assigned to parts: :mod:`synthdeid.split`.
"""

from __future__ import annotations

import argparse
import logging
from collections import Counter

from synthdeid.artifacts import make_provenance, write_json_atomic
from synthdeid.cli_types import input_file, output_file
from synthdeid.notes import read_notes, write_notes
from synthdeid.split import PARTS, assign_parts, check_fractions

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
    notes = assign_parts(read_notes(args.notes, nonempty=True), fractions, args.seed)
    patients = {part: {n.patient_id for n in notes if n.split == part} for part in PARTS}
    summary = {
        "patients": {part: len(ids) for part, ids in patients.items()},
        "notes": dict(Counter(n.split for n in notes)),
        "notes_with_phi": dict(Counter(n.split for n in notes if n.spans)),
        "spans": {part: sum(len(n.spans) for n in notes if n.split == part) for part in PARTS},
    }
    provenance = make_provenance(
        "split", {"seed": args.seed, "fractions": fractions}, {"notes": args.notes}
    )
    write_notes(notes, args.out, provenance)
    write_json_atomic({"summary": summary, "provenance": provenance}, args.summary)
    log.info("split %d notes: %s", len(notes), summary["patients"])
