"""i2b2 / n2c2 2014 de-identification XML: one ``<deIdi2b2>`` file per note.

The note text is the ``TEXT`` element (a CDATA section); each child of ``TAGS``
is a PHI span with ``start``, ``end``, ``text`` and ``TYPE`` attributes. The
``TYPE`` (``DOCTOR``, ``HOSPITAL``, ``CITY``, ``MEDICALRECORD``, ...) is the
category mapped through ``labels.mapping``. The note id is the file stem
(``110-01``); set ``corpus.patient_id_regex: '^(\\d+)-'`` to group a
patient's records.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

from synthdeid.errors import InputError
from synthdeid.notes import Note, Span
from synthdeid.readers.base import CorpusReader, decode_bytes, register, surface_mismatch


def _int_attr(tag: ET.Element, name: str, *, path: Path, record: str) -> int:
    value = tag.get(name, "")
    if not re.fullmatch(r"-?[0-9]+", value):
        raise InputError(path, record, f"attribute {name}={value!r} is not an integer")
    return int(value)


@register
class I2b2Reader(CorpusReader):
    name = "i2b2"

    @classmethod
    def input_files(cls, path: Path) -> list[Path]:
        return sorted(path.glob("*.xml")) if path.is_dir() else [path]

    def read_file(self, xml_path: Path) -> Note:
        # decode ourselves so bad bytes get the project's error, then parse the string
        try:
            raw = xml_path.read_bytes()
        except FileNotFoundError:
            raise InputError(xml_path, None, "file not found") from None
        content = decode_bytes(raw, self.options.encoding, path=xml_path)
        try:
            root = ET.fromstring(content)
        except ET.ParseError as exc:
            raise InputError(xml_path, f"line {exc.position[0]}", f"invalid XML: {exc}") from None
        text_el = root.find("TEXT")
        if text_el is None or text_el.text is None:
            raise InputError(xml_path, None, "no TEXT element")
        text = text_el.text
        spans = []
        tags = root.find("TAGS")
        for tag in [] if tags is None else list(tags):
            record = f"tag {tag.get('id', '?')} <{tag.tag}>"
            start = _int_attr(tag, "start", path=xml_path, record=record)
            end = _int_attr(tag, "end", path=xml_path, record=record)
            if not 0 <= start < end <= len(text):
                raise InputError(
                    xml_path,
                    record,
                    f"offsets {start}-{end} out of range for a text of {len(text)} characters",
                )
            surface = tag.get("text")
            if surface is not None:
                if text[start:end] != surface:
                    raise InputError(
                        xml_path,
                        record,
                        surface_mismatch(surface, text[start:end], f"{start}-{end}"),
                    )
                self.surfaces_verified += 1
            category = tag.get("TYPE") or tag.tag
            label = self.options.label_map.to_canonical(category, path=xml_path, record=record)
            spans.append(Span(start, end, label))
        return self.file_note(xml_path, text, spans, spans_file=xml_path, kind="note")

    def notes(self, path: Path) -> Iterator[Note]:
        """One XML file at a time, in file name order (a folder) or the one file."""
        files = self.input_files(path) if path.is_dir() else [path]
        if not files:
            raise InputError(path, None, "no .xml files in the i2b2 folder")
        if not files[0].exists():
            raise InputError(files[0], None, "file not found")
        return (self.read_file(f) for f in files)
