"""The output folder of ``synthdeid deid``: de-identified notes, their spans and a summary.

The folder holds:

- the de-identified notes: for ``.txt`` inputs one ``.txt`` file per note
  under the note's relative name (``ward/a.txt``); for a CSV or JSONL input a
  file of the input's name mirroring it, every row or line in its place, the
  note's column or field replaced by the de-identified text (CSV: the same
  header, comma-separated, ``\\n`` line ends; JSONL: each object re-serialized,
  its keys in their order; blank lines are not copied);
- ``spans.jsonl`` and ``spans.parquet`` (:data:`SPANS_SCHEMA`): one row per
  predicted span, in note order, ``note_id``, ``start``, ``end`` (exclusive)
  and ``label``, the offsets into the note *as read* (Python characters).
  Never the span's text;
- ``summary.json``: counts, the settings and the provenance (the model by
  the digest of its files, the key by its fingerprint).

The folder is written under a staging name beside ``--out`` and renamed into
place when complete (:func:`~synthdeid.artifacts.atomic_directory`), so a
failed or stopped run leaves nothing at ``--out`` (an earlier output there
stays as it was). Surrogate mode keeps the predicted notes in a hidden file of
the staging folder between its passes (:class:`PredictedSpill`), removed
before the rename.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import IO, Any

import pyarrow as pa

from synthdeid.artifacts import (
    RowGroupWriter,
    atomic_directory,
    atomic_text,
    iter_row_range,
    open_parquet,
    parquet_writer,
    write_json_atomic,
)
from synthdeid.errors import ConfigError, InputError
from synthdeid.notes import NOTES_SCHEMA, Note, NoteIds, notes_to_table, table_to_notes
from synthdeid.readers.plain import PlainInputs, PlainRecord, check_csv_header

SPANS_JSONL = "spans.jsonl"
SPANS_PARQUET = "spans.parquet"
SUMMARY_FILE = "summary.json"
RESERVED_NAMES = (SPANS_JSONL, SPANS_PARQUET, SUMMARY_FILE)
# the provenance step of the folder's summary (how a later run knows the folder as one)
DEID_STEP = "deid"

SPANS_SCHEMA = pa.schema(
    [
        pa.field("note_id", pa.string(), nullable=False),
        pa.field("start", pa.int32(), nullable=False),
        pa.field("end", pa.int32(), nullable=False),
        pa.field("label", pa.string(), nullable=False),
    ]
)


def is_deid_folder(folder: Path) -> bool:
    """Whether ``folder`` holds the summary of an earlier ``synthdeid deid`` run."""
    try:
        summary = json.loads((folder / SUMMARY_FILE).read_text(encoding="utf-8"))
        return bool(summary["provenance"]["step"] == DEID_STEP and "outputs" in summary)
    except (OSError, ValueError, KeyError, TypeError):
        return False


def check_out_folder(out: Path, inputs: PlainInputs) -> None:
    """Refuse an ``--out`` the run must not replace, before any work.

    Refused: a folder that holds anything but an earlier output of this
    command (the run replaces the whole folder); an input inside it (it would
    be deleted) or it inside an input folder (its ``.txt`` files would be read
    as notes by the next run); a table input whose copy would take the name
    of a spans or summary file.
    """
    resolved = out.resolve()
    for given in inputs.given:
        path = given.resolve()
        if path == resolved or resolved in path.parents:
            raise ConfigError(f"{given} lies inside --out {out}, which this run replaces")
        if given.is_dir() and path in resolved.parents:
            raise ConfigError(
                f"--out {out} lies inside the input folder {given}: the next run would read "
                "the de-identified notes as notes; write them elsewhere"
            )
    if out.is_dir() and any(out.iterdir()) and not is_deid_folder(out):
        raise ConfigError(
            f"--out {out} is a folder that holds other files; give a new or empty folder "
            f"(or an earlier output of synthdeid deid, which is replaced)"
        )
    if inputs.table is not None and inputs.table.name in RESERVED_NAMES:
        raise InputError(
            inputs.table,
            None,
            f"its de-identified copy would take the name {inputs.table.name!r}, which the "
            "output folder keeps for itself",
            "rename the input",
        )


def span_rows(notes: Sequence[Note]) -> list[dict[str, Any]]:
    """One row per span of ``notes``, in order: note id, offsets, label (never the text)."""
    return [
        {"note_id": note.note_id, "start": span.start, "end": span.end, "label": span.label}
        for note in notes
        for span in note.spans
    ]


class DeidFolder:
    """The output folder being written (under its staging name); see :func:`deid_folder`."""

    def __init__(self, staging: Path, inputs: PlainInputs, stack: ExitStack, provenance: Any):
        self.staging = staging
        self.inputs = inputs
        self.notes_written = 0
        self.spans_written = 0
        self._spans_jsonl = stack.enter_context(atomic_text(staging / SPANS_JSONL))
        self._spans_parquet = stack.enter_context(
            parquet_writer(staging / SPANS_PARQUET, SPANS_SCHEMA, provenance)
        )
        self._table: IO[str] | None = None
        self._csv: Any = None  # a csv.writer (its type is private to the csv module)
        self._text_index = 0
        if inputs.table is not None:
            table = stack.enter_context(atomic_text(staging / inputs.table.name))
            self._table = table
            if inputs.kind == "csv":
                header, self._text_index, _ = check_csv_header(inputs)
                self._csv = csv.writer(table, lineterminator="\n")
                self._csv.writerow(header)

    def write_spans(self, notes: Sequence[Note]) -> None:
        """Append the predicted spans of ``notes`` (offsets into the text as read)."""
        rows = span_rows(notes)
        for row in rows:
            self._spans_jsonl.write(json.dumps(row, ensure_ascii=False) + "\n")
        self._spans_parquet.write(pa.Table.from_pylist(rows, schema=SPANS_SCHEMA))
        self.spans_written += len(rows)

    def write_notes(self, records: Sequence[PlainRecord], notes: Sequence[Note]) -> None:
        """Write each de-identified note where its record says, in input order."""
        for record, note in zip(records, notes, strict=True):
            if isinstance(record, str):
                with atomic_text(self.staging / record) as handle:
                    handle.write(note.text)
            elif isinstance(record, list):
                row = list(record)
                row[self._text_index] = note.text
                self._csv.writerow(row)
            else:
                assert self._table is not None
                obj = {**record, self.inputs.text_field: note.text}
                self._table.write(json.dumps(obj, ensure_ascii=False) + "\n")
        self.notes_written += len(notes)

    def outputs(self) -> dict[str, Any]:
        """What the folder holds, for the summary."""
        if self.inputs.table is not None:
            notes: Any = self.inputs.table.name
        else:
            notes = f"{self.notes_written} .txt files"
        return {"notes": notes, "spans": [SPANS_JSONL, SPANS_PARQUET], "summary": SUMMARY_FILE}

    def write_summary(self, body: dict[str, Any]) -> None:
        write_json_atomic(body, self.staging / SUMMARY_FILE)


@contextmanager
def deid_folder(out: Path, inputs: PlainInputs, provenance: Any) -> Iterator[DeidFolder]:
    """A :class:`DeidFolder` whose files appear at ``out`` together when the block ends
    without an exception (replacing an earlier output there); nothing otherwise."""
    with ExitStack() as stack:
        staging = stack.enter_context(atomic_directory(out))
        yield DeidFolder(staging, inputs, stack, provenance)


# ---------------------------------------------------------------- the surrogate passes

SPILL_FILE = ".predicted-notes.parquet"
SPILL_SCHEMA = NOTES_SCHEMA.append(pa.field("record", pa.string(), nullable=False))


class PredictedSpill:
    """The predicted notes and their records, kept in the staging folder between the passes.

    A surrogate never equals another original of its patient, so every note is
    predicted before any is replaced; the notes wait here rather than in
    memory. The file holds the notes' text: :meth:`remove` deletes it before
    the folder is renamed into place (and a failed run removes the whole
    staging folder).
    """

    def __init__(self, folder: Path, batch_rows: int) -> None:
        self.path = folder / SPILL_FILE
        self.batch_rows = batch_rows
        self._writer: RowGroupWriter | None = None

    @contextmanager
    def writing(self) -> Iterator[PredictedSpill]:
        """Write the spill in this block; it is complete when the block ends."""
        with parquet_writer(self.path, SPILL_SCHEMA) as writer:
            self._writer = writer
            yield self
        self._writer = None

    def write(self, records: Sequence[PlainRecord], notes: Sequence[Note]) -> None:
        """Append predicted notes and their records (inside :meth:`writing`)."""
        assert self._writer is not None, "write inside PredictedSpill.writing()"
        encoded = [json.dumps(record, ensure_ascii=False) for record in records]
        table = notes_to_table(notes).append_column(
            SPILL_SCHEMA.field("record"), pa.array(encoded, pa.string())
        )
        self._writer.write(table)

    def notes(self) -> Iterator[list[Note]]:
        """The notes, batch by batch, as written."""
        source, ids = open_parquet(self.path), NoteIds()
        for first, table in iter_row_range(source, batch_rows=self.batch_rows):
            yield table_to_notes(table, path=self.path, ids=ids, first_row=first)

    def records(self) -> Iterator[list[PlainRecord]]:
        """The records, batch by batch, in step with :meth:`notes`."""
        source = open_parquet(self.path)
        for _, table in iter_row_range(source, columns=["record"], batch_rows=self.batch_rows):
            yield [json.loads(value) for value in table.column("record").to_pylist()]

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)
