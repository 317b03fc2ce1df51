"""BRAT standoff: a folder of ``<doc>.txt`` files, each with a ``<doc>.ann``.

Text-bound annotations (``T<n>\\t<Type> <start> <end>[;<start> <end>...]\\t<surface>``)
become spans; a discontinuous annotation becomes one span per fragment. The
surface column is required and must equal the text at the offsets (fragments
joined by a space, or by nothing). Relations, events, attributes and notes
(``R``, ``E``, ``A``, ``#`` lines) are not spans and are skipped. The note id is
the file stem. A ``.txt`` needs its ``.ann`` (an empty one for a note without
PHI) and an ``.ann`` its ``.txt``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from synthdeid.errors import InputError
from synthdeid.notes import Note, Span
from synthdeid.readers.base import CorpusReader, read_text, register, surface_mismatch


def parse_ann(
    content: str, text: str, *, path: Path
) -> tuple[list[tuple[str, int, int, str]], int]:
    """Parse text-bound annotations.

    Returns (record, start, end, type) for each fragment of each annotation,
    and how many annotations had their stated surface checked (all of them).
    """
    verified = 0
    fragments: list[tuple[str, int, int, str]] = []
    for number, line in enumerate(content.splitlines(), start=1):
        if not line.startswith("T"):
            continue
        record = f"line {number}"
        parts = line.split("\t")
        if len(parts) < 2:
            raise InputError(
                path, record, "malformed text-bound annotation: no tab after the annotation id"
            )
        record = f"line {number} ({parts[0]})"
        type_and_offsets = parts[1].split(" ", 1)
        if len(type_and_offsets) != 2:
            raise InputError(path, record, f"no offsets in {parts[1]!r}")
        label, offsets = type_and_offsets
        surfaces = []
        pieces = []
        for piece in offsets.split(";"):
            bounds = piece.split()
            if len(bounds) != 2 or not all(b.isdecimal() for b in bounds):
                raise InputError(path, record, f"malformed offsets {offsets!r}")
            start, end = int(bounds[0]), int(bounds[1])
            if not 0 <= start < end <= len(text):
                raise InputError(
                    path,
                    record,
                    f"offsets {start}-{end} out of range for a text of {len(text)} characters",
                )
            pieces.append((start, end))
            surfaces.append(text[start:end])
        if len(parts) < 3:
            raise InputError(
                path,
                record,
                "no surface column (expected T<n><TAB><type> <start> <end><TAB><surface>)",
                "without the surface the offsets cannot be checked against the text",
            )
        # BRAT joins fragment surfaces with a single space
        stated = parts[2]
        if stated != " ".join(surfaces) and stated != "".join(surfaces):
            where = ";".join(f"{start}-{end}" for start, end in pieces)
            raise InputError(path, record, surface_mismatch(stated, " ".join(surfaces), where))
        verified += 1
        fragments.extend((record, start, end, label) for start, end in pieces)
    return fragments, verified


@register
class BratReader(CorpusReader):
    name = "brat"

    @classmethod
    def input_files(cls, path: Path) -> list[Path]:
        files = []
        for txt in sorted(path.glob("*.txt")):
            files.append(txt)
            files.append(txt.with_suffix(".ann"))
        return files

    def notes(self, path: Path) -> Iterator[Note]:
        """One ``.txt``/``.ann`` pair at a time, in file name order.

        The folder is checked whole first, from the names alone: a ``.txt`` in
        it, every ``.txt`` with its ``.ann`` and every ``.ann`` with its ``.txt``.
        """
        if not path.is_dir():
            raise InputError(path, None, "a BRAT corpus must be a folder of .txt/.ann pairs")
        texts = sorted(path.glob("*.txt"))
        if not texts:
            raise InputError(path, None, "no .txt files in the BRAT folder")
        for ann in sorted(path.glob("*.ann")):
            if not ann.with_suffix(".txt").exists():
                raise InputError(
                    ann,
                    None,
                    f"text file missing for {ann.name}",
                    f"its annotations need {ann.with_suffix('.txt').name}",
                )
        for txt in texts:
            if not txt.with_suffix(".ann").exists():
                raise InputError(
                    txt.with_suffix(".ann"), None, f"annotation file missing for {txt.name}"
                )
        return (self._note(txt) for txt in texts)

    def _note(self, txt: Path) -> Note:
        ann = txt.with_suffix(".ann")
        text = read_text(txt, self.options.encoding)
        fragments, verified = parse_ann(read_text(ann, self.options.encoding), text, path=ann)
        self.surfaces_verified += verified
        spans = [
            Span(start, end, self.options.label_map.to_canonical(label, path=ann, record=record))
            for record, start, end, label in fragments
        ]
        return self.file_note(txt, text, spans, spans_file=ann, kind="document")
