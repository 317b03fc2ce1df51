"""Named subsets of notes for the synthetic-vs-real diagnostics, as the command line names them.

``NAME=PATH[:PART]`` (:class:`FileSubset`) is the notes of a notes table,
optionally only some split parts (the text after the last ``:``; a path that
holds a ``:`` is written with a trailing one); the same name given again adds
another table's notes. ``NEW=BASE:pii`` or ``NEW=BASE:no-pii``
(:class:`DerivedSubset`) is the notes of an earlier subset with at least one
span, or with none. :func:`load_subsets` reads them in order, each table once.
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass
from pathlib import Path

from synthdeid.cli_types import input_file
from synthdeid.errors import ConfigError, InputError
from synthdeid.notes import UNSPLIT, Note, read_notes
from synthdeid.split import PARTS

log = logging.getLogger(__name__)

DERIVE_FILTERS = ("pii", "no-pii")
KNOWN_PARTS = (*PARTS, UNSPLIT)


@dataclass(frozen=True)
class FileSubset:
    """``NAME=PATH[:PART]``: notes of a table, optionally only some split parts."""

    name: str
    path: Path
    parts: tuple[str, ...] = ()  # empty: every note


@dataclass(frozen=True)
class DerivedSubset:
    """``NEW=BASE:pii|no-pii``: the notes of an earlier subset with / without spans."""

    name: str
    base: str
    keep: str


def _split_name(value: str, syntax: str) -> tuple[str, str]:
    name, sep, rest = value.partition("=")
    if not sep or not name.strip() or not rest:
        raise argparse.ArgumentTypeError(f"expected {syntax}, got {value!r}")
    return name.strip(), rest


def parse_subset(value: str) -> FileSubset:
    """Parse ``NAME=PATH[:PART]`` (see the module docstring for the exact rule)."""
    name, rest = _split_name(value, "NAME=PATH[:PART]")
    path, sep, part = rest.rpartition(":")
    if not sep:
        path, part = rest, ""
    if not path:
        raise argparse.ArgumentTypeError(f"no PATH in {value!r}; expected NAME=PATH[:PART]")
    parts = tuple(dict.fromkeys(p.strip() for p in part.split(",") if p.strip()))
    subset_file = input_file(path)
    assert subset_file is not None  # None only for an empty value
    return FileSubset(name, subset_file, parts)


def parse_derived(value: str) -> DerivedSubset:
    """Parse ``NEW=BASE:pii`` or ``NEW=BASE:no-pii``."""
    name, rest = _split_name(value, "NEW=BASE:pii|no-pii")
    base, sep, keep = rest.rpartition(":")
    if not sep or not base.strip() or keep not in DERIVE_FILTERS:
        raise argparse.ArgumentTypeError(f"expected NEW=BASE:pii or NEW=BASE:no-pii, got {value!r}")
    return DerivedSubset(name, base.strip(), keep)


def select_parts(notes: list[Note], spec: FileSubset) -> list[Note]:
    """The notes of ``spec.parts`` (all when none); an unknown, absent part is an error."""
    if not spec.parts:
        return notes
    present = {note.split for note in notes}
    for part in spec.parts:
        if part in present:
            continue
        if part not in KNOWN_PARTS:
            raise InputError(
                spec.path,
                None,
                f"subset {spec.name!r}: no notes in part {part!r}",
                f"parts present: {sorted(present)}",
            )
        log.warning("subset %r: %s has no notes in part %r", spec.name, spec.path, part)
    return [note for note in notes if note.split in spec.parts]


def load_subsets(specs: list[FileSubset | DerivedSubset]) -> dict[str, list[Note]]:
    """Read every subset, in order; each table is read once however often it is named."""
    tables: dict[Path, list[Note]] = {}
    subsets: dict[str, list[Note]] = {}
    from_files: set[str] = set()
    for spec in specs:
        union = isinstance(spec, FileSubset) and spec.name in from_files
        if spec.name in subsets and not union:
            raise ConfigError(f"subset name {spec.name!r} is given twice")
        if isinstance(spec, FileSubset):
            if spec.path not in tables:
                tables[spec.path] = read_notes(spec.path)
            subsets.setdefault(spec.name, []).extend(select_parts(tables[spec.path], spec))
            from_files.add(spec.name)
        else:
            if spec.base not in subsets:
                raise ConfigError(
                    f"--derive {spec.name!r}: base subset {spec.base!r} is not defined before it"
                    f" (defined: {list(subsets)})"
                )
            want_spans = spec.keep == "pii"
            subsets[spec.name] = [n for n in subsets[spec.base] if bool(n.spans) == want_spans]
    return subsets
