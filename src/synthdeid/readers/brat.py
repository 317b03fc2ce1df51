"""BRAT standoff: a folder of ``<doc>.txt`` files, each with a ``<doc>.ann``.

Text-bound annotations (``T<n>\\t<Type> <start> <end>[;<start> <end>...]\\t<surface>``)
become spans; a discontinuous annotation becomes one span per fragment. Offsets
count Unicode code points of the ``.txt`` as stored (as brat counts them: not
bytes). The surface column is required and must equal the text at the offsets
(fragments joined by a space, or by nothing); it runs to the end of the line, so
it may hold a tab. The ``.ann`` is read a line at a time, lines ending at ``\\n``
(a ``\\r`` before it dropped): U+2028, U+0085, a form feed, ... are text, unlike
``str.splitlines()``. Attributes, relations, events, normalisations, equivalences
and notes (``A``/``M``, ``R``, ``E``, ``N``, ``*``, ``#`` lines) are not spans and
are skipped, and so are the ``T`` lines an event names as its trigger (brat's
entities are the text-bound annotations that are not triggers); a line starting
with ``T`` whose first column is no annotation id is an error. The note id is
the file stem. A ``.txt`` needs its ``.ann`` (an empty one for a note without
PHI: brat writes one when it opens a document that has none) and an ``.ann``
its ``.txt``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from synthdeid.errors import InputError
from synthdeid.notes import Note, Span
from synthdeid.readers.base import CorpusReader, read_text, register, surface_mismatch

OFFSETS_FORMAT = "expected <start> <end>, fragments joined by ';'"


def ann_lines(content: str) -> list[str]:
    """The lines of an ``.ann`` file: split at ``\\n`` only, a ``\\r`` before it dropped."""
    return [line.removesuffix("\r") for line in content.split("\n")]


def event_triggers(lines: list[str]) -> set[str]:
    """The ids of the ``T`` annotations events name as triggers (``E1\\tType:T3 Arg:T1``)."""
    triggers: set[str] = set()
    for line in lines:
        if line.startswith("E"):
            parts = line.split("\t")
            if len(parts) > 1:
                trigger = parts[1].split(" ", 1)[0]
                triggers.add(trigger.rpartition(":")[2])
    return triggers


def parse_offsets(
    offsets: str, text: str, *, path: Path, record: str, surface_missing: bool
) -> list[tuple[int, int]]:
    """The fragments of an offsets column; errors describe it without quoting it."""
    pieces = []
    for piece in offsets.split(";"):
        bounds = piece.split()
        if len(bounds) != 2 or not all(b.isdecimal() for b in bounds):
            # "T1\tPATIENT 0 4 Jane": brat itself asks "Using space instead of tab?"
            spaced = surface_missing and len(bounds) > 2 and bounds[1].isdecimal()
            hint = "a space instead of a tab before the surface?" if spaced else None
            raise InputError(path, record, f"malformed offsets ({OFFSETS_FORMAT})", hint)
        start, end = int(bounds[0]), int(bounds[1])
        if not 0 <= start < end <= len(text):
            raise InputError(
                path,
                record,
                f"offsets {start}-{end} out of range for a text of {len(text)} characters",
            )
        pieces.append((start, end))
    return pieces


def parse_ann(
    content: str, text: str, *, path: Path
) -> tuple[list[tuple[str, int, int, str]], int]:
    """Parse text-bound annotations.

    Returns (record, start, end, type) for each fragment of each annotation
    that is not an event trigger, and how many annotations had their stated
    surface checked (all of them).
    """
    verified = 0
    fragments: list[tuple[str, int, int, str]] = []
    lines = ann_lines(content)
    triggers = event_triggers(lines)
    for number, line in enumerate(lines, start=1):
        if not line.startswith("T"):
            continue
        record = f"line {number}"
        parts = line.split("\t", 2)
        if len(parts) < 2:
            raise InputError(
                path, record, "malformed text-bound annotation: no tab after the annotation id"
            )
        if not re.fullmatch(r"T[A-Za-z]*[0-9]+\S*", parts[0]):
            # a stray line that starts with T: its first column is text, not quoted
            raise InputError(path, record, "malformed annotation id (expected T<number>)")
        if parts[0] in triggers:
            continue
        record = f"line {number} ({parts[0]})"
        type_and_offsets = parts[1].split(" ", 1)
        if len(type_and_offsets) != 2:
            raise InputError(path, record, f"no offsets after the type ({OFFSETS_FORMAT})")
        label, offsets = type_and_offsets
        pieces = parse_offsets(
            offsets, text, path=path, record=record, surface_missing=len(parts) < 3
        )
        if len(parts) < 3:
            raise InputError(
                path,
                record,
                "no surface column (expected T<n><TAB><type> <start> <end><TAB><surface>)",
                "without the surface the offsets cannot be checked against the text",
            )
        # BRAT joins fragment surfaces with a single space
        surfaces = [text[start:end] for start, end in pieces]
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
                    txt.with_suffix(".ann"),
                    None,
                    f"annotation file missing for {txt.name}",
                    "a note without PHI needs an empty .ann, as brat writes one",
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
