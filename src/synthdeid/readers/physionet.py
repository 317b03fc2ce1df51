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
from pathlib import Path

from synthdeid.errors import InputError
from synthdeid.notes import Note, Span
from synthdeid.readers.base import CorpusReader, read_text, register, surface_mismatch

TEXT_FILE = "id.text"
PHRASE_FILE = "id-phi.phrase"

_HEADER = re.compile(r"START_OF_RECORD=([^|\n]+)\|\|\|\|([^|\n]+)\|\|\|\|\n")
_START = "START_OF_RECORD="
_END = "||||END_OF_RECORD"
NOTE_ID_SEPARATOR = "-"


def note_id_for(patient: str, note: str) -> str:
    return f"{patient}{NOTE_ID_SEPARATOR}{note}"


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def parse_records(content: str, *, path: Path) -> dict[tuple[str, str], str]:
    """Split an ``id.text`` file into ``{(patient, note): text}``.

    Anything that is not a well-formed record (a header without its end marker,
    an end marker without a header, text between records, a repeated
    patient/note pair) is an error naming the line.
    """
    records: dict[tuple[str, str], str] = {}
    pos = 0
    while True:
        gap_end = content.find(_START, pos)
        gap = content[pos:] if gap_end < 0 else content[pos:gap_end]
        if gap.strip():
            offset = pos + (len(gap) - len(gap.lstrip()))
            stray = (
                "end marker without a start"
                if gap.lstrip().startswith(_END)
                else f"text ({len(gap.strip())} characters)"
            )
            raise InputError(
                path,
                f"line {_line_of(content, offset)}",
                f"{stray} outside a record",
                "every note must be START_OF_RECORD=<patient>||||<note>||||, newline, text, "
                "||||END_OF_RECORD",
            )
        if gap_end < 0:
            return records
        header = _HEADER.match(content, gap_end)
        if header is None:
            raise InputError(
                path,
                f"line {_line_of(content, gap_end)}",
                "malformed record header",
                "expected START_OF_RECORD=<patient>||||<note>||||",
            )
        patient, note = header.group(1).strip(), header.group(2).strip()
        record = f"line {_line_of(content, gap_end)} (patient {patient}, note {note})"
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
        end = content.find(_END, body_start)
        next_start = content.find(_START, body_start)
        if end < 0 or (0 <= next_start < end):
            raise InputError(path, record, "record has no ||||END_OF_RECORD marker")
        if (patient, note) in records:
            raise InputError(path, record, "patient/note pair occurs twice")
        records[(patient, note)] = content[body_start:end]
        pos = end + len(_END)


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

    def read(self, path: Path) -> list[Note]:
        text_path, phrase_path = self.input_files(path)
        records = parse_records(read_text(text_path, self.options.encoding), path=text_path)
        phrases = parse_phrases(read_text(phrase_path, self.options.encoding), path=phrase_path)

        spans_by_note: dict[tuple[str, str], list[Span]] = defaultdict(list)
        for number, patient, note, start, end, category, surface in phrases:
            record = f"line {number} (patient {patient}, note {note})"
            text = records.get((patient, note))
            if text is None:
                raise InputError(
                    phrase_path, record, f"span refers to a note absent from {TEXT_FILE}"
                )
            if not 0 <= start < end <= len(text):
                raise InputError(
                    phrase_path,
                    record,
                    f"offsets {start}-{end} out of range for a note of {len(text)} characters",
                )
            if text[start:end] != surface:
                raise InputError(
                    phrase_path,
                    record,
                    surface_mismatch(surface, text[start:end], f"{start}-{end}"),
                )
            self.surfaces_verified += 1
            label = self.options.label_map.to_canonical(category, path=phrase_path, record=record)
            spans_by_note[(patient, note)].append(Span(start, end, label))

        notes = []
        for (patient, note), text in records.items():
            note_id = note_id_for(patient, note)
            self.note_ids.add(note_id, path=text_path, record=f"patient {patient}, note {note}")
            spans = self.finish_spans(
                text,
                spans_by_note.get((patient, note), []),
                path=phrase_path,
                record=f"patient {patient}, note {note}",
            )
            notes.append(
                Note(
                    note_id=note_id,
                    patient_id=patient,
                    text=text,
                    spans=spans,
                    source=self.options.source,
                )
            )
        return notes
