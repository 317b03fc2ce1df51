"""The canonical notes table (DESIGN.md): one row per note, spans as character offsets.

Columns: ``note_id``, ``patient_id``, ``text``, ``spans`` (list of
``{start, end, label}``, ``end`` exclusive, offsets into the Python string),
``source`` and ``split``. Spans are sorted and never overlap; ``text[start:end]``
is the surface of a span. Every stage reads and writes this table through
:func:`read_notes` and :func:`write_notes`, so the contract is checked at both
ends of every rule.
"""

from __future__ import annotations

import json
import struct
import tempfile
import weakref
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, BinaryIO

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
from synthdeid.hashset import HashMap, hash64

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


NOTE_ID_DOMAIN = b"note id"  # the hash domain of note ids (synthdeid.hashset.hash64)

# a record as NoteIds keeps it: [note id, number] for a numbered record of the
# read's first path and form, else [note id, path, record]
Entry = list[str | int | None]
_SPILL_HEADER = struct.Struct("<qI")  # an entry in the spill: number (or -1), length of its text


class NoteIds:
    """The note ids seen so far in one table or corpus: each non-blank, none twice.

    One instance spans a whole read (every batch of a streamed table, every
    record of a corpus), so a duplicate is found however far apart the two
    records are. The error names both.

    Memory: about 16 bytes an id, whatever its length: its 64-bit hash and
    where its first record lies in a temporary spill file on disk
    (:class:`~synthdeid.hashset.HashMap`; the ids not yet merged wait in a
    buffer of at most 65,536 ids or 1/32 of them). The spill file holds the id
    and its record (a number; or a path and name, for a record named freely,
    :meth:`add`, or from another path or form): 12 bytes and the id's on disk.
    Measured with :mod:`tracemalloc`, each 16-character id made as a read
    makes it: for 10^6 ids, 17.5 bytes an id at the end of the read, 16.0 once
    merged, 27.9 at the peak of a merge; for 10^5, 47 at the end (34,464 ids in
    the buffer) and 16.1 merged. The dict of ids this replaced kept 135.

    A hash seen before is confirmed against the id kept in the spill file
    before an id is refused, so two ids that share a hash (among 10^8 ids,
    probability at most 2.7e-4) are told apart exactly; the later one is then
    kept as a string.
    """

    def __init__(self) -> None:
        self._first = HashMap()  # hash of an id -> offset of its first record in the spill
        self._colliding: dict[str, int] = {}  # id -> its offset, for ids whose hash came before
        self._numbered: tuple[str, str] | None = None  # (path, form) of numbered records
        self._spill: BinaryIO | None = None
        self._end = 0  # the spill's length

    def __len__(self) -> int:
        return len(self._first) + len(self._colliding)

    def add(self, note_id: str, *, path: str | Path, record: str | None) -> None:
        """Record ``note_id``; raise :class:`InputError` if blank or already seen."""
        self._refuse_blank(note_id, path, record)
        first = self._first_or_keep(note_id, [note_id, str(path), record])
        if first is not None:
            self._refuse(note_id, path, record, first)

    def add_numbered(self, note_id: str, number: int, *, path: str | Path, form: str) -> None:
        """:meth:`add` for record ``form.format(number=number, note_id=note_id)``.

        ``form`` names a record by its number and note id (:data:`ROW_RECORD`);
        the string is only made for an error.
        """
        where = (str(path), form)
        if self._numbered is None:
            self._numbered = where
        if not note_id.strip():
            self._refuse_blank(note_id, path, form.format(number=number, note_id=note_id))
        entry: Entry = (
            [note_id, number]
            if where == self._numbered
            else [note_id, where[0], form.format(number=number, note_id=note_id)]
        )
        first = self._first_or_keep(note_id, entry)
        if first is not None:
            self._refuse(note_id, path, form.format(number=number, note_id=note_id), first)

    def _first_or_keep(self, note_id: str, entry: Entry) -> Entry | None:
        """The entry of ``note_id``'s first record; None after keeping ``entry`` as it."""
        key = hash64(note_id, domain=NOTE_ID_DOMAIN)
        hashed = self._first.get(key)
        offset = self._colliding.get(note_id, hashed) if self._colliding else hashed
        if offset is not None:
            first = self._read(offset)
            if first[0] == note_id:
                return first
        offset = self._write(entry)
        if hashed is None:
            self._first.add(key, offset)
        else:  # another id has this hash: this one is kept exactly
            self._colliding[note_id] = offset
        return None

    def _write(self, entry: Entry) -> int:
        """Append ``entry`` to the spill: its number (-1: none), length and text; its offset."""
        if self._spill is None:
            self._spill = tempfile.TemporaryFile()  # noqa: SIM115 (closed with this object)
            weakref.finalize(self, self._spill.close)
        number, text = (entry[1], entry[0]) if len(entry) == 2 else (-1, json.dumps(entry))
        assert isinstance(number, int) and isinstance(text, str)
        data = text.encode("utf-8", "surrogatepass")
        self._spill.write(_SPILL_HEADER.pack(number, len(data)) + data)
        offset, self._end = self._end, self._end + _SPILL_HEADER.size + len(data)
        return offset

    def _read(self, offset: int) -> Entry:
        assert self._spill is not None  # an offset comes from _write
        self._spill.seek(offset)
        number, size = _SPILL_HEADER.unpack(self._spill.read(_SPILL_HEADER.size))
        text = self._spill.read(size).decode("utf-8", "surrogatepass")
        self._spill.seek(self._end)
        entry: Entry = [text, number] if number >= 0 else json.loads(text)
        return entry

    @staticmethod
    def _refuse_blank(note_id: str, path: str | Path, record: str | None) -> None:
        if not note_id.strip():
            raise InputError(
                path, record, f"blank note_id {note_id!r}", "every note needs a non-blank id"
            )

    def _refuse(self, note_id: str, path: str | Path, record: str | None, first: Entry) -> None:
        if len(first) == 2:  # a numbered record of the read's first path and form
            assert self._numbered is not None  # set by the add_numbered that kept it
            first_path, form = self._numbered
            first_record: str | None = form.format(number=first[1], note_id=note_id)
        else:
            first_path, first_record = str(first[1]), None if first[2] is None else str(first[2])
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


def iter_note_texts(path: str | Path) -> Iterator[tuple[str, str]]:
    """``(note_id, text)`` of every note of a notes table, only those two columns read, a
    row group at a time."""
    source = open_parquet(path)
    require_columns(path, source.schema_arrow.names, ["note_id", "text"], "a notes table")
    for _, table in iter_row_range(source, columns=["note_id", "text"]):
        yield from zip(
            table.column("note_id").to_pylist(), table.column("text").to_pylist(), strict=True
        )


def note_texts(path: str | Path, note_ids: Iterable[str]) -> dict[str, str]:
    """The text of each of ``note_ids`` in a notes table (:func:`iter_note_texts`); a note id
    the table does not hold is an InputError."""
    wanted = set(note_ids)
    texts = {note_id: text for note_id, text in iter_note_texts(path) if note_id in wanted}
    absent = len(wanted - texts.keys())
    if absent:
        raise InputError(
            path, None, f"{absent} of the {len(wanted)} notes asked for are not in this table"
        )
    return texts


def note_sources(path: str | Path) -> set[str]:
    """The distinct ``source`` values of a notes table (only that column is read)."""
    source = open_parquet(path)
    if "source" not in source.schema_arrow.names:
        return set()  # not a notes table: the full read says so
    return _distinct(source, "source")
