"""Reading a labelled corpus into canonical notes, and the counts a person checks after it.

The ``ingest-corpus`` stage (:mod:`synthdeid.stages.ingest_corpus`) writes them
as they are read (:func:`open_corpus`), so a JSONL corpus of any size costs
one batch of notes plus the counts gathered over all (:class:`NoteCounts`).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from synthdeid.artifacts import files_digest
from synthdeid.cli_types import special_file_kind
from synthdeid.errors import InputError
from synthdeid.labels import LabelMap
from synthdeid.notes import Note, require_notes
from synthdeid.readers import CorpusReader, ReaderOptions, get_reader

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


@dataclass(frozen=True)
class CorpusRead:
    """A corpus being read: its notes, one at a time, and its reader's tallies so far."""

    path: Path
    format: str
    reader: CorpusReader
    notes: Iterator[Note]
    corpus_digest: str

    def finish(self, count: int) -> None:
        """After the last of ``count`` notes: refuse a corpus without notes, log merges."""
        require_notes(count, path=self.path, hint=f"a {self.format} corpus needs at least one note")
        for merge in self.reader.merged_overlaps:
            log.warning("%s", merge)


def open_corpus(path: Path, settings: IngestSettings) -> CorpusRead:
    """Start reading a corpus (see :meth:`CorpusReader.notes`); InputError on bad input.

    The corpus and every file of it the reader would read must be regular
    files (or folders): a FIFO or a device is refused before anything is read.
    """
    reader = get_reader(settings.format)(
        ReaderOptions(
            label_map=settings.label_map,
            source=settings.source,
            encoding=settings.encoding,
            patient_id_regex=settings.patient_id_regex,
            overlaps=settings.overlaps,
        )
    )
    refuse_special_files([path, *reader.input_files(path)])
    notes = reader.notes(path)  # a missing input is refused here, before the digest
    files = reader.input_files(path)
    return CorpusRead(
        path=path,
        format=settings.format,
        reader=reader,
        notes=notes,
        corpus_digest=files_digest(files, path if path.is_dir() else path.parent),
    )


def refuse_special_files(paths: Iterable[Path]) -> None:
    """InputError for the first of ``paths`` that exists and is neither a regular file nor a
    folder (reading it could block, or never end)."""
    for path in paths:
        special = special_file_kind(path)
        if special is not None:
            raise InputError(
                path,
                None,
                f"not a regular file ({special}): reading it could block or never end",
                "give the corpus as regular files",
            )


def ingest_corpus(path: Path, settings: IngestSettings) -> IngestResult:
    """Read a whole corpus into canonical notes; raises InputError on bad input or no notes."""
    corpus = open_corpus(path, settings)
    notes = list(corpus.notes)
    corpus.finish(len(notes))
    return IngestResult(
        notes=notes,
        merged_overlaps=list(corpus.reader.merged_overlaps),
        surfaces_verified=corpus.reader.surfaces_verified,
        corpus_digest=corpus.corpus_digest,
    )


class NoteCounts:
    """Counts a person checks after an import, gathered batch by batch.

    ``view`` maps canonical labels to coarse ones. Holds the patient ids seen
    (O(patients)) and counters, not the notes.
    """

    def __init__(self, view: dict[str, str]) -> None:
        self.view = view
        self.notes = 0
        self.patients: set[str] = set()
        self.notes_with_phi = 0
        self.labels: Counter[str] = Counter()
        self.characters = 0

    def add(self, notes: Iterable[Note]) -> None:
        for note in notes:
            self.notes += 1
            self.patients.add(note.patient_id)
            self.notes_with_phi += bool(note.spans)
            self.labels.update(span.label for span in note.spans)
            self.characters += len(note.text)

    def summary(self) -> dict[str, Any]:
        """Notes, patients, notes with PHI, spans by label and by coarse label, characters."""
        coarse: Counter[str] = Counter()
        for label, count in self.labels.items():
            coarse[self.view[label]] += count
        return {
            "notes": self.notes,
            "patients": len(self.patients),
            "notes_with_phi": self.notes_with_phi,
            "spans": sum(self.labels.values()),
            "spans_by_label": dict(sorted(self.labels.items())),
            "spans_by_coarse_label": dict(sorted(coarse.items())),
            "characters": self.characters,
        }
