"""Masking notes: PHI spans become typed, numbered placeholders ([[DOCTOR_1]]).

Within a note, one number per distinct surface form of a label (compared
case- and whitespace-insensitively), so repeated mentions share a
placeholder. With ``propagate`` on, further whole-word mentions of a gold
surface that the annotators did not mark are masked too (with the same
placeholder), so the masked text contains none of the note's gold surfaces.
The removed values go to a separate, local-only artifact; only masked text
may ever leave the machine. That artifact records, in its provenance, the
digest of the masked notes it was written with (:func:`bind_removed_values`),
so a step that reads both refuses a removed-values table of another corpus or
run (:func:`check_removed_values`): the request guard must search the surfaces
of the very notes it screens.
"""

from __future__ import annotations

import json
import logging
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from synthdeid.artifacts import PROVENANCE_KEY, file_digest, open_parquet
from synthdeid.errors import ConfigError, InputError
from synthdeid.labels import coarse_view
from synthdeid.mentions import MentionFinder
from synthdeid.notes import Note, Span, splice

log = logging.getLogger(__name__)

PLACEHOLDER_RE = re.compile(r"\[\[([A-Z][A-Z0-9]*)_(\d+)\]\]")
LABEL_VIEWS = ("canonical", "coarse")

REMOVED_SCHEMA = pa.schema(
    [
        pa.field("note_id", pa.string(), nullable=False),
        pa.field("patient_id", pa.string(), nullable=False),
        pa.field("placeholder", pa.string(), nullable=False),
        pa.field("label", pa.string(), nullable=False),
        pa.field("surface", pa.string(), nullable=False),
        pa.field("start", pa.int32(), nullable=False),
        pa.field("end", pa.int32(), nullable=False),
        pa.field("masked_start", pa.int32(), nullable=False),
        pa.field("masked_end", pa.int32(), nullable=False),
        pa.field("propagated", pa.bool_(), nullable=False),
    ],
    metadata={b"synthdeid.local_only": b"true"},
)


def placeholder(label: str, number: int) -> str:
    return f"[[{label}_{number}]]"


def normalize_surface(surface: str) -> str:
    return " ".join(surface.split()).casefold()


def unlabelled_mentions(text: str, spans: Sequence[Span]) -> list[Span]:
    """Whole-word mentions of the spans' surfaces that no span covers.

    Longer surfaces are matched first, so an unmarked "John Smith" is one
    mention, not "Smith" inside it. Each mention takes the label of the first
    gold span with that surface. All surfaces are found in one pass and each
    mention is checked against a per-character flag array, so the work grows
    linearly with the text and the mentions.
    """
    label_of: dict[str, tuple[str, str]] = {}
    for span in sorted(spans):
        key = normalize_surface(span.surface(text))
        label_of.setdefault(key, (span.surface(text), span.label))
    ordered = sorted(label_of.values(), key=lambda v: -len(v[0]))
    mentions = MentionFinder([surface for surface, _ in ordered]).find(text)
    # one flag per character: covered by a gold span or an accepted mention
    taken = bytearray(len(text))
    for span in spans:
        taken[span.start : span.end] = b"\x01" * (span.end - span.start)
    found: list[Span] = []
    for (_, label), places in zip(ordered, mentions, strict=True):
        for start, end in places:
            if taken.find(1, start, end) < 0:
                taken[start:end] = b"\x01" * (end - start)
                found.append(Span(start, end, label))
    return found


@dataclass(frozen=True)
class RemovedValue:
    """One masked mention: where it was, what it was, which placeholder took it."""

    note_id: str
    patient_id: str
    placeholder: str
    label: str
    surface: str
    start: int
    end: int
    masked_start: int
    masked_end: int
    propagated: bool


@dataclass(frozen=True)
class MaskedNote:
    note: Note
    removed: list[RemovedValue]


def mask_note(
    note: Note, view: Mapping[str, str] | None = None, propagate: bool = True
) -> MaskedNote:
    """Mask one note. ``view`` maps canonical labels to placeholder labels."""
    existing = PLACEHOLDER_RE.search(note.text)
    if existing:
        raise InputError(
            "notes table",
            f"note {note.note_id!r}",
            f"the text already contains placeholder-like {existing.group(0)!r} "
            f"at {existing.start()}",
            "masked and real placeholders would be indistinguishable",
        )
    extra = unlabelled_mentions(note.text, note.spans) if propagate else []
    gold = set(note.spans)
    mentions = sorted([*note.spans, *extra], key=lambda s: (s.start, s.end, s.label))
    numbers: dict[tuple[str, str], int] = {}
    per_label: Counter[str] = Counter()
    shown_spans: list[Span] = []
    tokens: list[str] = []
    normalized: dict[str, str] = {}  # surface -> normalize_surface(surface)
    for span in mentions:
        shown = view[span.label] if view is not None else span.label
        surface = span.surface(note.text)
        if surface not in normalized:
            normalized[surface] = normalize_surface(surface)
        key = (shown, normalized[surface])
        if key not in numbers:
            per_label[shown] += 1
            numbers[key] = per_label[shown]
        shown_spans.append(Span(span.start, span.end, shown))
        tokens.append(placeholder(shown, numbers[key]))
    text, spans = splice(note.text, shown_spans, tokens)
    removed = [
        RemovedValue(
            note_id=note.note_id,
            patient_id=note.patient_id,
            placeholder=token,
            label=span.label,
            surface=span.surface(note.text),
            start=span.start,
            end=span.end,
            masked_start=new.start,
            masked_end=new.end,
            propagated=span not in gold,
        )
        for span, new, token in zip(mentions, spans, tokens, strict=True)
    ]
    masked = note.with_text(text, spans)
    return MaskedNote(note=masked, removed=removed)


def removed_table(removed: Iterable[RemovedValue]) -> pa.Table:
    rows = [asdict(r) for r in removed]
    return pa.Table.from_pylist(rows, schema=REMOVED_SCHEMA)


# the removed-values table's provenance entry for the masked notes written with it
MASKED_NOTES_KEY = "masked_notes"


def bind_removed_values(provenance: Mapping[str, Any], masked: str | Path) -> dict[str, Any]:
    """``provenance`` for the removed-values table, with the path and digest of the masked
    notes file ``masked`` written with it (write that file first)."""
    record = {"path": str(masked), "digest": file_digest(masked)}
    return {**provenance, MASKED_NOTES_KEY: record}


def check_removed_values(removed: str | Path, masked: str | Path) -> None:
    """InputError unless the removed-values table ``removed`` was written with the masked
    notes ``masked`` (the digest it records is the file's: a byte-identical rerun pairs).

    Only the table's metadata is read; the message names both files, never a value.
    """
    metadata = open_parquet(removed).schema_arrow.metadata or {}
    try:
        provenance = json.loads(metadata.get(PROVENANCE_KEY, b"{}"))
        recorded = provenance.get(MASKED_NOTES_KEY) if isinstance(provenance, dict) else None
    except ValueError:  # provenance that is not JSON records nothing
        recorded = None
    if not isinstance(recorded, dict) or not isinstance(recorded.get("digest"), str):
        raise InputError(
            removed,
            None,
            "records no masked notes it was written with, so it cannot be checked against "
            f"{masked}",
            "give the removed values mask-seeds wrote with these masked notes (rerun it)",
        )
    if recorded["digest"] != file_digest(masked):
        raise InputError(
            removed,
            None,
            f"was written with other masked notes than {masked} (another corpus or "
            "mask-seeds run), so its surfaces are not those of these notes",
            "give the --removed table of the mask-seeds run that wrote --masked",
        )


def resolve_view(label_view: str, coarse: Mapping[str, str] | None) -> dict[str, str] | None:
    if label_view == "canonical":
        return None
    if label_view == "coarse":
        return coarse_view(coarse)
    raise ConfigError(f"mask.label_view must be one of {LABEL_VIEWS}, got {label_view!r}")
