"""Turn an external de-identifier's span predictions into a run's predictions table (score-anchor).

``synthdeid score-anchor --anchor deidpl.jsonl --notes NOTES.parquet --parts
holdout --out PRED.parquet`` checks the anchor file against the notes table
and writes the notes of ``--parts`` (every note by default) with the anchor's
spans, in the schema ``predict-ner`` writes: ``evaluate-ner`` and
``compare-ner`` then score the anchor (PhysioNet's ``deid.pl``, say) on the
same notes as every model, with the same intervals and paired tests. The file
format, its checks and how a ``NAME`` span is scored:
:mod:`synthdeid.evaluation.anchors`. ``--summary`` (default
``PRED.summary.json``) counts the spans by label and the NAME spans by the
label they took; neither output is written when a check fails.
"""

from __future__ import annotations

import argparse
import logging

from synthdeid.artifacts import make_provenance, parquet_writer, write_json_atomic
from synthdeid.cli_types import input_file, output_file
from synthdeid.errors import InputError
from synthdeid.evaluation.anchors import NAME_LABELS, AnchorPredictions
from synthdeid.notes import NOTES_SCHEMA, iter_notes, notes_to_table

log = logging.getLogger(__name__)


def register_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--anchor",
        required=True,
        type=input_file,
        help="JSONL of the predictions: {patient_id, note_id, spans: [{start, end, label}]}",
    )
    parser.add_argument(
        "--notes", required=True, type=input_file, help="notes table the anchor predicted on"
    )
    parser.add_argument(
        "--parts",
        nargs="*",
        default=[],
        help="only notes of these split parts, comma-separated or repeated (default: every note)",
    )
    parser.add_argument(
        "--out", required=True, type=output_file, help="notes with the anchor's spans"
    )
    parser.add_argument("--summary", type=output_file, default=None)
    parser.add_argument(
        "--name",
        default=None,
        help="the anchor's name, for the log and provenance (default: file stem)",
    )


def run(args: argparse.Namespace) -> None:
    parts = sorted({p.strip() for value in args.parts for p in value.split(",") if p.strip()})
    name = args.name or args.anchor.stem
    anchor = AnchorPredictions.read(args.anchor, parts)
    provenance = make_provenance(
        "score-anchor",
        {"name": name, "parts": parts, "name_labels": list(NAME_LABELS)},
        {"anchor": args.anchor, "notes": args.notes},
    )
    with parquet_writer(args.out, NOTES_SCHEMA, provenance) as writer:
        for batch in anchor.batches(iter_notes(args.notes)):
            writer.write(notes_to_table(batch))
        if not anchor.stats.notes:
            raise InputError(
                args.notes, None, f"no notes in parts {parts}", "choose the parts with --parts"
            )
    stats = anchor.stats.as_dict()
    summary_path = args.summary or args.out.with_suffix(".summary.json")
    write_json_atomic({"summary": stats, "provenance": provenance}, summary_path)
    log.info(
        "%s: %d notes scored (%d more checked), %d spans; NAME spans %d, as %s -> %s",
        name,
        stats["notes"],
        stats["notes_not_scored"],
        stats["predicted_spans"],
        stats["name_spans"],
        stats["name_resolved_as"],
        args.out,
    )
