"""PhysioNet deid release format: ``id.text`` records + ``id-phi.phrase`` spans.

``id.text`` holds records ``START_OF_RECORD=<patient>||||<note>||||\\n<text>
||||END_OF_RECORD\\n``; ``id-phi.phrase`` one span a line, ``<patient> <note>
<start> <end> <category> <surface>``, offsets into ``<text>``, end exclusive.
Note ids are ``<patient>-<note>``; a patient or note id that is blank or holds
the ``-`` separator is refused, so two records never get the same note id.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

from synthdeid.errors import InputError
from synthdeid.notes import Note, Span
from synthdeid.readers.base import (
    CorpusReader,
    read_lines,
    read_text,
    register,
    surface_mismatch,
)

TEXT_FILE = "id.text"
PHRASE_FILE = "id-phi.phrase"

_HEADER = re.compile(r"START_OF_RECORD=([^|\n]+)\|\|\|\|([^|\n]+)\|\|\|\|\n")
_START = "START_OF_RECORD="
_END = "||||END_OF_RECORD"
NOTE_ID_SEPARATOR = "-"


def note_id_for(patient: str, note: str) -> str:
    return f"{patient}{NOTE_ID_SEPARATOR}{note}"


def parse_records(content: str, *, path: Path) -> dict[tuple[str, str], str]:
    """Split a whole ``id.text`` file into ``{(patient, note): text}`` (see :func:`iter_records`)."""
    records: dict[tuple[str, str], str] = {}
    for line, patient, note, text in iter_records(iter([content]), path=path):
        if (patient, note) in records:
            raise InputError(
                path,
                f"line {line} (patient {patient}, note {note})",
                "patient/note pair occurs twice",
            )
        records[(patient, note)] = text
    return records


class _Buffer:
    """The unread text of a file read in chunks, with the line number of its first character."""

    def __init__(self, chunks: Iterator[str]) -> None:
        self.chunks = chunks
        self.text = ""
        self.line = 1  # the line of text[0]
        self.exhausted = False

    def more(self) -> bool:
        """Append the next chunk; False at the end of the file."""
        for chunk in self.chunks:
            if chunk:
                self.text += chunk
                return True
        self.exhausted = True
        return False

    def find(self, needle: str, start: int) -> int:
        """The first ``needle`` at or after ``start``, reading on until found or the end."""
        at = self.text.find(needle, start)
        while at < 0 and not self.exhausted:
            searched = max(start, len(self.text) - len(needle) + 1)
            if not self.more():
                break
            at = self.text.find(needle, searched)
        return at

    def line_of(self, offset: int) -> int:
        return self.line + self.text.count("\n", 0, offset)

    def drop(self, offset: int) -> None:
        """Forget the text before ``offset``."""
        self.line = self.line_of(offset)
        self.text = self.text[offset:]


def iter_records(chunks: Iterator[str], *, path: Path) -> Iterator[tuple[int, str, str, str]]:
    """The records of an ``id.text`` file given as text chunks: (line, patient, note, text).

    Holds one record and the chunk being read, however long the file.
    Anything that is not a well-formed record (a header without its end marker,
    an end marker without a header, text between records) is an error naming
    the line; a repeated patient/note pair is left to the caller.
    """
    buffer = _Buffer(chunks)
    while True:
        gap_end = buffer.find(_START, 0)
        gap = buffer.text if gap_end < 0 else buffer.text[:gap_end]
        if gap.strip():
            offset = len(gap) - len(gap.lstrip())
            stray = (
                "end marker without a start"
                if gap.lstrip().startswith(_END)
                else f"text ({len(gap.strip())} characters)"
            )
            raise InputError(
                path,
                f"line {buffer.line_of(offset)}",
                f"{stray} outside a record",
                "every note must be START_OF_RECORD=<patient>||||<note>||||, newline, text, "
                "||||END_OF_RECORD",
            )
        if gap_end < 0:
            return
        buffer.drop(gap_end)
        while "\n" not in buffer.text and buffer.more():
            pass  # the header is one line
        header = _HEADER.match(buffer.text)
        if header is None:
            raise InputError(
                path,
                f"line {buffer.line}",
                "malformed record header",
                "expected START_OF_RECORD=<patient>||||<note>||||",
            )
        patient, note = header.group(1).strip(), header.group(2).strip()
        line = buffer.line
        record = f"line {line} (patient {patient}, note {note})"
        for part, value in (("patient", patient), ("note", note)):
            if not value:
                raise InputError(path, record, f"blank {part} id in the record header")
            if NOTE_ID_SEPARATOR in value:
                raise InputError(
                    path,
                    record,
                    f"{part} id {value!r} contains {NOTE_ID_SEPARATOR!r}, the separator of "
                    "note ids <patient>-<note>",
                    "two records could get the same note id; use ids without it",
                )
        body_start = header.end()
        end = buffer.find(_END, body_start)
        # a header before the end marker: this record has none (no header fits in a marker)
        next_start = buffer.text.find(_START, body_start, None if end < 0 else end)
        if end < 0 or next_start >= 0:
            raise InputError(path, record, "record has no ||||END_OF_RECORD marker")
        yield line, patient, note, buffer.text[body_start:end]
        buffer.drop(end + len(_END))


def parse_phrases(content: str, *, path: Path) -> list[tuple[int, str, str, int, int, str, str]]:
    """Parse ``id-phi.phrase`` into (line, patient, note, start, end, category, surface)."""
    rows = []
    for number, line in enumerate(content.splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.split(" ", 5)
        if len(parts) < 6 or not parts[2].isdecimal() or not parts[3].isdecimal():
            raise InputError(
                path,
                f"line {number}",
                "malformed span line",
                "expected '<patient> <note> <start> <end> <category> <surface>'",
            )
        patient, note, start, end, category, surface = parts
        rows.append((number, patient, note, int(start), int(end), category, surface))
    return rows


@register
class PhysioNetReader(CorpusReader):
    name = "physionet"

    @classmethod
    def input_files(cls, path: Path) -> list[Path]:
        return [path / TEXT_FILE, path / PHRASE_FILE]

    def notes(self, path: Path) -> Iterator[Note]:
        """The records of ``id.text`` one at a time, each with its spans.

        ``id-phi.phrase`` is read whole first (every span, grouped by note: about
        a hundred bytes a span as Python objects, a small part of the text);
        ``id.text`` is then read in chunks, one record in memory at a time. A span
        of a note that ``id.text`` lacks is refused after the last record.
        """
        text_path, phrase_path = self.input_files(path)
        phrases = parse_phrases(read_text(phrase_path, self.options.encoding), path=phrase_path)
        spans_by_note: dict[tuple[str, str], list[tuple[int, int, int, str, str]]] = defaultdict(
            list
        )
        for number, patient, note, start, end, category, surface in phrases:
            spans_by_note[(patient, note)].append((number, start, end, category, surface))
        del phrases
        lines = read_lines(text_path, self.options.encoding)
        chunks = (line if number == 0 else "\n" + line for number, line in enumerate(lines))
        return self._notes(iter_records(chunks, path=text_path), spans_by_note, phrase_path)

    def _notes(
        self,
        records: Iterator[tuple[int, str, str, str]],
        spans_by_note: dict[tuple[str, str], list[tuple[int, int, int, str, str]]],
        phrase_path: Path,
    ) -> Iterator[Note]:
        text_path = phrase_path.with_name(TEXT_FILE)
        for line, patient, note, text in records:
            record = f"patient {patient}, note {note}"
            note_id = note_id_for(patient, note)
            self.note_ids.add(note_id, path=text_path, record=f"line {line} ({record})")
            spans = [
                self._span(text, phrase_path, patient, note, *phrase)
                for phrase in spans_by_note.pop((patient, note), [])
            ]
            spans_checked = self.finish_spans(text, spans, path=phrase_path, record=record)
            yield Note(
                note_id=note_id,
                patient_id=patient,
                text=text,
                spans=spans_checked,
                source=self.options.source,
            )
        if spans_by_note:
            number, patient, note = min(
                (phrases[0][0], patient, note) for (patient, note), phrases in spans_by_note.items()
            )
            raise InputError(
                phrase_path,
                f"line {number} (patient {patient}, note {note})",
                f"span refers to a note absent from {TEXT_FILE}",
            )

    def _span(
        self,
        text: str,
        phrase_path: Path,
        patient: str,
        note: str,
        number: int,
        start: int,
        end: int,
        category: str,
        surface: str,
    ) -> Span:
        """One line of ``id-phi.phrase``, checked against its note's text."""
        record = f"line {number} (patient {patient}, note {note})"
        if not 0 <= start < end <= len(text):
            raise InputError(
                phrase_path,
                record,
                f"offsets {start}-{end} out of range for a note of {len(text)} characters",
            )
        if text[start:end] != surface:
            raise InputError(
                phrase_path, record, surface_mismatch(surface, text[start:end], f"{start}-{end}")
            )
        self.surfaces_verified += 1
        label = self.options.label_map.to_canonical(category, path=phrase_path, record=record)
        return Span(start, end, label)
