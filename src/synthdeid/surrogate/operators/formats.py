"""Format-preserving surrogates for phone numbers and identifiers.

Every digit becomes a random digit and every letter a random ASCII letter of
the same case; everything else (separators, spaces, parentheses, ``+``) stays
where it was, so ``(555) 012-3456`` becomes something like ``(731) 590-2214``
and ``MRN-00417A`` something like ``QZD-83952K``. The surrogate has the same
length and shape as the original and is never equal to it.
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable

from synthdeid.surrogate.operators.base import Mention, SurrogateOperator, register

# redraws (each from its own HMAC stream) before the deterministic last resort
MAX_DRAWS = 8
# what replaces each character of a surface with no digit or letter
UNCHANGEABLE_FILL = "X"


def is_changeable(char: str) -> bool:
    """Whether a format-preserving surrogate replaces ``char`` (digit or letter)."""
    return char.isdecimal() or char.isalpha()


def scramble(surface: str, rng: random.Random) -> str:
    """Digits to random digits, letters to random ASCII letters of the same case.

    Non-ASCII digits become ASCII digits; uncased letters (e.g. CJK) become
    lowercase ASCII letters. Every other character is kept.
    """
    out = []
    for char in surface:
        if char.isdecimal():
            out.append(rng.choice(string.digits))
        elif char.isalpha():
            alphabet = string.ascii_uppercase if char.isupper() else string.ascii_lowercase
            out.append(rng.choice(alphabet))
        else:
            out.append(char)
    return "".join(out)


def _bump(surface: str) -> str:
    """The surface with its first digit or letter moved on by one (9 -> 0, z -> a)."""
    for index, char in enumerate(surface):
        if char.isdecimal():
            new = str((int(char) + 1) % 10)
        elif char.isalpha():
            alphabet = string.ascii_uppercase if char.isupper() else string.ascii_lowercase
            position = alphabet.find(char)
            new = alphabet[(position + 1) % 26] if position >= 0 else alphabet[0]
        else:
            continue
        return surface[:index] + new + surface[index + 1 :]
    raise ValueError("no digit or letter to change")


def preserve_format(
    surface: str,
    rng_for: Callable[[int], random.Random],
    accept: Callable[[str], bool] | None = None,
) -> str | None:
    """A format-preserving surrogate of ``surface``, different from it.

    ``rng_for(attempt)`` gives the random stream of each draw (attempt 0, 1, ...);
    a draw equal to the original, or one ``accept`` refuses (e.g. another
    original of the same patient), is redrawn. ``None`` when the surface has no
    digit or letter, so no surrogate of the same format can differ from it.
    """
    if not any(is_changeable(char) for char in surface):
        return None
    for attempt in range(MAX_DRAWS):
        candidate = scramble(surface, rng_for(attempt))
        if candidate != surface and (accept is None or accept(candidate)):
            return candidate
    # only reachable with vanishing probability (e.g. 10**-8 for one digit)
    return _bump(surface)


def unchangeable_fill(surface: str) -> str:
    """The stand-in for a surface with no digit or letter: ``X`` at its length."""
    return UNCHANGEABLE_FILL * max(1, len(surface))


@register
class FormatPreservingOperator(SurrogateOperator):
    """Digit for digit, letter for letter (same case), other characters kept.

    For PHONE and ID mentions. The result has the original's length and
    separators and always differs from it; a draw equal to another original of
    its scope is redrawn. A surface without any digit or letter (``"--"``)
    cannot change while keeping its format; it becomes ``X``
    repeated to its length (so it no longer matches the original) and is
    counted as ``format_unchangeable``.
    """

    name = "format_preserving"

    def replace(self, mention: Mention) -> str:
        def rng_for(attempt: int) -> random.Random:
            return self.rng(mention) if attempt == 0 else self.rng(mention, f"redraw {attempt}")

        def accept(candidate: str) -> bool:
            return not self.is_original(mention, candidate)

        surrogate = preserve_format(mention.surface, rng_for, accept)
        if surrogate is None:
            self.counts["format_unchangeable"] += 1
            return unchangeable_fill(mention.surface)
        self.counts["format_preserved"] += 1
        return surrogate
