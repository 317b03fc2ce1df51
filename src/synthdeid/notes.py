"""The canonical notes table (DESIGN.md): one row per note, spans as character offsets.

Columns: ``note_id``, ``patient_id``, ``text``, ``spans`` (list of
``{start, end, label}``, ``end`` exclusive, offsets into the Python string),
``source`` and ``split``. Spans are sorted and never overlap; ``text[start:end]``
is the surface of a span. Every stage reads and writes this table through
:func:`read_notes` and :func:`write_notes`, so the contract is checked at both
ends of every rule.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from synthdeid.artifacts import (
    ROW_GROUP_ROWS,
    iter_row_range,
    open_parquet,
    read_parquet_with_provenance,
    require_columns,
    write_parquet_atomic,
)
from synthdeid.errors import InputError

UNSPLIT = "unsplit"

SPAN_TYPE = pa.struct(
    [
        pa.field("start", pa.int32(), nullable=False),
        pa.field("end", pa.int32(), nullable=False),
        pa.field("label", pa.string(), nullable=False),
    ]
)

NOTES_SCHEMA = pa.schema(
    [
        pa.field("note_id", pa.string(), nullable=False),
        pa.field("patient_id", pa.string(), nullable=False),
        pa.field("text", pa.string(), nullable=False),
        pa.field("spans", pa.list_(pa.field("item", SPAN_TYPE, nullable=False)), nullable=False),
        pa.field("source", pa.string(), nullable=False),
        pa.field("split", pa.string(), nullable=False),
    ]
)


@dataclass(frozen=True, order=True)
class Span:
    """A labelled character span, ``end`` exclusive."""

    start: int
    end: int
    label: str

    def surface(self, text: str) -> str:
        return text[self.start : self.end]


@dataclass(frozen=True)
class Note:
    """One row of the canonical notes table."""

    note_id: str
    patient_id: str
    text: str
    spans: tuple[Span, ...]
    source: str
    split: str = UNSPLIT

    def with_split(self, split: str) -> Note:
        return replace(self, split=split)

    def with_text(self, text: str, spans: Sequence[Span]) -> Note:
        """The same note (ids, source, split) with new text and spans."""
        return replace(self, text=text, spans=tuple(spans))


def check_spans(
    text: str,
    spans: Sequence[Span],
    *,
    path: str | Path,
    record: str,
    labels: Iterable[str] | None = None,
) -> tuple[Span, ...]:
    """Return ``spans`` sorted, or raise :class:`InputError` naming the first problem.

    Checks offsets inside the text, non-empty spans, known labels (when
    ``labels`` is given) and that no two spans overlap.
    """
    allowed = None if labels is None else set(labels)
    ordered = tuple(sorted(spans))
    previous: Span | None = None
    for span in ordered:
        if span.start < 0 or span.end > len(text):
            raise InputError(
                path,
                record,
                f"span {span.start}-{span.end} ({span.label}) lies outside the text "
                f"of length {len(text)}",
            )
        if span.start >= span.end:
            raise InputError(path, record, f"span {span.start}-{span.end} ({span.label}) is empty")
        if allowed is not None and span.label not in allowed:
            raise InputError(
                path,
                record,
                f"span {span.start}-{span.end} has unknown label {span.label!r}",
                f"known labels: {', '.join(sorted(allowed))}",
            )
        if previous is not None and span.start < previous.end:
            raise InputError(
                path,
                record,
                f"spans overlap: {previous.start}-{previous.end} ({previous.label}) and "
                f"{span.start}-{span.end} ({span.label})",
                "the canonical table allows no overlapping spans; fix the annotation",
            )
        previous = span
    return ordered


def splice(text: str, spans: Sequence[Span], inserts: Sequence[str]) -> tuple[str, list[Span]]:
    """Replace each span's text by its insert in one left-to-right pass.

    ``spans`` are sorted and do not overlap. Returns the new text and each
    insert's span in it (same labels), recorded at insertion, so
    ``new_text[s.start:s.end] == insert`` by construction.
    """
    pieces: list[str] = []
    placed: list[Span] = []
    cursor = length = 0
    for span, insert in zip(spans, inserts, strict=True):
        pieces.append(text[cursor : span.start])
        length += span.start - cursor
        placed.append(Span(length, length + len(insert), span.label))
        pieces.append(insert)
        length += len(insert)
        cursor = span.end
    pieces.append(text[cursor:])
    return "".join(pieces), placed


def merge_same_label_overlaps(spans: Sequence[Span]) -> tuple[list[Span], list[str]]:
    """Replace overlapping spans that share a label by their union.

    Returns the spans and a description of each merge. Overlaps across labels
    are left for :func:`check_spans` to refuse.
    """
    merged: list[Span] = []
    notes: list[str] = []
    for span in sorted(spans):
        last = merged[-1] if merged else None
        if last is not None and span.start < last.end and span.label == last.label:
            union = Span(last.start, max(last.end, span.end), last.label)
            notes.append(
                f"merged overlapping {last.label} spans {last.start}-{last.end} and "
                f"{span.start}-{span.end} into {union.start}-{union.end}"
            )
            merged[-1] = union
        else:
            merged.append(span)
    return merged, notes


def notes_to_table(notes: Iterable[Note]) -> pa.Table:
    rows: dict[str, list[Any]] = {name: [] for name in NOTES_SCHEMA.names}
    for note in notes:
        rows["note_id"].append(note.note_id)
        rows["patient_id"].append(note.patient_id)
        rows["text"].append(note.text)
        rows["spans"].append(
            [{"start": s.start, "end": s.end, "label": s.label} for s in note.spans]
        )
        rows["source"].append(note.source)
        rows["split"].append(note.split)
    return pa.Table.from_pydict(rows, schema=NOTES_SCHEMA)


ROW_RECORD = "row {number} (note {note_id!r})"  # a row of a notes table, as errors name it


class NoteIds:
    """The note ids seen so far in one table or corpus: each non-blank, none twice.

    One instance spans a whole read (every batch of a streamed table, every
    record of a corpus), so a duplicate is found however far apart the two
    records are. The error names both.

    Memory: a record named by its number (a row of a table, a line of a file:
    :meth:`add_numbered`) keeps only the number per id, and the path and the
    record's form once per read. An id then costs its string (49 bytes plus its
    length, for ASCII), an int (32) and a dict slot (40 to 80, by the dict's
    fill): measured, 135 bytes a note for ids of 16 characters (at most 180),
    about 140 MB for a million notes. A record named freely (:meth:`add`: a
    file per note) also keeps its path and name (about 245 bytes a note).
    """

    def __init__(self) -> None:
        # id -> the number of its first record (path and form: self._numbered),
        # or (path, record) for a record named freely or from another path or form
        self._first: dict[str, int | tuple[str, str | None]] = {}
        self._numbered: tuple[str, str] | None = None  # (path, form) of numbered records

    def __len__(self) -> int:
        return len(self._first)

    def add(self, note_id: str, *, path: str | Path, record: str | None) -> None:
        """Record ``note_id``; raise :class:`InputError` if blank or already seen."""
        self._refuse(note_id, path, record)
        self._first[note_id] = (str(path), record)

    def add_numbered(self, note_id: str, number: int, *, path: str | Path, form: str) -> None:
        """:meth:`add` for record ``form.format(number=number, note_id=note_id)``.

        ``form`` names a record by its number and note id (:data:`ROW_RECORD`);
        the string is only made for an error.
        """
        where = (str(path), form)
        if self._numbered is None:
            self._numbered = where
        if not note_id.strip() or note_id in self._first:
            self._refuse(note_id, path, form.format(number=number, note_id=note_id))
        if where == self._numbered:
            self._first[note_id] = number
        else:
            self._first[note_id] = (where[0], form.format(number=number, note_id=note_id))

    def _refuse(self, note_id: str, path: str | Path, record: str | None) -> None:
        if not note_id.strip():
            raise InputError(
                path, record, f"blank note_id {note_id!r}", "every note needs a non-blank id"
            )
        first = self._first.get(note_id)
        if first is None:
            return
        if isinstance(first, int):
            assert self._numbered is not None  # set by the add_numbered that stored the int
            first_path, form = self._numbered
            first_record: str | None = form.format(number=first, note_id=note_id)
        else:
            first_path, first_record = first
        if first_record is not None and first_path == str(path):
            where = first_record
        else:
            where = first_path if first_record is None else f"{first_path}: {first_record}"
        raise InputError(
            path,
            record,
            f"duplicate note_id {note_id!r}, first used at {where}",
            "note ids must be unique over the whole table",
        )


def require_notes(
    count: int, *, path: str | Path, hint: str = "check the step that wrote it"
) -> None:
    """Refuse a table or corpus with no notes (a stage that needs notes would write nothing)."""
    if count == 0:
        raise InputError(path, None, "holds no notes", hint)


def table_to_notes(
    table: pa.Table, *, path: str | Path, ids: NoteIds | None = None, first_row: int = 0
) -> list[Note]:
    """Convert a table to notes, checking the schema, every note's spans and its id.

    ``ids`` carries the ids already read when a table is read in batches
    (``first_row``: the row number of the batch's first row), so uniqueness
    holds over the whole table.
    """
    require_columns(path, table.column_names, NOTES_SCHEMA.names, "a notes table")
    ids = NoteIds() if ids is None else ids
    notes: list[Note] = []
    for number, row in enumerate(table.select(NOTES_SCHEMA.names).to_pylist(), start=first_row):
        record = f"note {row['note_id']!r}"
        ids.add_numbered(row["note_id"], number, path=path, form=ROW_RECORD)
        spans = [Span(s["start"], s["end"], s["label"]) for s in row["spans"]]
        notes.append(
            Note(
                note_id=row["note_id"],
                patient_id=row["patient_id"],
                text=row["text"],
                spans=check_spans(row["text"], spans, path=path, record=record),
                source=row["source"],
                split=row["split"],
            )
        )
    return notes


def note_batches(notes: Iterable[Note], size: int = ROW_GROUP_ROWS) -> Iterator[list[Note]]:
    """``notes`` in lists of ``size`` (the last one shorter): what a streamed step writes at once."""
    batch: list[Note] = []
    for note in notes:
        batch.append(note)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def write_notes(
    notes: Iterable[Note], path: str | Path, provenance: dict[str, Any] | None = None
) -> pa.Table:
    """Write notes atomically as Parquet with the explicit schema and provenance."""
    table = notes_to_table(notes)
    write_parquet_atomic(table, path, provenance)
    return table


def read_notes(path: str | Path, *, nonempty: bool = False) -> list[Note]:
    """Read and check a notes table; ``nonempty``: refuse one without notes."""
    table, _ = read_parquet_with_provenance(path)
    if nonempty:
        require_notes(table.num_rows, path=path)
    return table_to_notes(table, path=path)


def read_patient_ids(path: str | Path, *, nonempty: bool = False) -> set[str]:
    """The patient ids of a notes table, reading that column alone, a row group at a time.

    The table's columns are checked as :func:`iter_notes` checks them;
    ``nonempty``: refuse a table without notes.
    """
    source = open_parquet(path)
    require_columns(path, source.schema_arrow.names, NOTES_SCHEMA.names, "a notes table")
    if nonempty:
        require_notes(source.metadata.num_rows, path=path)
    return _distinct(source, "patient_id")


def _distinct(source: pq.ParquetFile, column: str) -> set[str]:
    """The distinct values of one string column, read alone, a row group at a time."""
    values: set[str] = set()
    for _, table in iter_row_range(source, columns=[column]):
        values.update(table.column(column).unique().to_pylist())
    return values


def iter_notes(
    path: str | Path,
    *,
    rows: range | None = None,
    batch_rows: int = ROW_GROUP_ROWS,
    ids: NoteIds | None = None,
) -> Iterator[list[Note]]:
    """Read and check a notes table batch by batch (``rows``: only those rows).

    Memory holds one row group of the file plus the note ids seen (for their
    uniqueness over the whole read); the notes of earlier batches are not kept.
    """
    source = open_parquet(path)
    require_columns(path, source.schema_arrow.names, NOTES_SCHEMA.names, "a notes table")
    ids = NoteIds() if ids is None else ids
    for first, table in iter_row_range(
        source, rows, columns=NOTES_SCHEMA.names, batch_rows=batch_rows
    ):
        yield table_to_notes(table, path=path, ids=ids, first_row=first)


def note_sources(path: str | Path) -> set[str]:
    """The distinct ``source`` values of a notes table (only that column is read)."""
    source = open_parquet(path)
    if "source" not in source.schema_arrow.names:
        return set()  # not a notes table: the full read says so
    return _distinct(source, "source")
