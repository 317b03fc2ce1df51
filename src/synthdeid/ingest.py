"""Reading a labelled corpus into canonical notes, and the counts a person checks after it.

The ``ingest-corpus`` stage (:mod:`synthdeid.stages.ingest_corpus`) writes them.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from synthdeid.artifacts import files_digest
from synthdeid.labels import LabelMap
from synthdeid.notes import Note, require_notes
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
