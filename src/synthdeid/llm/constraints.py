"""Answer shapes a backend can enforce while decoding: a JSON note with fixed placeholders.

A :class:`NoteShape` describes the one answer form template synthesis wants:
the JSON object ``{"note": "<text>"}``. With ``placeholders=None`` the text is
any JSON string content (JSON-only decoding). With a tuple of placeholders the
text is free segments joined by exactly those placeholders, in that order: a
segment may not contain ``[``, ``]``, ``{``, ``}`` or a double quote, so no
other placeholder, no pseudo-placeholder and no early end can be written, and
a small model can then only fail on length, copying or content, which the
template validator still judges. ``()`` is a note without any placeholder.
``max_chars`` optionally bounds each free segment (one entry per segment, in
order; an escape sequence counts as one character), so that a model that
would ramble on must move to the next placeholder or end the note;
``min_chars`` likewise sets each segment's least length, so that one that
would stop after a line must go on.

One shape, two enforcers, built from the same :meth:`NoteShape.parts`:

* :meth:`NoteShape.gbnf` is a llama.cpp GBNF grammar, sent per request to an
  OpenAI-compatible llama.cpp server (``grammar`` field);
* :class:`ShapeMatcher` is the same language as a character-level state
  machine, which the transformers backend turns into a logits processor.

Segments allow raw line breaks and tabs (notes have layout; the project's
JSON answer parser accepts raw control characters inside strings) and the
escapes ``\\"``, ``\\\\``, ``\\/``, ``\\n``, ``\\r``, ``\\t``; every other control
character is banned.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# characters a free text segment may never contain (besides control characters
# other than line break, carriage return and tab)
STRUCTURAL = frozenset('"\\[]{}')
ESCAPES = frozenset('"\\/nrt')
_ALLOWED_CONTROLS = frozenset("\n\r\t")


@dataclass(frozen=True)
class Literal:
    """Text the answer must contain verbatim at this point."""

    text: str


@dataclass(frozen=True)
class Free:
    """Free text: JSON string content; ``brackets``: whether ``[]{}`` may appear;
    at least ``min_chars`` and at most ``max_chars`` characters (None: unbounded)."""

    brackets: bool
    max_chars: int | None = None
    min_chars: int = 0


Part = Literal | Free


@dataclass(frozen=True)
class NoteShape:
    """The answer ``{"<key>": "<text>"}``; see the module docstring for ``placeholders``."""

    key: str = "note"
    placeholders: tuple[str, ...] | None = None
    max_chars: tuple[int, ...] | None = None
    min_chars: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        segments = 1 if self.placeholders is None else len(self.placeholders) + 1
        for name, limits in (("max_chars", self.max_chars), ("min_chars", self.min_chars)):
            if limits is not None and (len(limits) != segments or any(n < 0 for n in limits)):
                raise ValueError(
                    f"{name} needs {segments} limit(s) >= 0, one per free segment, not {limits!r}"
                )
        if (
            self.max_chars is not None
            and self.min_chars is not None
            and any(low > high for low, high in zip(self.min_chars, self.max_chars, strict=True))
        ):
            raise ValueError("min_chars may not exceed max_chars in any segment")
        if not self.key or any(c in STRUCTURAL or ord(c) < 32 for c in self.key):
            raise ValueError(f"a JSON key of plain characters is needed, not {self.key!r}")
        for placeholder in self.placeholders or ():
            if not placeholder or any(ord(c) < 32 or c in '"\\' for c in placeholder):
                raise ValueError(f"placeholder {placeholder!r} cannot go into a JSON string")

    @property
    def mode(self) -> str:
        """``json`` (any string) or ``placeholders`` (text joined by fixed placeholders)."""
        return "json" if self.placeholders is None else "placeholders"

    def canonical(self) -> dict[str, Any]:
        """What determines the shape, JSON-ready (part of a request's cache key)."""
        placeholders = None if self.placeholders is None else list(self.placeholders)
        canonical: dict[str, Any] = {"key": self.key, "placeholders": placeholders}
        if self.max_chars is not None:
            canonical["max_chars"] = list(self.max_chars)
        if self.min_chars is not None:
            canonical["min_chars"] = list(self.min_chars)
        return canonical

    def parts(self) -> list[Part]:
        """The answer as a sequence of literals and free segments."""
        opening = Literal("{" + json.dumps(self.key) + ': "')
        closing = Literal('"}')
        count = 1 if self.placeholders is None else len(self.placeholders) + 1
        highs = self.max_chars or (None,) * count
        lows = self.min_chars or (0,) * count
        if self.placeholders is None:
            return [opening, Free(True, highs[0], lows[0]), closing]
        parts: list[Part] = [opening, Free(False, highs[0], lows[0])]
        for i, placeholder in enumerate(self.placeholders, start=1):
            parts += [Literal(placeholder), Free(False, highs[i], lows[i])]
        return [*parts, closing]

    def gbnf(self) -> str:
        """The shape as a llama.cpp GBNF grammar (root rule ``root``)."""
        symbols = []
        for part in self.parts():
            if isinstance(part, Literal):
                symbols.append(_gbnf_string(part.text))
                continue
            char = "textchar" if part.brackets else "segchar"
            high = "" if part.max_chars is None else str(part.max_chars)
            bound = "*" if (part.min_chars, high) == (0, "") else f"{{{part.min_chars},{high}}}"
            symbols.append(f"{char}{bound}")
        rules = [
            "root ::= " + " ".join(symbols),
            r'segchar ::= [^"\\\[\]{}\x00-\x08\x0b\x0c\x0e-\x1f\x7f] | esc',
            r'textchar ::= [^"\\\x00-\x08\x0b\x0c\x0e-\x1f\x7f] | esc',
            r'esc ::= "\\" ["\\/nrt]',
        ]
        return "\n".join(rules) + "\n"


def _gbnf_string(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def free_char(char: str, brackets: bool) -> bool:
    """Whether ``char`` may stand unescaped in a free segment."""
    if ord(char) < 32 or char == "\x7f":
        return char in _ALLOWED_CONTROLS
    if char in '"\\':
        return False
    return brackets or char not in STRUCTURAL


@dataclass(frozen=True)
class MatchState:
    """Where a prefix of an answer stands in a shape's parts.

    ``part``: index into the parts (``len(parts)``: complete); ``offset``:
    characters of the current literal already matched, or of the current free
    segment written (an escape counts once); ``escape``: a free segment's
    backslash awaits its escaped character.
    """

    part: int = 0
    offset: int = 0
    escape: bool = False


class ShapeMatcher:
    """Character-level recogniser of a :class:`NoteShape`'s answers.

    :meth:`advance` feeds text to a state and returns the new state, or None
    when the text leaves the shape; :meth:`complete` says whether a state is a
    whole answer. A free segment ends where the next literal begins (its
    first character is not a free character, so the choice is never
    ambiguous) or when it is full.
    """

    def __init__(self, shape: NoteShape) -> None:
        self.shape = shape
        self.parts: Sequence[Part] = shape.parts()

    def start(self) -> MatchState:
        return MatchState()

    def complete(self, state: MatchState) -> bool:
        return state.part == len(self.parts)

    def advance(self, state: MatchState, text: str) -> MatchState | None:
        part, offset, escape = state.part, state.offset, state.escape
        parts = self.parts
        for char in text:
            while True:
                if part == len(parts):
                    return None  # nothing may follow a complete answer
                current = parts[part]
                if isinstance(current, Literal):
                    if current.text[offset] != char:
                        return None
                    offset += 1
                    if offset == len(current.text):
                        part, offset = part + 1, 0
                    break
                if escape:
                    if char not in ESCAPES:
                        return None
                    escape = False
                    break
                room = current.max_chars is None or offset < current.max_chars
                if room and char == "\\":
                    escape, offset = True, offset + 1
                    break
                if room and free_char(char, current.brackets):
                    offset += 1
                    break
                if offset < current.min_chars:
                    return None  # the segment may not end yet
                part, offset = part + 1, 0  # the segment ends: this char opens the next literal
        return MatchState(part, offset, escape)

    def matches(self, text: str) -> bool:
        """Whether ``text`` is a whole answer of the shape."""
        state = self.advance(self.start(), text)
        return state is not None and self.complete(state)
