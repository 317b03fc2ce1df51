"""Import a labelled corpus into the canonical notes table (notes.parquet)."""

from __future__ import annotations

import argparse
import json
import logging
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from synthdeid.artifacts import files_digest, make_provenance, write_json_atomic
from synthdeid.cli_types import input_path, output_file
from synthdeid.errors import ConfigError
from synthdeid.labels import LabelMap, coarse_view
from synthdeid.notes import Note, require_notes, write_notes
from synthdeid.readers import ReaderOptions, get_reader

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class IngestSettings:
    """What ``ingest`` needs besides the corpus path (all from the config)."""

    format: str
    label_map: LabelMap
    source: str
    encoding: str = "utf-8"
    patient_id_regex: str | None = None
    overlaps: str = "error"


@dataclass(frozen=True)
class IngestResult:
    notes: list[Note]
    merged_overlaps: list[str]
    surfaces_verified: int
    corpus_digest: str


def ingest_corpus(path: Path, settings: IngestSettings) -> IngestResult:
    """Read a corpus into canonical notes; raises InputError on bad input or no notes."""
    reader = get_reader(settings.format)(
        ReaderOptions(
            label_map=settings.label_map,
            source=settings.source,
            encoding=settings.encoding,
            patient_id_regex=settings.patient_id_regex,
            overlaps=settings.overlaps,
        )
    )
    notes = reader.read(path)
    require_notes(len(notes), path=path, hint=f"a {settings.format} corpus needs at least one note")
    files = reader.input_files(path)
    for merge in reader.merged_overlaps:
        log.warning("%s", merge)
    return IngestResult(
        notes=notes,
        merged_overlaps=list(reader.merged_overlaps),
        surfaces_verified=reader.surfaces_verified,
        corpus_digest=files_digest(files, path if path.is_dir() else path.parent),
    )


def summarize_notes(notes: list[Note], view: dict[str, str]) -> dict[str, Any]:
    """Counts a person checks after an import: notes, patients, spans per label."""
    labels = Counter(span.label for note in notes for span in note.spans)
    coarse = Counter(view[span.label] for note in notes for span in note.spans)
    return {
        "notes": len(notes),
        "patients": len({note.patient_id for note in notes}),
        "notes_with_phi": sum(1 for note in notes if note.spans),
        "spans": sum(labels.values()),
        "spans_by_label": dict(sorted(labels.items())),
        "spans_by_coarse_label": dict(sorted(coarse.items())),
        "characters": sum(len(note.text) for note in notes),
    }


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
