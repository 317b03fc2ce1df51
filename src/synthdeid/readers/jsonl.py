"""JSONL with a text field and span dicts (VetSynth's layout).

One JSON object a line: ``text`` (str), ``spans`` (list of objects with
``start``, ``end``, ``label`` and optionally ``text``, the surface, which is
checked when present), and optionally ``note_id`` and ``patient_id``. A note
without ``note_id`` is named by its line number; a given ``note_id`` is a
non-blank string or an integer, unique in the file. Other keys are ignored.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from synthdeid.errors import InputError
from synthdeid.notes import Note, Span
from synthdeid.readers.base import CorpusReader, read_lines, register, surface_mismatch

LINE_RECORD = "line {number} (note {note_id})"  # a line of the file, as errors name it


def json_kind(value: object) -> str:
    """The JSON type of a value (errors name it, not the value, which may hold PHI)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    names = {str: "string", int: "integer", float: "number", list: "array", dict: "object"}
    return names.get(type(value), type(value).__name__)


def _int_field(obj: dict[str, Any], key: str, *, path: Path, record: str) -> int:
    value = obj.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise InputError(
            path, record, f"span field {key!r} must be an integer, got a JSON {json_kind(value)}"
        )
    return value


@register
class JsonlReader(CorpusReader):
    name = "jsonl"

    @classmethod
    def input_files(cls, path: Path) -> list[Path]:
        return [path]

    def notes(self, path: Path) -> Iterator[Note]:
        """The notes line by line: memory holds one line (and the ids read so far)."""
        lines = enumerate(read_lines(path, self.options.encoding), start=1)
        return (self._note(line, number, path) for number, line in lines if line.strip())

    def _note(self, line: str, number: int, path: Path) -> Note:
        record = f"line {number}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(path, record, f"invalid JSON: {exc.msg}") from None
        if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
            raise InputError(path, record, "expected an object with a string 'text' field")
        text: str = obj["text"]
        raw_id = obj.get("note_id", number)
        if not isinstance(raw_id, str | int) or isinstance(raw_id, bool):
            raise InputError(
                path,
                record,
                f"note_id must be a string or an integer, got a JSON {json_kind(raw_id)}",
            )
        note_id = str(raw_id)
        self.note_ids.add_numbered(note_id, number, path=path, form=LINE_RECORD)
        record = LINE_RECORD.format(number=number, note_id=note_id)
        raw_spans = obj.get("spans", [])
        if not isinstance(raw_spans, list):
            raise InputError(path, record, "'spans' must be a list")
        spans = []
        for raw in raw_spans:
            if not isinstance(raw, dict):
                raise InputError(path, record, f"a span is a JSON {json_kind(raw)}, not an object")
            start = _int_field(raw, "start", path=path, record=record)
            end = _int_field(raw, "end", path=path, record=record)
            if not 0 <= start < end <= len(text):
                raise InputError(
                    path,
                    record,
                    f"offsets {start}-{end} out of range for a note of {len(text)} characters",
                )
            surface = raw.get("text")
            if surface is not None:
                if text[start:end] != surface:
                    raise InputError(
                        path,
                        record,
                        surface_mismatch(surface, text[start:end], f"{start}-{end}"),
                    )
                self.surfaces_verified += 1
            label = self.options.label_map.to_canonical(
                str(raw.get("label")), path=path, record=record
            )
            spans.append(Span(start, end, label))
        patient = obj.get("patient_id")
        return Note(
            note_id=note_id,
            patient_id=str(patient)
            if patient is not None
            else self.options.patient_id_for(note_id, path=path),
            text=text,
            spans=self.finish_spans(text, spans, path=path, record=record),
            source=self.options.source,
        )
