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


_TOKEN_RE = re.compile(r"[A-Za-z0-9]+|[^\sA-Za-z0-9]")


def _tokens(text: str) -> list[re.Match[str]]:
    return list(_TOKEN_RE.finditer(text))


class SurfaceIndex:
    """Finds any of many surfaces in a text at once: whole word, any case, any spacing.

    Surfaces and text are cut into tokens (runs of letters and digits, and
    single punctuation marks); a mention is a run of text tokens equal, case
    folded, to a surface's tokens. So "Dr. Smith" is found in "dr.  SMITH," but
    "Ann" is not found in "Annual". Lookups are set probes of token n-grams,
    so thousands of surfaces cost no more than a few. Surfaces shorter than
    ``min_chars`` (initials, two-digit numbers) would match nearly everywhere:
    they are skipped and counted in ``skipped``.
    """

    def __init__(self, surfaces: Iterable[str], *, min_chars: int = 3) -> None:
        self.keys: set[tuple[str, ...]] = set()
        self.skipped = 0
        for surface in surfaces:
            if len("".join(surface.split())) < min_chars:
                self.skipped += 1
                continue
            key = tuple(m.group().casefold() for m in _tokens(surface))
            if key:
                self.keys.add(key)
        self.longest = max((len(k) for k in self.keys), default=0)

    def __len__(self) -> int:
        return len(self.keys)

    def find(self, text: str) -> list[tuple[int, int]]:
        """Character ranges of the mentions, left to right, longest first at a start."""
        tokens = _tokens(text)
        folded = [m.group().casefold() for m in tokens]
        found: list[tuple[int, int]] = []
        for i in range(len(tokens)):
            for n in range(min(self.longest, len(tokens) - i), 0, -1):
                if tuple(folded[i : i + n]) in self.keys:
                    found.append((tokens[i].start(), tokens[i + n - 1].end()))
                    break
        return found

    def contains_any(self, text: str) -> bool:
        return bool(self.keys) and bool(self.find(text))
