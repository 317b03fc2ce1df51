"""Import a labelled corpus into the canonical notes table (notes.parquet).

Reads the corpus with :func:`synthdeid.ingest.ingest_corpus` and writes the
notes with a summary a person checks after an import.
"""

from __future__ import annotations

import argparse
import json
import logging

from synthdeid.artifacts import make_provenance, write_json_atomic
from synthdeid.cli_types import input_path, output_file
from synthdeid.errors import ConfigError
from synthdeid.ingest import IngestSettings, ingest_corpus, summarize_notes
from synthdeid.labels import LabelMap, coarse_view
from synthdeid.notes import write_notes

log = logging.getLogger(__name__)


def register_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--corpus", required=True, type=input_path, help="corpus file or folder")
    parser.add_argument("--format", required=True, help="physionet | brat | jsonl | i2b2")
    parser.add_argument(
        "--label-map",
        required=True,
        type=json.loads,
        help="JSON object: the corpus's categories -> canonical labels",
    )
    parser.add_argument(
        "--coarse-view",
        type=json.loads,
        default=None,
        help="JSON object: canonical -> PER/ORG/LOC/TIME/MISC (default: VetSynth's view)",
    )
    parser.add_argument("--source", required=True, help="value of the notes' source column")
    parser.add_argument("--encoding", default="utf-8")
    parser.add_argument("--patient-id-regex", default=None)
    parser.add_argument("--overlaps", default="error", help="error | merge_same_label")
    parser.add_argument("--out", required=True, type=output_file, help="notes.parquet to write")
    parser.add_argument("--summary", required=True, type=output_file, help="summary JSON to write")


def run(args: argparse.Namespace) -> None:
    if not isinstance(args.label_map, dict):
        raise ConfigError("--label-map must be a JSON object")
    view = coarse_view(args.coarse_view)
    settings = IngestSettings(
        format=args.format,
        label_map=LabelMap(args.label_map),
        source=args.source,
        encoding=args.encoding,
        patient_id_regex=args.patient_id_regex,
        overlaps=args.overlaps,
    )
    result = ingest_corpus(args.corpus, settings)
    summary = summarize_notes(result.notes, view)
    summary["gold_spans_read"] = summary["spans"] + len(result.merged_overlaps)
    summary["surfaces_verified"] = result.surfaces_verified
    summary["overlaps_merged"] = result.merged_overlaps
    params = {
        "format": settings.format,
        "label_map": dict(settings.label_map.mapping),
        "source": settings.source,
        "encoding": settings.encoding,
        "patient_id_regex": settings.patient_id_regex,
        "overlaps": settings.overlaps,
    }
    provenance = make_provenance("ingest", params, {"corpus": args.corpus})
    provenance["inputs"]["corpus"]["digest"] = result.corpus_digest
    write_notes(result.notes, args.out, provenance)
    write_json_atomic({"summary": summary, "provenance": provenance}, args.summary)
    log.info(
        "ingested %d notes, %d patients, %d spans (%d gold spans read, %d overlaps merged) -> %s",
        summary["notes"],
        summary["patients"],
        summary["spans"],
        summary["gold_spans_read"],
        len(result.merged_overlaps),
        args.out,
    )
