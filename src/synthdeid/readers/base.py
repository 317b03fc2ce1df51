"""The corpus reader interface and its registry.

A reader turns one corpus on disk into canonical :class:`~synthdeid.notes.Note`
objects, mapping its categories through a :class:`~synthdeid.labels.LabelMap`
and checking every span (in range, surface equal to the annotated text where
the format records it, no overlaps) and every note id (non-blank, unique over
the whole corpus, through :attr:`CorpusReader.note_ids`). Readers register
under a class-level ``name``, which is the ``corpus.format`` value in the config.
"""

from __future__ import annotations

import codecs
import re
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import BinaryIO, ClassVar

from synthdeid.errors import ConfigError, InputError
from synthdeid.labels import LabelMap
from synthdeid.notes import Note, NoteIds, Span, check_spans, merge_same_label_overlaps

READERS: dict[str, type[CorpusReader]] = {}

# How a reader treats overlapping gold spans. The canonical table allows none:
# "error" refuses the corpus; "merge_same_label" replaces overlapping spans of
# one label by their union (and still refuses overlaps across labels).
OVERLAP_POLICIES = ("error", "merge_same_label")


def register(cls: type[CorpusReader]) -> type[CorpusReader]:
    """Class decorator: make a reader available under its ``name``."""
    if cls.name in READERS:
        raise RuntimeError(f"two corpus readers registered as {cls.name!r}")
    READERS[cls.name] = cls
    return cls


def get_reader(name: str) -> type[CorpusReader]:
    try:
        return READERS[name]
    except KeyError:
        raise ConfigError(
            f"unknown corpus format {name!r}; known formats: {', '.join(sorted(READERS))}"
        ) from None


@dataclass(frozen=True)
class ReaderOptions:
    """Options shared by all readers.

    ``patient_id_regex`` extracts the patient id from a note id for formats that
    do not record one (BRAT, i2b2, JSONL without ``patient_id``): the first
    group of a match at the start of the note id; without it each note is its
    own patient.
    """

    label_map: LabelMap
    source: str
    encoding: str = "utf-8"
    patient_id_regex: str | None = None
    overlaps: str = "error"
    _pattern: re.Pattern[str] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.overlaps not in OVERLAP_POLICIES:
            raise ConfigError(
                f"corpus.overlaps must be one of {', '.join(OVERLAP_POLICIES)}, "
                f"got {self.overlaps!r}"
            )
        pattern = None
        if self.patient_id_regex:
            try:
                pattern = re.compile(self.patient_id_regex)
            except re.error as exc:
                raise ConfigError(f"corpus.patient_id_regex is not a valid regex: {exc}") from exc
            if pattern.groups < 1:
                raise ConfigError("corpus.patient_id_regex needs one capture group")
        object.__setattr__(self, "_pattern", pattern)

    def patient_id_for(self, note_id: str, *, path: str | Path) -> str:
        if self._pattern is None:
            return note_id
        match = self._pattern.match(note_id)
        if match is None:
            raise InputError(
                path,
                f"note {note_id!r}",
                f"note id does not match corpus.patient_id_regex {self.patient_id_regex!r}",
            )
        return match.group(1)


# how a corpus whose bytes do not decode is fixed (readers of other inputs say their own fix)
ENCODING_HINT = "set corpus.encoding to the file's real encoding"


def _undecodable(
    exc: UnicodeDecodeError, encoding: str, *, path: str | Path, line: int, offset: int
) -> InputError:
    """The error for bytes (of a piece read from byte ``offset`` of the file) that do not
    decode: where they are and why, never the bytes (they may be part of a name)."""
    return InputError(
        path,
        f"line {line}, byte {offset + exc.start}",
        f"bytes that do not decode as {encoding!r} ({exc.reason}); never quoted",
        ENCODING_HINT,
    )


def decode_bytes(raw: bytes, encoding: str, *, path: str | Path) -> str:
    """Decode a whole file, naming the line and byte of the first bad byte."""
    try:
        return raw.decode(encoding)
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise _undecodable(exc, encoding, path=path, line=line, offset=0) from None


def surface_mismatch(stated: str, actual: str, where: str) -> str:
    """Describe a stated surface that differs from the text, without either string.

    Both may hold PHI, and error messages end up in logs: the description
    gives the offsets, both lengths and the first differing character position.
    """
    first = next(
        (i for i, (a, b) in enumerate(zip(stated, actual, strict=False)) if a != b),
        min(len(stated), len(actual)),
    )
    return (
        f"surface mismatch at {where}: the stated surface ({len(stated)} characters) and "
        f"the text there ({len(actual)} characters) differ from character {first} on"
    )


def read_text(path: Path, encoding: str) -> str:
    """Read a text file exactly as stored (no newline translation)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise InputError(path, None, "file not found") from None
    return decode_bytes(raw, encoding, path=path)


def read_lines(path: Path, encoding: str) -> Iterator[str]:
    """The lines of a text file as ``read_text(path, encoding).split("\\n")`` gives them.

    Split on newlines only (``str.splitlines()`` also splits on U+2028, U+0085,
    ... which JSON allows unescaped inside strings). Read a line at a time
    where ``encoding`` writes a newline as the byte 0x0A, which then ends a line
    (UTF-8, Latin-1, ...); else (UTF-16, UTF-32) the whole file at once. The
    file is opened by this call: a missing one is refused here, not at the
    first line.
    """
    try:
        # an unknown encoding is read whole, and refused by the decoding as before
        one_byte_newline = "\n".encode(encoding) == b"\n"
    except LookupError:
        one_byte_newline = False
    try:
        handle = open(path, "rb")  # noqa: SIM115 (closed by _decoded_lines or below)
    except FileNotFoundError:
        raise InputError(path, None, "file not found") from None
    if not one_byte_newline:
        with handle:
            return iter(decode_bytes(handle.read(), encoding, path=path).split("\n"))
    return _decoded_lines(handle, encoding, path)


def _decoded_lines(handle: BinaryIO, encoding: str, path: Path) -> Iterator[str]:
    # an incremental decoder keeps what spans two lines (a BOM, a stateful codec's shift)
    decoder = codecs.getincrementaldecoder(encoding)()
    line = offset = 0
    ended = True  # the bytes so far end a line, so one more (maybe empty) line follows
    with handle:
        for raw in chain(handle, [b""]):
            if not raw and not ended:
                break
            line += 1
            ended = raw.endswith(b"\n")
            try:
                text = decoder.decode(raw, final=not ended)
            except UnicodeDecodeError as exc:
                raise _undecodable(exc, encoding, path=path, line=line, offset=offset) from None
            offset += len(raw)
            yield text.removesuffix("\n")


class CorpusReader(ABC):
    """Reads one corpus format into canonical notes."""

    name: ClassVar[str]

    def __init__(self, options: ReaderOptions) -> None:
        self.options = options
        self.merged_overlaps: list[str] = []
        # spans whose stated surface was compared with the text (and matched)
        self.surfaces_verified = 0
        # every note id read so far: readers add each one with the record it came from
        self.note_ids = NoteIds()

    def finish_spans(
        self, text: str, spans: list[Span], *, path: str | Path, record: str
    ) -> tuple[Span, ...]:
        """Apply the overlap policy, then check the spans (sorted result)."""
        if self.options.overlaps == "merge_same_label":
            spans, merges = merge_same_label_overlaps(spans)
            self.merged_overlaps.extend(f"{path}: {record}: {merge}" for merge in merges)
        return check_spans(text, spans, path=path, record=record)

    def file_note(
        self, file: Path, text: str, spans: list[Span], *, spans_file: Path, kind: str
    ) -> Note:
        """The note of a format with one note a file: its id is the file's stem.

        ``kind`` names the note in errors about its spans (``document <id>``).
        """
        note_id = file.stem
        self.note_ids.add(note_id, path=file, record=None)
        return Note(
            note_id=note_id,
            patient_id=self.options.patient_id_for(note_id, path=file),
            text=text,
            spans=self.finish_spans(text, spans, path=spans_file, record=f"{kind} {note_id}"),
            source=self.options.source,
        )

    @classmethod
    @abstractmethod
    def input_files(cls, path: Path) -> list[Path]:
        """The files under ``path`` this reader will read (for workflow inputs)."""

    def read(self, path: Path) -> list[Note]:
        """Read the whole corpus at ``path``; raise :class:`InputError` on bad input."""
        return list(self.notes(path))

    @abstractmethod
    def notes(self, path: Path) -> Iterator[Note]:
        """The notes of the corpus at ``path`` in order, each checked as it is read.

        Every reader reads the notes as they are asked for, so memory holds one
        note (one file, line or record) and what is counted over the whole
        corpus (note ids, merges; PhysioNet's span file, see its reader). A
        missing input is refused by this call, before the first note; an error
        in a later note is raised when that note is reached.
        """
