"""Finding mentions of a surface in text: whole word, any case, flexible whitespace."""

from __future__ import annotations

import re
from _sre import unicode_tolower
from collections import deque
from collections.abc import Iterable, Sequence
from functools import lru_cache
from re._casefix import _EXTRA_CASES

from synthdeid.notes import Note


def surface_pattern(surface: str) -> re.Pattern[str]:
    """Whole-word, case-insensitive, whitespace-flexible pattern for a surface."""
    body = r"\s+".join(re.escape(token) for token in surface.split())
    return re.compile(rf"(?<![A-Za-z0-9]){body}(?![A-Za-z0-9])", re.IGNORECASE)


def surface_mentions(text: str, surface: str) -> list[tuple[int, int]]:
    return [m.span() for m in surface_pattern(surface).finditer(text)] if surface.strip() else []


_ASCII_ALNUM = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")


@lru_cache(maxsize=4096)
def _fold_char(char: str) -> str:
    """One representative of ``char``'s class under re.IGNORECASE; whitespace is a space.

    surface_pattern compiles with re.IGNORECASE, under which two characters are
    equal when the regex engine's lowercase forms of them are, or are listed
    together in its table of extra case equivalences (the long s and "s", the
    Kelvin sign and "k", ...). This uses the same two sources, so the folded
    characters are equal exactly when the pattern's comparison says so.
    """
    if char.isspace():
        return " "
    lower = unicode_tolower(ord(char))
    return chr(min((lower, *_EXTRA_CASES.get(lower, ()))))


def _fold(text: str) -> tuple[str, list[int]]:
    """``text`` case folded with each whitespace run cut to one space.

    Returns the folded text and, for each of its characters, the index of the
    character of ``text`` it comes from (a run's first character for a space).
    """
    table = {ord(c): f for c in set(text) if (f := _fold_char(c)) != c}
    spaced = text.translate(table)
    folded: list[str] = []
    origin: list[int] = []
    for run in re.finditer(r" +|[^ ]+", spaced):
        if run.group()[0] == " ":
            folded.append(" ")
            origin.append(run.start())
        else:
            folded.append(run.group())
            origin.extend(range(run.start(), run.end()))
    return "".join(folded), origin


class MentionFinder:
    """Finds the mentions of many surfaces in one pass over a text.

    For every surface, :meth:`find` gives exactly what :func:`surface_mentions`
    gives (whole word, any case, any whitespace between the surface's words;
    leftmost non-overlapping mentions), in time linear in the text, the
    surfaces and the mentions found, however many surfaces there are.

    Text and surfaces are folded the way re.IGNORECASE compares characters and
    their whitespace runs cut to one space; an Aho-Corasick automaton over the
    folded surfaces then reports every occurrence, and an occurrence is a
    mention when the folded characters either side of it are not ASCII letters
    or digits (the pattern's ``(?<![A-Za-z0-9])`` and ``(?![A-Za-z0-9])`` under
    re.IGNORECASE, which compare folded characters too).
    """

    def __init__(self, surfaces: Sequence[str]) -> None:
        self.surfaces = list(surfaces)
        self._keys: list[str] = []  # distinct folded surfaces
        self._surfaces_of: list[list[int]] = []  # key -> indices of its surfaces
        index_of: dict[str, int] = {}
        for position, surface in enumerate(self.surfaces):
            key, _ = _fold(" ".join(surface.split()))
            if not key:
                continue
            if key not in index_of:
                index_of[key] = len(self._keys)
                self._keys.append(key)
                self._surfaces_of.append([])
            self._surfaces_of[index_of[key]].append(position)
        self._build()

    def _build(self) -> None:
        goto: list[dict[str, int]] = [{}]
        ends: list[int] = [-1]  # the key ending at a state, or -1
        for number, key in enumerate(self._keys):
            state = 0
            for char in key:
                following = goto[state].get(char)
                if following is None:
                    following = len(goto)
                    goto[state][char] = following
                    goto.append({})
                    ends.append(-1)
                state = following
            ends[state] = number
        fail = [0] * len(goto)
        # nearest state on the failure chain at which a key ends (0: none)
        output = [0] * len(goto)
        queue = deque(goto[0].values())
        while queue:
            state = queue.popleft()
            for char, following in goto[state].items():
                queue.append(following)
                back = fail[state]
                while back and char not in goto[back]:
                    back = fail[back]
                target = goto[back].get(char, 0)
                fail[following] = target if target != following else 0
                link = fail[following]
                output[following] = link if ends[link] >= 0 else output[link]
        self._goto, self._fail, self._ends, self._output = goto, fail, ends, output

    def find(self, text: str) -> list[list[tuple[int, int]]]:
        """For each surface (in the given order), its mentions in ``text``, left to right."""
        found: list[list[tuple[int, int]]] = [[] for _ in self.surfaces]
        if not self._keys:
            return found
        folded, origin = _fold(text)
        goto, fail, ends, output = self._goto, self._fail, self._ends, self._output
        keys = self._keys
        last = len(folded) - 1
        # per key: where its last accepted mention ends (mentions of a key do not overlap)
        free_from = [0] * len(keys)
        state = 0
        for position, char in enumerate(folded):
            while state and char not in goto[state]:
                state = fail[state]
            state = goto[state].get(char, 0)
            hit = state if ends[state] >= 0 else output[state]
            if not hit:
                continue
            if position < last and folded[position + 1] in _ASCII_ALNUM:
                continue  # the mention would end inside a word
            while hit:
                number = ends[hit]
                start = position - len(keys[number]) + 1
                if start >= free_from[number] and (
                    start == 0 or folded[start - 1] not in _ASCII_ALNUM
                ):
                    free_from[number] = position + 1
                    mention = (origin[start], origin[position] + 1)
                    for surface in self._surfaces_of[number]:
                        found[surface].append(mention)
                hit = output[hit]
        return found


def surfaces_left(note: Note, surfaces: Iterable[str]) -> list[str]:
    """Surfaces still present in the note (whole word, any case) outside its spans.

    Used on masked notes (spans = placeholders) and on surrogate output (spans =
    surrogates): a surface found here survived the replacement somewhere else in
    the text, usually a mention the annotators missed.
    """
    pieces: list[str] = []
    cursor = 0
    for span in sorted(note.spans):
        pieces.append(note.text[cursor : span.start])
        pieces.append(" " * (span.end - span.start))
        cursor = max(cursor, span.end)
    pieces.append(note.text[cursor:])
    blanked = "".join(pieces)
    candidates = sorted(set(surfaces))
    mentions = MentionFinder(candidates).find(blanked)
    return [surface for surface, found in zip(candidates, mentions, strict=True) if found]


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
