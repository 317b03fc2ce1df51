"""The canonical notes table (DESIGN.md): one row per note, spans as character offsets.

Columns: ``note_id``, ``patient_id``, ``text``, ``spans`` (list of
``{start, end, label}``, ``end`` exclusive, offsets into the Python string),
``source`` and ``split``. Spans are sorted and never overlap; ``text[start:end]``
is the surface of a span. Every stage reads and writes this table through
:func:`read_notes` and :func:`write_notes`, so the contract is checked at both
ends of every rule.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pyarrow as pa

from synthdeid.artifacts import read_parquet_with_provenance, write_parquet_atomic
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


def table_to_notes(table: pa.Table, *, path: str | Path) -> list[Note]:
    """Convert a table to notes, checking the schema and every note's spans."""
    missing = [name for name in NOTES_SCHEMA.names if name not in table.column_names]
    if missing:
        raise InputError(path, None, f"not a notes table: missing columns {missing}")
    notes: list[Note] = []
    seen: set[str] = set()
    for row in table.select(NOTES_SCHEMA.names).to_pylist():
        record = f"note {row['note_id']!r}"
        if row["note_id"] in seen:
            raise InputError(path, record, "duplicate note_id")
        seen.add(row["note_id"])
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


def write_notes(
    notes: Iterable[Note], path: str | Path, provenance: dict[str, Any] | None = None
) -> pa.Table:
    """Write notes atomically as Parquet with the explicit schema and provenance."""
    table = notes_to_table(notes)
    write_parquet_atomic(table, path, provenance)
    return table


def read_notes(path: str | Path) -> list[Note]:
    table, _ = read_parquet_with_provenance(path)
    return table_to_notes(table, path=path)
