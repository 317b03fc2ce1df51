"""Finding mentions of a surface in text: whole word, any case, flexible whitespace."""

from __future__ import annotations

import re
from collections.abc import Iterable

from synthdeid.notes import Note


def surface_pattern(surface: str) -> re.Pattern[str]:
    """Whole-word, case-insensitive, whitespace-flexible pattern for a surface."""
    body = r"\s+".join(re.escape(token) for token in surface.split())
    return re.compile(rf"(?<![A-Za-z0-9]){body}(?![A-Za-z0-9])", re.IGNORECASE)


def surface_mentions(text: str, surface: str) -> list[tuple[int, int]]:
    return [m.span() for m in surface_pattern(surface).finditer(text)] if surface.strip() else []


def surfaces_left(note: Note, surfaces: Iterable[str]) -> list[str]:
    """Surfaces still present in the note (whole word, any case) outside its spans.

    Used on masked notes (spans = placeholders) and on surrogate output (spans =
    surrogates): a surface found here survived the replacement somewhere else in
    the text, usually a mention the annotators missed.
    """
    text = list(note.text)
    for span in note.spans:
        text[span.start : span.end] = " " * (span.end - span.start)
    blanked = "".join(text)
    return sorted({s for s in surfaces if surface_mentions(blanked, s)})
