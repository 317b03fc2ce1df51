"""Folding text to a canonical form before PHI surfaces are matched in it.

A surface can be written so that it looks the same to a reader (and to a
language model) but no longer equals itself character by character: with a
zero-width space or a soft hyphen inside, in fullwidth or mathematical
letters, with Cyrillic or Greek letters that look Latin, or split by a
hyphen. :func:`fold` undoes all of these but the hyphen, and
:func:`dash_variants` gives the two readings of a hyphen between letters
(removed: "Quack-enbush" is "Quackenbush"; a word break: "Zebulon-Quackenbush"
is "Zebulon Quackenbush"). Matching the variants of folded surfaces against
the variants of folded text finds a surface in any of these disguises.

:func:`fold`:

1. compatibility decomposition (NFKD: fullwidth, mathematical, circled and
   ligature forms become their plain letters and digits);
2. format characters (Unicode category Cf: zero-width spaces and joiners,
   soft hyphens, word joiners, byte-order marks, bidirectional controls) and
   combining marks (category Mn: accents, strike-through overlays) are
   removed;
3. letters that look Latin (:data:`CONFUSABLES`, Cyrillic and Greek) become
   the Latin letter, and every dash (category Pd, and the minus sign) becomes
   ``-``;
4. canonical composition (NFC).

All of it is one pass over the text (ASCII text is returned as is), so
folding is linear in the text's length. Folding may change the length of the
text: offsets into folded text are not offsets into the original.
"""

from __future__ import annotations

import re
import unicodedata

# Cyrillic and Greek letters drawn like Latin ones, by the Latin letter they pass for
CONFUSABLES: dict[str, str] = {
    # Cyrillic capitals
    "\u0405": "S", "\u0406": "I", "\u0408": "J", "\u0410": "A", "\u0412": "B",
    "\u0415": "E", "\u041a": "K", "\u041c": "M", "\u041d": "H", "\u041e": "O",
    "\u0420": "P", "\u0421": "C", "\u0422": "T", "\u0423": "Y", "\u0425": "X",
    "\u04ae": "Y", "\u04ba": "H", "\u04c0": "I", "\u051a": "Q", "\u051c": "W",
    # Cyrillic small letters
    "\u0430": "a", "\u0435": "e", "\u043a": "k", "\u043e": "o", "\u0440": "p",
    "\u0441": "c", "\u0443": "y", "\u0445": "x", "\u0455": "s", "\u0456": "i",
    "\u0458": "j", "\u04af": "y", "\u04bb": "h", "\u04cf": "l", "\u0501": "d",
    "\u051b": "q", "\u051d": "w",
    # Greek capitals
    "\u037f": "J", "\u0391": "A", "\u0392": "B", "\u0395": "E", "\u0396": "Z",
    "\u0397": "H", "\u0399": "I", "\u039a": "K", "\u039c": "M", "\u039d": "N",
    "\u039f": "O", "\u03a1": "P", "\u03a4": "T", "\u03a5": "Y", "\u03a7": "X",
    "\u03f9": "C",
    # Greek small letters
    "\u03b1": "a", "\u03b3": "y", "\u03b9": "i", "\u03ba": "k", "\u03bd": "v",
    "\u03bf": "o", "\u03c1": "p", "\u03c5": "u", "\u03c7": "x", "\u03f2": "c",
    "\u03f3": "j",
    # Latin letters without their dot
    "\u0131": "i", "\u0237": "j",
}  # fmt: skip

DASH = "-"
_REMOVED_CATEGORIES = frozenset({"Cf", "Mn"})
_MINUS_SIGN = "\u2212"
# a run of dashes with a letter on either side
_DASH_BETWEEN_LETTERS = re.compile(r"(?<=[^\W\d_])-+(?=[^\W\d_])")


def _fold_char(char: str) -> str:
    if char in CONFUSABLES:
        return CONFUSABLES[char]
    category = unicodedata.category(char)
    if category in _REMOVED_CATEGORIES:
        return ""
    if category == "Pd" or char == _MINUS_SIGN:
        return DASH
    return char


def fold(text: str) -> str:
    """``text`` in the canonical form described in the module docstring."""
    if text.isascii():
        return text
    decomposed = unicodedata.normalize("NFKD", text)
    folded = "".join(char if char.isascii() else _fold_char(char) for char in decomposed)
    return unicodedata.normalize("NFC", folded)


def dash_variants(folded: str) -> tuple[str, ...]:
    """The readings of a folded text's dashes between letters: removed, then a space.

    One reading when there is no such dash. Dashes elsewhere (between digits,
    at a word's edge) are kept in both.
    """
    if DASH not in folded:
        return (folded,)
    joined = _DASH_BETWEEN_LETTERS.sub("", folded)
    if joined == folded:
        return (folded,)
    return joined, _DASH_BETWEEN_LETTERS.sub(" ", folded)


def matching_forms(text: str) -> tuple[str, ...]:
    """Every form ``text`` is matched in: :func:`fold`, then :func:`dash_variants`."""
    return dash_variants(fold(text))
