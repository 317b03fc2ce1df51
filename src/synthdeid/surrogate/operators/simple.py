"""Small operators: ages (HIPAA Safe Harbor), redaction, keyed hashes, keeping.

- ``age``: ages under the threshold (90) are kept; each age of 90 or more becomes
  ``90+`` with the surrounding words kept; an age that cannot be read is redacted.
- ``redact``: a placeholder such as ``[DOCTOR]``.
- ``hash``: a short keyed one-way hash, the same for the same original in a scope.
- ``keep``: the original, deliberately.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar

from synthdeid.errors import ConfigError
from synthdeid.surrogate.operators.base import (
    Mention,
    SurrogateOperator,
    normalize,
    register,
)

# ---------------------------------------------------------------- ages

_NUMERAL = r"\d+(?:\.\d+)?"
# a number, a range of two ("85-92", "85 to 92"), a decade ("90s", "90's"), maybe "+"
_NUMERIC_AGE = re.compile(
    rf"(?<![\d.])(?P<low>{_NUMERAL})"
    rf"(?:\s*(?:-|\u2013|\u2014|to)\s*(?P<high>{_NUMERAL}))?"
    r"(?:'?s\b)?\+?"
)
_ONES = {
    "zero": 0,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "thirteen": 13,
    "fourteen": 14,
    "fifteen": 15,
    "sixteen": 16,
    "seventeen": 17,
    "eighteen": 18,
    "nineteen": 19,
}
_TENS = {
    "twenty": 20,
    "thirty": 30,
    "forty": 40,
    "fifty": 50,
    "sixty": 60,
    "seventy": 70,
    "eighty": 80,
    "ninety": 90,
}
_DECADES = {word.removesuffix("y") + "ies": value for word, value in _TENS.items()}
_NUMBER_WORDS = {**_ONES, **_TENS, **_DECADES, "hundred": 100}
_WORD = "|".join(sorted(_NUMBER_WORDS, key=len, reverse=True))
# "ninety-one", "one hundred and two", "nineties"
_WORD_AGE = re.compile(
    rf"\b(?:{_WORD})(?:(?:[\s-]+and)?[\s-]+(?:{_WORD}))*\b",
    re.IGNORECASE,
)
# the unit right after an age; anything else counts as years
_UNIT = re.compile(r"[\s-]*(?P<unit>[a-z][a-z/.]*)", re.IGNORECASE)
_UNIT_DIVISORS = (
    (re.compile(r"(?:months?|mos?\.?|mths?|m/o|m\.o\.?)(?![a-z])"), 12.0),
    (re.compile(r"(?:weeks?|wks?\.?|w/o|w\.o\.?)(?![a-z])"), 52.0),
    (re.compile(r"(?:days?|d|d/o|d\.o\.?)(?![a-z])"), 365.0),
    (re.compile(r"(?:hours?|hrs?\.?|h/o)(?![a-z])"), 24.0 * 365.0),
)


def _words_value(text: str) -> int:
    """The value of spelled-out number words ("one hundred and two" -> 102)."""
    total = 0
    for word in re.split(r"[\s-]+", text.casefold()):
        if word == "and":
            continue
        value = _NUMBER_WORDS[word]
        total = max(total, 1) * 100 if value == 100 else total + value
    return total


def _unit_divisor(text: str, end: int) -> float:
    """How many of the unit after ``text[end:]`` make a year (1 for years or none)."""
    match = _UNIT.match(text, end)
    if match:
        unit = match["unit"].casefold()
        for pattern, divisor in _UNIT_DIVISORS:
            if pattern.match(unit):
                return divisor
    return 1.0


@register
class AgeOperator(SurrogateOperator):
    """HIPAA Safe Harbor ages: under ``threshold`` kept, ``threshold`` or more capped.

    Every age expression in the surface (digits, a range, a decade such as "90s",
    or spelled-out words such as "ninety-one") is read, in years unless a unit
    (months, weeks, days, hours) follows it. An expression of ``threshold`` years or
    more becomes ``"<threshold>+"`` and the rest of the surface is kept ("93 yo" ->
    "90+ yo", "ninety-one years" -> "90+ years", "88-92" -> "90+"); a surface whose
    ages are all under the threshold is kept deliberately. A surface with no
    readable age cannot be shown safe, so it becomes ``[LABEL]``. Counts
    ``ages_kept``, ``ages_capped`` and ``unparsed_ages``.

    ``band`` (years, default null) bands the ages under the threshold too, as an
    operator choice beyond Safe Harbor (SHIELD, sec. 2.2): an age in years becomes
    the band that holds it, ``band`` years wide from 0 ("43 yo" -> "40-44 yo" with
    band 5; a range "41-47" -> "40-49"; "forty-one" -> "40-44"). Ages in months,
    weeks, days or hours are under a year and stay as they are. Counts
    ``ages_banded``.
    """

    name = "age"
    defaults: ClassVar[Mapping[str, Any]] = {"threshold": 90, "band": None}
    avoids_originals = False  # "90+" or the age itself: a category, not a value

    def configure(self) -> None:
        threshold = self.options["threshold"]
        if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 1:
            raise ConfigError(
                f"operator {self.name}: threshold must be a positive whole number of years, "
                f"got {threshold!r}"
            )
        self.threshold: int = threshold
        band = self.options["band"]
        if band is not None and (isinstance(band, bool) or not isinstance(band, int) or band < 2):
            raise ConfigError(
                f"operator {self.name}: band must be null or a whole number of years from 2, "
                f"got {band!r}"
            )
        self.band: int | None = band

    def _banded(self, low: float, high: float) -> str:
        """The band (or run of bands) holding ages ``low`` to ``high`` in years."""
        assert self.band is not None
        first = int(low) // self.band * self.band
        last = int(high) // self.band * self.band + self.band - 1
        return f"{first}-{min(last, self.threshold - 1)}"

    def _capped(self, surface: str) -> str | None:
        """The surface with every age at or over the threshold capped (and, with a band,
        every age in years under it banded); ``None`` if no age can be read."""
        cap = f"{self.threshold}+"
        spans: list[tuple[int, int, float, float]] = []
        for match in _NUMERIC_AGE.finditer(surface):
            low = float(match["low"])
            high = max(low, float(match["high"] or 0))
            spans.append((match.start(), match.end(), low, high))
        for match in _WORD_AGE.finditer(surface):
            value = float(_words_value(match[0]))
            spans.append((match.start(), match.end(), value, value))
        if not spans:
            return None
        out = surface
        # right to left, so earlier offsets stay valid
        for start, end, low, high in sorted(spans, reverse=True):
            divisor = _unit_divisor(surface, end)
            if high / divisor >= self.threshold:
                out = out[:start] + cap + out[end:]
            elif self.band is not None and divisor == 1.0:
                out = out[:start] + self._banded(low, high) + out[end:]
        return out

    def allows_identity(self, mention: Mention) -> bool:
        """True for ages under the threshold (and ones already written as ``90+``)."""
        return self._capped(mention.surface) == mention.surface

    def replace(self, mention: Mention) -> str:
        capped = self._capped(mention.surface)
        if capped is None:
            self.counts["unparsed_ages"] += 1
            return f"[{mention.label}]"
        if capped == mention.surface:
            self.counts["ages_kept"] += 1
        elif f"{self.threshold}+" in capped and f"{self.threshold}+" not in mention.surface:
            self.counts["ages_capped"] += 1
        else:
            self.counts["ages_banded"] += 1
        return capped


# ---------------------------------------------------------------- the rest


@register
class RedactOperator(SurrogateOperator):
    """A placeholder naming the label: ``template`` (default ``"[{label}]"``) filled in.

    A surface that already is the placeholder is kept deliberately. Counts
    ``redacted``.
    """

    name = "redact"
    defaults: ClassVar[Mapping[str, Any]] = {"template": "[{label}]"}
    avoids_originals = False  # a placeholder, not a value

    def configure(self) -> None:
        self.template = str(self.options["template"])
        try:
            self.template.format(label="LABEL")
        except (KeyError, IndexError, ValueError) as error:
            raise ConfigError(
                f"operator {self.name}: template {self.template!r} does not work ({error}); "
                "its only field is {label}, e.g. '[{label}]'"
            ) from None

    def allows_identity(self, mention: Mention) -> bool:
        return self.template.format(label=mention.label) == mention.surface

    def replace(self, mention: Mention) -> str:
        self.counts["redacted"] += 1
        return self.template.format(label=mention.label)


@register
class HashOperator(SurrogateOperator):
    """``prefix`` plus the first ``length`` hex digits of a keyed HMAC (default 10).

    The HMAC covers the scope (patient or corpus), the label and the normalised
    original, so the same original gets the same hash within its scope, nothing
    can be recovered from it without the key, and another key gives unrelated
    hashes. A hash equal to any original of the scope is redrawn. Counts ``hashed``.
    """

    name = "hash"
    defaults: ClassVar[Mapping[str, Any]] = {"prefix": "", "length": 10}

    def configure(self) -> None:
        length = self.options["length"]
        if isinstance(length, bool) or not isinstance(length, int) or not 4 <= length <= 64:
            raise ConfigError(
                f"operator {self.name}: length must be a whole number from 4 to 64, got {length!r}"
            )
        self.length: int = length
        self.prefix = str(self.options["prefix"])

    def replace(self, mention: Mention) -> str:
        parts = (self.name, self.scope(mention), mention.label, normalize(mention.surface))
        attempt = 0
        while True:
            extra = (f"redraw {attempt}",) if attempt else ()
            surrogate = self.prefix + self.key.digest(*parts, *extra).hex()[: self.length]
            if not self.is_original(mention, surrogate) and normalize(surrogate) != normalize(
                mention.surface
            ):
                self.counts["hashed"] += 1
                return surrogate
            attempt += 1


@register
class KeepOperator(SurrogateOperator):
    """The original, unchanged and deliberately so (for labels left as they are)."""

    name = "keep"
    avoids_originals = False

    def allows_identity(self, mention: Mention) -> bool:
        return True

    def replace(self, mention: Mention) -> str:
        self.counts["kept"] += 1
        return mention.surface
