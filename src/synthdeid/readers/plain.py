"""Notes without labels, as people keep them: text files, folders of them, a CSV or JSONL file.

``synthdeid deid`` reads its inputs here. :func:`plan_inputs` says what the
command-line inputs are, before anything is read or the model loads:

- ``.txt`` files and folders (every ``.txt`` file under a folder, in sorted
  order of their paths relative to it; names starting with ``.`` are
  skipped). Each file is one note; its id is its name without ``.txt``
  (``ward/a`` for ``ward/a.txt`` under a folder given), and its
  de-identified copy takes the same relative name;
- one CSV file (``.csv``, comma-separated with a header row, as Excel and
  pandas write it): ``--text-column`` names the column holding the notes,
  ``--id-column`` optionally the note ids (default: the row number, 1 for the
  first row after the header);
- one JSONL file (``.jsonl`` or ``.ndjson``): one JSON object a line, the note
  in ``--text-field`` (default ``text``), the id optionally in ``--id-field``
  (a string or an integer; default: the line number). Blank lines are
  skipped.

Files are read as UTF-8 (a byte-order mark at the start of a CSV or JSONL
file is dropped), exactly as stored: offsets count Python characters of the
text as read, ``\\r\\n`` included. :class:`PlainNotes` gives the notes one at a
time (memory holds one note, one line or one CSV row, plus the note ids read,
:class:`~synthdeid.notes.NoteIds`), each with the record its de-identified copy
mirrors. Bad input is refused with an :class:`~synthdeid.errors.InputError`
naming the file, the record and the problem, never quoting the text.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from synthdeid.artifacts import require_columns
from synthdeid.cli_types import special_file_kind
from synthdeid.errors import ConfigError, InputError, listed
from synthdeid.notes import Note, NoteIds, require_notes
from synthdeid.readers.base import ENCODING_HINT, read_lines, read_text
from synthdeid.readers.jsonl import json_kind

# the ``source`` of the notes read here: no corpus names them
PLAIN_SOURCE = "plain-notes"
TEXT_SUFFIX = ".txt"
CSV_SUFFIXES = (".csv",)
JSONL_SUFFIXES = (".jsonl", ".ndjson")
DEFAULT_TEXT_FIELD = "text"
ENCODING = "utf-8"
UTF8_HINT = "save the file as UTF-8, e.g. iconv -f <its encoding> -t utf-8"
BYTE_ORDER_MARK = "\ufeff"
# a CSV field may hold a whole note: the csv module's default limit is 128 KiB
CSV_FIELD_LIMIT = 2**31 - 1
# a CSV row, as errors name it (the header is not counted)
CSV_RECORD = "row {number} (note {note_id!r})"
# a JSONL line, as errors name it
JSONL_RECORD = "line {number} (note {note_id!r})"

Kind = Literal["text", "csv", "jsonl"]
# what a de-identified copy mirrors: a text file's relative name, a CSV row, a JSONL object
PlainRecord = str | list[str] | dict[str, Any]


@dataclass(frozen=True)
class TableOptions:
    """Where a CSV or JSONL input keeps its notes and ids (the command's options)."""

    text_column: str | None = None
    id_column: str | None = None
    text_field: str | None = None  # None: DEFAULT_TEXT_FIELD
    id_field: str | None = None


@dataclass(frozen=True)
class TextFile:
    """One ``.txt`` input: where it is and the relative name its copy takes."""

    path: Path
    name: str

    @property
    def note_id(self) -> str:
        """The name without ``.txt``: ``ward/a`` for ``ward/a.txt``."""
        return self.name[: -len(TEXT_SUFFIX)]


@dataclass(frozen=True)
class PlainInputs:
    """What the command's inputs are: ``.txt`` files (from files and folders) or one table."""

    kind: Kind
    given: tuple[Path, ...]
    text_files: tuple[TextFile, ...] = ()
    table: Path | None = None
    options: TableOptions = field(default_factory=TableOptions)

    @property
    def known_count(self) -> int | None:
        """How many notes there are, where that is known before reading (text files)."""
        return len(self.text_files) if self.kind == "text" else None

    @property
    def text_field(self) -> str:
        return self.options.text_field or DEFAULT_TEXT_FIELD


@dataclass(frozen=True)
class PlainNote:
    """A note read (no spans, its own patient) and the record its copy mirrors."""

    note: Note
    record: PlainRecord


def kind_of(path: Path) -> Kind | None:
    """The kind of input a file is, by its suffix (any case); None for another file."""
    suffix = path.suffix.lower()
    if suffix == TEXT_SUFFIX:
        return "text"
    if suffix in CSV_SUFFIXES:
        return "csv"
    if suffix in JSONL_SUFFIXES:
        return "jsonl"
    return None


def folder_text_files(folder: Path) -> list[TextFile]:
    """Every ``.txt`` file under ``folder`` (not under a name starting with ``.``), sorted."""
    found = []
    for path in folder.rglob("*"):
        relative = path.relative_to(folder)
        if any(part.startswith(".") for part in relative.parts):
            continue
        if path.suffix.lower() == TEXT_SUFFIX and path.is_file():
            found.append(TextFile(path, relative.as_posix()))
    return sorted(found, key=lambda f: f.name)


def _refuse_special(path: Path) -> None:
    special = special_file_kind(path)
    if special is not None:
        raise InputError(
            path, None, f"not a regular file ({special}): reading it could block or never end"
        )


def plan_inputs(paths: Sequence[Path], options: TableOptions | None = None) -> PlainInputs:
    """What ``paths`` are, checked before any note is read.

    Any number of ``.txt`` files and folders, or one CSV or JSONL file alone.
    Refused (:class:`InputError` naming the path): a missing path, a file of
    another kind, a folder without ``.txt`` files, two notes with one relative
    name, a CSV without the columns asked for; and (:class:`ConfigError`) a
    table with other inputs, or table options that do not fit the input.
    """
    options = options or TableOptions()
    if not paths:
        raise ConfigError("no input: give .txt files, folders, a CSV or a JSONL file")
    text_files: list[TextFile] = []
    tables: list[tuple[Kind, Path]] = []
    for path in paths:
        _refuse_special(path)
        if path.is_dir():
            files = folder_text_files(path)
            if not files:
                raise InputError(path, None, "a folder without .txt files", "nothing to read")
            text_files += files
            continue
        if not path.exists():
            raise InputError(path, None, "file not found")
        kind = kind_of(path)
        if kind is None:
            raise InputError(
                path,
                None,
                f"not an input this command reads (suffix {path.suffix or 'none'!r})",
                "give .txt files, folders of them, a .csv or a .jsonl file",
            )
        if kind == "text":
            text_files.append(TextFile(path, path.name))
        else:
            tables.append((kind, path))
    given = tuple(paths)
    if tables:
        if len(tables) > 1 or text_files:
            raise ConfigError(
                "a CSV or JSONL input is de-identified alone: give it as the only input "
                f"(got {len(paths)} inputs)"
            )
        kind, table = tables[0]
        _check_options(kind, options)
        plan = PlainInputs(kind, given, table=table, options=options)
        if kind == "csv":
            check_csv_header(plan)
        return plan
    _check_options("text", options)
    names: dict[str, Path] = {}
    for text_file in text_files:
        earlier = names.setdefault(text_file.name, text_file.path)
        if earlier is not text_file.path:
            problem = (
                "given twice"
                if earlier.resolve() == text_file.path.resolve()
                else f"its copy would be named {text_file.name!r}, as that of {earlier}"
            )
            raise InputError(text_file.path, None, problem, "give each note once, by one name")
    return PlainInputs("text", given, text_files=tuple(text_files), options=options)


def _check_options(kind: Kind, options: TableOptions) -> None:
    """Refuse options that do not apply to ``kind`` (they would be silently ignored)."""
    allowed = {
        "text": set(),
        "csv": {"text_column", "id_column"},
        "jsonl": {"text_field", "id_field"},
    }[kind]
    for name in ("text_column", "id_column", "text_field", "id_field"):
        if getattr(options, name) is not None and name not in allowed:
            what = {"text": "text files", "csv": "a CSV input", "jsonl": "a JSONL input"}[kind]
            raise ConfigError(f"--{name.replace('_', '-')} does not apply to {what}")


@contextmanager
def utf8_inputs() -> Iterator[None]:
    """Bytes that do not decode are refused with this module's fix: the corpus readers'
    (:data:`~synthdeid.readers.base.ENCODING_HINT`) names a config key these inputs lack."""
    try:
        yield
    except InputError as exc:
        if exc.hint != ENCODING_HINT:
            raise
        raise InputError(exc.path, exc.record, exc.problem, UTF8_HINT) from None


# ---------------------------------------------------------------- CSV


def _csv_lines(path: Path) -> Iterator[str]:
    """The file's lines, each with its newline, for :func:`csv.reader` (a quoted field may
    hold newlines); a byte-order mark at the start is dropped."""
    for number, line in enumerate(read_lines(path, ENCODING), start=1):
        yield (line.removeprefix(BYTE_ORDER_MARK) if number == 1 else line) + "\n"


def _csv_rows(path: Path) -> Iterator[tuple[int, list[str]]]:
    """``(line number where the row ends, fields)`` of every non-blank row, the header first."""
    csv.field_size_limit(max(csv.field_size_limit(), CSV_FIELD_LIMIT))
    reader = csv.reader(_csv_lines(path), strict=True)
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:  # its message names the format problem, not the text
            raise InputError(path, f"line {reader.line_num}", f"not valid CSV: {exc}") from None
        if row:
            yield reader.line_num, row


def check_csv_header(inputs: PlainInputs) -> tuple[list[str], int, int | None]:
    """The CSV's header, the text column's index and the id column's (None: row numbers).

    Refused: a file without a header row, no ``--text-column``, a column missing
    or named twice, the id column equal to the text column.
    """
    assert inputs.table is not None
    path, options = inputs.table, inputs.options
    with utf8_inputs():
        header = next((row for _, row in _csv_rows(path)), None)
    if header is None:
        raise InputError(path, None, "holds no header row", "a CSV input needs a header row")
    if options.text_column is None:
        raise ConfigError(
            f"{path}: a CSV input needs --text-column NAME, the column that holds the notes "
            f"(columns: {listed(header, 8)})"
        )
    wanted = [options.text_column, *([options.id_column] if options.id_column else [])]
    require_columns(path, header, wanted, "a CSV of notes", f"columns: {listed(header, 8)}")
    for name in wanted:
        if header.count(name) > 1:
            raise InputError(path, "header", f"column {name!r} appears {header.count(name)} times")
    if options.id_column == options.text_column:
        raise ConfigError("--id-column and --text-column name the same column")
    text_index = header.index(options.text_column)
    id_index = header.index(options.id_column) if options.id_column else None
    return header, text_index, id_index


# ---------------------------------------------------------------- reading


class PlainNotes:
    """The notes of planned inputs, read one at a time, in order.

    Iterate once. Every note id is non-blank and unique over the inputs; a
    note is its own patient. :meth:`finish`, after the last note, refuses
    inputs that held no note.
    """

    def __init__(self, inputs: PlainInputs) -> None:
        self.inputs = inputs
        self.ids = NoteIds()
        self.count = 0

    def __iter__(self) -> Iterator[PlainNote]:
        notes = {"text": self._text_notes, "csv": self._csv_notes, "jsonl": self._jsonl_notes}
        with utf8_inputs():
            for note in notes[self.inputs.kind]():
                self.count += 1
                yield note

    def finish(self) -> None:
        """Refuse inputs without a single note (a table of a header or blank lines only)."""
        where = self.inputs.table or self.inputs.given[0]
        require_notes(self.count, path=where, hint="nothing to de-identify")

    def _note(self, note_id: str, text: str) -> Note:
        return Note(note_id, note_id, text, (), PLAIN_SOURCE)

    def _text_notes(self) -> Iterator[PlainNote]:
        for text_file in self.inputs.text_files:
            self.ids.add(text_file.note_id, path=text_file.path, record=None)
            text = read_text(text_file.path, ENCODING)
            yield PlainNote(self._note(text_file.note_id, text), text_file.name)

    def _csv_notes(self) -> Iterator[PlainNote]:
        assert self.inputs.table is not None
        path = self.inputs.table
        header, text_index, id_index = check_csv_header(self.inputs)
        rows = _csv_rows(path)
        next(rows)  # the header
        for number, (line, row) in enumerate(rows, start=1):
            if len(row) != len(header):
                raise InputError(
                    path,
                    f"row {number} (line {line})",
                    f"{len(row)} fields, the header has {len(header)}",
                )
            note_id = str(number) if id_index is None else row[id_index]
            self.ids.add_numbered(note_id, number, path=path, form=CSV_RECORD)
            yield PlainNote(self._note(note_id, row[text_index]), row)

    def _jsonl_notes(self) -> Iterator[PlainNote]:
        assert self.inputs.table is not None
        path = self.inputs.table
        text_field, id_field = self.inputs.text_field, self.inputs.options.id_field
        for number, line in enumerate(read_lines(path, ENCODING), start=1):
            if number == 1:
                line = line.removeprefix(BYTE_ORDER_MARK)
            if not line.strip():
                continue
            record = f"line {number}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:  # its message and position hold no text
                raise InputError(path, record, f"invalid JSON: {exc.msg}") from None
            if not isinstance(obj, dict):
                raise InputError(path, record, f"a JSON {json_kind(obj)}, not an object")
            text = obj.get(text_field)
            if not isinstance(text, str):
                problem = "no" if text_field not in obj else f"a JSON {json_kind(text)} as its"
                raise InputError(path, record, f"{problem} {text_field!r} field, a string needed")
            note_id = str(number) if id_field is None else _jsonl_id(obj, id_field, path, record)
            self.ids.add_numbered(note_id, number, path=path, form=JSONL_RECORD)
            yield PlainNote(self._note(note_id, text), obj)


def _jsonl_id(obj: dict[str, Any], id_field: str, path: Path, record: str) -> str:
    """The note id in ``obj[id_field]``: a string or an integer (a boolean is neither)."""
    if id_field not in obj:
        raise InputError(path, record, f"no {id_field!r} field (--id-field)")
    value = obj[id_field]
    if not isinstance(value, str | int) or isinstance(value, bool):
        raise InputError(
            path,
            record,
            f"{id_field!r} must be a string or an integer, not a JSON {json_kind(value)}",
        )
    return str(value)
