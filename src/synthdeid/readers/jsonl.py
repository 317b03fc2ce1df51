"""JSONL with a text field and span dicts (seed 000's layout).

One JSON object a line: ``text`` (str), ``spans`` (list of objects with
``start``, ``end``, ``label`` and optionally ``text``, the surface, which is
checked when present), and optionally ``note_id`` and ``patient_id``. A note
without ``note_id`` is named by its line number. Other keys are ignored.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from synthdeid.errors import InputError
from synthdeid.notes import Note, Span
from synthdeid.readers.base import CorpusReader, read_text, register


def _int_field(obj: dict[str, Any], key: str, *, path: Path, record: str) -> int:
    value = obj.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise InputError(path, record, f"span field {key!r} must be an integer, got {value!r}")
    return value


@register
class JsonlReader(CorpusReader):
    name = "jsonl"

    @classmethod
    def input_files(cls, path: Path) -> list[Path]:
        return [path]

    def read(self, path: Path) -> list[Note]:
        notes = []
        first_line: dict[str, int] = {}  # note_id -> line it was first seen on
        content = read_text(path, self.options.encoding)
        # split on newlines only: str.splitlines() also splits on U+2028, U+0085, ...
        # which JSON allows unescaped inside strings
        for number, line in enumerate(content.split("\n"), start=1):
            if not line.strip():
                continue
            record = f"line {number}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(path, record, f"invalid JSON: {exc.msg}") from None
            if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
                raise InputError(path, record, "expected an object with a string 'text' field")
            text: str = obj["text"]
            note_id = str(obj.get("note_id", number))
            record = f"line {number} (note {note_id})"
            if note_id in first_line:
                raise InputError(
                    path, record, f"note_id {note_id!r} already used on line {first_line[note_id]}"
                )
            first_line[note_id] = number
            raw_spans = obj.get("spans", [])
            if not isinstance(raw_spans, list):
                raise InputError(path, record, "'spans' must be a list")
            spans = []
            for raw in raw_spans:
                if not isinstance(raw, dict):
                    raise InputError(path, record, f"span {raw!r} is not an object")
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
                            f"surface mismatch: the span says {surface!r}, "
                            f"the note has {text[start:end]!r} at {start}-{end}",
                        )
                    self.surfaces_verified += 1
                label = self.options.label_map.to_canonical(
                    str(raw.get("label")), path=path, record=record
                )
                spans.append(Span(start, end, label))
            patient = obj.get("patient_id")
            notes.append(
                Note(
                    note_id=note_id,
                    patient_id=str(patient)
                    if patient is not None
                    else self.options.patient_id_for(note_id, path=path),
                    text=text,
                    spans=self.finish_spans(text, spans, path=path, record=record),
                    source=self.options.source,
                )
            )
        return notes
