"""i2b2 / n2c2 2014 de-identification XML: one ``<deIdi2b2>`` file per note.

The note text is the ``TEXT`` element (a CDATA section); each child of ``TAGS``
is a PHI span with ``start``, ``end``, ``text`` and ``TYPE`` attributes. The
element name is the PHI category (``NAME``, ``LOCATION``, ...; a few tags of the
2014 corpus are ``PHI``) and ``TYPE`` its subtype (``DOCTOR``, ``HOSPITAL``,
``CITY``, ``MEDICALRECORD``, ...): the subtype is what ``labels.mapping`` maps
(the element name where a tag has no ``TYPE``). The 2014 track's subtypes are
mapped by the shipped ``resources/label_maps/i2b2_2014.yaml``
(:mod:`synthdeid.readers.label_maps`). The note id is the file stem
(``110-01``); set ``corpus.patient_id_regex: '^(\\d+)-'`` to group a patient's
records.

Offsets count the characters of the CDATA text as stored, a leading newline
included. An XML parser reads every ``\\r\\n`` or lone ``\\r`` as ``\\n`` (XML 1.0
section 2.11), so where the CDATA holds carriage returns the note text is the
CDATA as stored (``\\r\\n`` two characters) if every tag fits it, else the
parser's text if every tag fits that; a tag that fits neither is an error. A
``text`` attribute must equal the text at its offsets, as XML reads an attribute
written with that text (section 3.3.3: entities such as ``&amp;`` decoded, a
literal tab, newline or ``\\r\\n`` one space). A file without ``TAGS`` is refused:
it is not annotated (the 2014 release's unlabelled test files have only
``TEXT``); a note without PHI has an empty ``<TAGS/>``.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from synthdeid.errors import InputError
from synthdeid.notes import Note, Span
from synthdeid.readers.base import CorpusReader, decode_bytes, register, surface_mismatch

# TEXT as the 2014 files write it: one CDATA section and nothing around it
_CDATA_TEXT = re.compile(r"<TEXT><!\[CDATA\[(.*?)\]\]></TEXT>", re.DOTALL)


def xml_line_ends(text: str) -> str:
    """``text`` as an XML parser reads it: ``\\r\\n`` and a lone ``\\r`` become ``\\n``."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def as_attribute(text: str) -> str:
    """``text`` written literally into an attribute, as XML reads it back (3.3.3)."""
    return xml_line_ends(text).replace("\t", " ").replace("\n", " ")


@dataclass(frozen=True)
class Tag:
    """One child of ``TAGS``: its record name, offsets, stated surface and category."""

    record: str
    start: int
    end: int
    surface: str | None
    category: str

    def misfit(self, text: str, *, path: Path) -> InputError | None:
        """Why the tag does not fit ``text`` (offsets out of range, another surface), or None."""
        if not 0 <= self.start < self.end <= len(text):
            return InputError(
                path,
                self.record,
                f"offsets {self.start}-{self.end} out of range for a text of "
                f"{len(text)} characters",
            )
        actual = text[self.start : self.end]
        if self.surface is not None and self.surface not in (actual, as_attribute(actual)):
            where = f"{self.start}-{self.end}"
            return InputError(path, self.record, surface_mismatch(self.surface, actual, where))
        return None


def _int_attr(tag: ET.Element, name: str, *, path: Path, record: str) -> int:
    value = tag.get(name)
    if value is None:
        raise InputError(path, record, f"no {name} attribute")
    if not re.fullmatch(r"-?[0-9]+", value):
        # the value is not quoted: it is file content
        raise InputError(path, record, f"attribute {name} is not an integer")
    return int(value)


def read_tag(element: ET.Element, *, path: Path) -> Tag:
    record = f"tag {element.get('id', '?')} <{element.tag}>"
    return Tag(
        record=record,
        start=_int_attr(element, "start", path=path, record=record),
        end=_int_attr(element, "end", path=path, record=record),
        surface=element.get("text"),
        category=element.get("TYPE") or element.tag,
    )


def note_texts(content: str, parsed: str) -> list[str]:
    """The note texts the offsets may count, in order of preference: the CDATA as
    stored where it holds carriage returns (which the parser made newlines), then
    the parser's text."""
    match = _CDATA_TEXT.search(content)
    stored = match.group(1) if match else parsed
    if "\r" in stored and xml_line_ends(stored) == parsed:
        return [stored, parsed]
    return [parsed]


def fitting_text(texts: list[str], tags: list[Tag], *, path: Path) -> str:
    """The first of ``texts`` that every tag fits; else the first text's first misfit."""
    misfits = []
    for text in texts:
        misfit = next((m for tag in tags if (m := tag.misfit(text, path=path))), None)
        if misfit is None:
            return text
        misfits.append(misfit)
    first = misfits[0]
    if len(texts) == 1:
        raise first
    raise InputError(
        first.path,
        first.record,
        first.problem,
        "the offsets fit neither the text as stored (\\r\\n two characters) nor as XML "
        "reads it (\\r\\n one newline)",
    )


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
        tags_el = root.find("TAGS")
        if tags_el is None:
            raise InputError(
                xml_path,
                None,
                "no TAGS element: the file is not annotated",
                "a note without PHI has an empty <TAGS/>",
            )
        tags = [read_tag(element, path=xml_path) for element in tags_el]
        text = fitting_text(note_texts(content, text_el.text), tags, path=xml_path)
        self.surfaces_verified += sum(tag.surface is not None for tag in tags)
        label_map = self.options.label_map
        spans = [
            Span(
                tag.start,
                tag.end,
                label_map.to_canonical(tag.category, path=xml_path, record=tag.record),
            )
            for tag in tags
        ]
        return self.file_note(xml_path, text, spans, spans_file=xml_path, kind="note")

    def notes(self, path: Path) -> Iterator[Note]:
        """One XML file at a time, in file name order (a folder) or the one file."""
        files = self.input_files(path) if path.is_dir() else [path]
        if not files:
            raise InputError(path, None, "no .xml files in the i2b2 folder")
        if not files[0].exists():
            raise InputError(files[0], None, "file not found")
        return (self.read_file(f) for f in files)
