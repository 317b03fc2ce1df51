"""DATE surrogates: a per-patient date shift that keeps each date's written form.

Every date of one patient (or of the whole corpus when ``consistency`` is
``corpus``) moves by the same whole number of days, derived only from the key
and the scope by HMAC-SHA256, never from the date itself. So intervals between
a patient's dates are kept while the calendar position is hidden (the SHIELD
release's 3-90 day per-patient jitter). Options:

``min_days`` / ``max_days`` (default 3 and 90)
    the size of the shift, a whole number of days in ``[min_days, max_days]``.
``direction`` (default ``both``)
    ``forward``, ``backward``, or ``both`` (the sign then also comes from the
    HMAC).

Granularity. A date keeps its granularity, and dates of one granularity keep
their intervals exactly:

* full dates and month-day dates move by ``d`` days (``datetime.date``
  arithmetic). A month-day without a year is placed in the leap year 2000, so
  ``2/29`` is valid, and is written back without a year;
* month-year dates (``7/2006``, ``July 2006``) move by
  ``sign * max(1, (|d| + 15) // 30)`` months (``|d|/30`` rounded half up);
* bare years (``2006``, ``'06``) move by ``sign * max(1, (|d| + 182) // 365)``
  years.

Partial dates therefore always change too (an unchanged date would be an error
for the engine). A month name alone (``Nov.``, ``sept``) moves by the month
shift (modulo 12), an ordinal day alone (``11th``) by ``d`` days from that day
of a 31-day month (``11th`` -> ``14th`` for ``d = 3``). A weekday written
before a day-level date (``Tue 7/22``) moves by ``d mod 7`` days, which is the
shifted date's true weekday whenever the original one was right.

No shifted date equals an original. Before replacing, the engine gives the
operator the normalised originals of every patient; the scope's shift is then
chosen so that none of the scope's DATE originals, shifted, equals any of the
scope's originals (of any label; the date itself included, so no date keeps
its text). The candidates are keyed redraws: the days come from the HMAC of
(scope) and then of (scope, attempt 1, 2, ...), up to 64 draws, and the first
one without a collision among the day-level originals wins (failing that, the
one with fewest). The month and year shifts start as derived above; when they
collide at their own granularity they are redrawn the same way (months
``±1..11``, years ``±1..10``). So one shift per scope still moves all its dates
and keeps every interval, and ``3/30`` never becomes a ``4/2`` written
elsewhere in the patient's notes. Only a scope whose dates are so dense that
every candidate collides keeps a collision; such a date gets a same-shape
surrogate instead (counted as ``dates_colliding_with_originals``).

The originals themselves are kept only where they are needed. While the
engine collects them (:meth:`DateShiftOperator.observe`, a first pass over the
notes), the operator keeps, for each distinct date original of a scope, the
hash of that date moved by the scope's first draw, and the hash of the scope
(16 bytes, :class:`~synthdeid.hashset.HashMap`). A scope none of whose moved
dates is an original gets its first draw, which is what every step above picks
for it. Only the other scopes ("crowded") need their dates themselves: a second
pass over the notes keeps those scopes' dates, settles their shifts and keeps
only the shifts (8 of the 25,066 patients of a synthetic demo corpus of 10^5
notes; the corpus scope, whenever ``consistency`` is ``corpus``).

Forms: the dates :func:`synthdeid.detectors.read_date` reads (numeric, ISO,
compact, named-month, month-year, a month name or an ordinal day alone, a bare
year, a weekday before a day-level date, and a range of two of them, each moved
on its own), matched against the whole mention after stripping surrounding
spaces and punctuation ``.,;:()[]``, which are kept.

Each form is written back exactly as it came: separators, month-name case
(``NOV``, ``Nov``, ``nov``) and abbreviation (``November``, ``Nov``, ``Nov.``;
a four-letter ``Sept`` style writes ``Sept`` for September and three letters
for the other months), ordinal suffixes (recomputed: ``22nd`` -> ``3rd``), 2- or
4-digit year. Zero padding of a numeric month or day follows the original field (``7``
unpadded, ``07`` padded); a two-digit field of 10 or more follows the other
numeric field of the date, and is padded when that says nothing (``12/15/2006``);
a day beside a month name is padded only if it has a leading zero. Two-digit
years are written back as two digits.

Anything else (``Tuesday``, ``the 3rd``, ``xmas``, decades, times) gets a
same-shape surrogate: digits become other digits, letters other letters of the
same case, everything else is kept, redrawn while it equals an original of the
scope; it is counted as ``unparsed_dates``, as is a date that cannot be
shifted (past year 9999, or a shift that happens to give back the same text).
Shifted dates are counted as ``shifted_dates``.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass
from dataclasses import replace as replace_field
from datetime import date, timedelta
from typing import Any, ClassVar

import numpy as np

from synthdeid.detectors import (
    APOSTROPHES,
    LEAP_REFERENCE_YEAR,
    LONG_ABBREVIATIONS,
    MONTHS,
    REFERENCE_MONTH,
    WEEKDAYS,
    DateValue,
    date_levels,
    name_index,
    read_date,
)
from synthdeid.errors import ConfigError
from synthdeid.hashset import HashMap, HashSet, hash64
from synthdeid.surrogate.operators.base import (
    Mention,
    SurrogateOperator,
    normalize,
    register,
)

DIRECTIONS = ("both", "forward", "backward")
MAX_SHIFT_DRAWS = 64  # keyed candidate shifts tried per scope and granularity
SCOPE_DOMAIN = b"date scope"  # the hash domain of scopes (synthdeid.hashset.hash64)


def _scope_key(scope: str) -> int:
    return hash64(scope, domain=SCOPE_DOMAIN)


@dataclass(frozen=True)
class DateShift:
    """One scope's shift at each granularity (all with the same sign)."""

    days: int
    months: int
    years: int


# --- rendering -------------------------------------------------------------


def _cased(word: str, like: str) -> str:
    """``word`` in the letter case of ``like`` (upper, lower or capitalised)."""
    if like.isupper():
        return word.upper()
    if like.islower():
        return word.lower()
    return word.capitalize()


def _padded(token: str, other: str | None) -> bool:
    """Whether a numeric month or day written as ``token`` is zero-padded.

    ``other`` is the date's other numeric field (month for a day, day for a
    month), if any; a two-digit field of 10 or more follows it, else is padded.
    """
    if len(token) == 1:
        return False
    if token.startswith("0"):
        return True
    return other is None or len(other) != 1


def _ordinal(day: int) -> str:
    if 10 <= day % 100 <= 20:
        return "th"
    return {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")


def _render_number(value: int, token: str, other: str | None) -> str:
    return f"{value:02d}" if _padded(token, other) else str(value)


# four-letter abbreviations in use ("Sept", "Tues", "Thur"): a four-letter token
# is written with these where they exist and with three letters elsewhere
_FOUR_LETTER_ABBREVIATIONS = frozenset(a.casefold() for a in LONG_ABBREVIATIONS if len(a) == 4)


def _render_name(names: tuple[str, ...], index: int, token: str) -> str:
    """The name at ``index``, full or abbreviated like ``token``."""
    full = names[index]
    if token.casefold() == names[name_index(names, token)].casefold():
        word = full
    elif len(token) == 4 and full[:4].casefold() in _FOUR_LETTER_ABBREVIATIONS:
        word = full[:4]
    else:
        word = full[:3]
    return _cased(word, token)


def _render_year(value: int, token: str) -> str:
    apostrophe = token[: len(token) - len(token.lstrip(APOSTROPHES))]
    digits = len(token) - len(apostrophe)
    return apostrophe + (f"{value % 100:02d}" if digits == 2 else f"{value:04d}")


def _render(match: re.Match[str], new: DateValue, weekday_shift: int) -> str:
    """The matched text with its value groups rewritten for ``new``."""
    groups = match.groupdict()
    values: dict[str, str] = {}
    month_token, day_token = groups.get("month"), groups.get("day")
    if month_token and new.month is not None:
        if month_token.isdigit():
            values["month"] = _render_number(new.month, month_token, day_token)
        else:
            values["month"] = _render_name(MONTHS, new.month - 1, month_token)
    if day_token and new.day is not None:
        if month_token and month_token.isdigit():
            values["day"] = _render_number(new.day, day_token, month_token)
        else:  # beside a month name only a leading zero pads a day
            values["day"] = f"{new.day:02d}" if day_token.startswith("0") else str(new.day)
    if groups.get("suffix") and new.day is not None:
        values["suffix"] = _cased(_ordinal(new.day), groups["suffix"])
    if groups.get("year") and new.year is not None:
        values["year"] = _render_year(new.year, groups["year"])
    if groups.get("weekday"):
        token = groups["weekday"]
        index = (name_index(WEEKDAYS, token) + weekday_shift) % 7
        values["weekday"] = _render_name(WEEKDAYS, index, token)
    pieces: list[str] = []
    position = 0
    for name, text in sorted(values.items(), key=lambda item: match.start(item[0])):
        pieces.append(match.string[position : match.start(name)])
        pieces.append(text)
        position = match.end(name)
    pieces.append(match.string[position : match.end()])
    return "".join(pieces)


def _shifted(value: DateValue, shift: DateShift) -> DateValue | None:
    """``value`` moved by ``shift`` at its own granularity; None past year 1-9999."""
    try:
        if value.day is not None:
            year = LEAP_REFERENCE_YEAR if value.year is None else value.year
            month = REFERENCE_MONTH if value.month is None else value.month
            moved = date(year, month, value.day) + timedelta(days=shift.days)
            return DateValue(
                None if value.year is None else moved.year,
                None if value.month is None else moved.month,
                moved.day,
            )
    except OverflowError:
        return None
    if value.month is not None:
        if value.year is None:  # a month name alone
            return DateValue(None, (value.month - 1 + shift.months) % 12 + 1, None)
        year, month0 = divmod(value.year * 12 + value.month - 1 + shift.months, 12)
        return DateValue(year, month0 + 1, None) if 1 <= year <= 9999 else None
    assert value.year is not None
    year = value.year + shift.years
    return DateValue(year, None, None) if 1 <= year <= 9999 else None


def shift_text(text: str, shift: DateShift) -> str | None:
    """``text`` with its date (or both dates of a range) moved by ``shift`` in the same form.

    None when ``text`` is in no known form, is no valid date, or leaves years
    1-9999. Surrounding spaces and punctuation are kept as they are.
    """
    reading = read_date(text)
    if reading is None:
        return None
    rendered = []
    for piece in reading.pieces:
        moved = _shifted(piece.value, shift)
        if moved is None:
            return None
        rendered.append(_render(piece.match, moved, shift.days))
    joints = (*reading.joints, "")
    return (
        reading.head + "".join(r + j for r, j in zip(rendered, joints, strict=True)) + reading.tail
    )


def same_shape(text: str, rng: random.Random) -> str:
    """Digits to random digits, letters to random letters of the same case.

    Everything else is kept. The result always differs from ``text``: when
    chance gives it back, the first letter or digit is changed; text with no
    letters or digits has its other non-space characters turned into digits.
    """
    chars = list(text)
    positions = [i for i, char in enumerate(chars) if char.isalnum()]
    if not positions:
        positions = [i for i, char in enumerate(chars) if not char.isspace()]
        for i in positions:
            chars[i] = rng.choice("0123456789")
        return "".join(chars) if positions else text + rng.choice("0123456789")
    for i in positions:
        chars[i] = _random_like(chars[i], rng)
    if chars == list(text):
        first = positions[0]
        chars[first] = _random_like(text[first], rng, avoid=text[first])
    return "".join(chars)


_LOWER = "abcdefghijklmnopqrstuvwxyz"
_UPPER = _LOWER.upper()


def _random_like(char: str, rng: random.Random, avoid: str = "") -> str:
    if char.isdigit():
        pool = "0123456789"
    elif char.isupper():
        pool = _UPPER
    else:
        pool = _LOWER
    return rng.choice(pool.replace(avoid, "") if avoid else pool)


# --- the operator ----------------------------------------------------------


@register
class DateShiftOperator(SurrogateOperator):
    """Moves every date of a scope by the same HMAC-derived shift, keeping its form."""

    name: ClassVar[str] = "date_shift"
    defaults: ClassVar[Mapping[str, Any]] = {"min_days": 3, "max_days": 90, "direction": "both"}

    def configure(self) -> None:
        low, high = self.options["min_days"], self.options["max_days"]
        for option, value in (("min_days", low), ("max_days", high)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(
                    f"operator {self.name}: {option} must be a whole number of days, got {value!r}"
                )
        if low < 1:
            raise ConfigError(
                f"operator {self.name}: min_days must be at least 1 (a shift of 0 would "
                f"keep dates), got {low}"
            )
        if low > high:
            raise ConfigError(
                f"operator {self.name}: min_days ({low}) is larger than max_days ({high})"
            )
        if self.options["direction"] not in DIRECTIONS:
            raise ConfigError(
                f"operator {self.name}: direction must be one of {DIRECTIONS}, "
                f"got {self.options['direction']!r}"
            )
        # pass 0: the hash of each (scope, date original moved by the scope's first
        # draw), to the hash of its scope; then the scopes where one is an original
        self._first_draws = HashMap()
        self._crowded = HashSet()
        # pass 1: the date originals of those scopes, then their shifts
        self._dates: dict[tuple[str, str], set[str]] = {}
        self._shifts: dict[tuple[str, str], DateShift] = {}

    def observe(self, mention: Mention, look: int) -> None:
        """Pass 0: where the scope's first draw moves each date; 1: the crowded scopes' dates.

        A scope none of whose dates the first draw moves onto an original (of
        any label) gets that draw: each stage of :meth:`shift` then stops at it.
        Only the other scopes ("crowded") need their dates themselves, which
        the second pass keeps.
        """
        scope, text = self.scope(mention), normalize(mention.surface)
        if not date_levels(text):
            return
        if look == 0:
            moved = shift_text(text, self._drawn(scope, 0))
            if moved is not None:
                self._first_draws.add(
                    self.originals.key(scope, normalize(moved)), _scope_key(scope)
                )
        elif _scope_key(scope) in self._crowded:
            self._dates.setdefault((scope, mention.label), set()).add(text)

    def looks_again(self, looks: int) -> bool:
        if looks == 1:
            moved, scopes = self._first_draws.items()
            for scope in np.unique(scopes[self.originals.holds_keys(moved)]).tolist():
                self._crowded.add(scope)
            self._first_draws = HashMap()
            return len(self._crowded) > 0
        for (scope, label), texts in self._dates.items():
            self._shifts[(scope, label)] = self._least_colliding_shift(scope, texts)
        self._dates, self._crowded = {}, HashSet()
        return False

    def shift(self, mention: Mention) -> DateShift:
        """The shift of the mention's scope (patient, or ``*``).

        It depends on the key, the scope and the scope's originals only (see
        the module docstring), never on the mention's own date.
        """
        scope = self.scope(mention)
        crowded = self._shifts.get((scope, mention.label))
        return self._drawn(scope, 0) if crowded is None else crowded

    def _least_colliding_shift(self, scope: str, texts: Iterable[str]) -> DateShift:
        """The first keyed shift that moves none of ``texts`` onto an original of ``scope``.

        Each granularity in turn (days, then months, then years), failing one
        without collisions the one with fewest (see the module docstring).
        """
        taken = self.originals.taken(scope)
        dates = [(text, levels) for text in sorted(texts) if (levels := date_levels(text))]
        by_days = _least_colliding(lambda k: self._drawn(scope, k), "day", dates, taken)
        by_months = _least_colliding(
            lambda k: self._redrawn(by_days, scope, "months", k), "month", dates, taken
        )
        return _least_colliding(
            lambda k: self._redrawn(by_months, scope, "years", k), "year", dates, taken
        )

    def _drawn(self, scope: str, attempt: int) -> DateShift:
        """Candidate ``attempt`` for the scope's shift, months and years derived from its days."""
        low, high = self.options["min_days"], self.options["max_days"]
        extra = (f"redraw {attempt}",) if attempt else ()
        number = self.key.integer(self.name, "shift", scope, *extra)
        size = low + number % (high - low + 1)
        sign = self._sign(number)
        return DateShift(
            days=sign * size,
            months=sign * max(1, (size + 15) // 30),
            years=sign * max(1, (size + 182) // 365),
        )

    def _redrawn(self, base: DateShift, scope: str, unit: str, attempt: int) -> DateShift:
        """``base``, or (attempt 1, 2, ...) ``base`` with keyed other months or years.

        Months are redrawn among ``±1..11`` (so a month name alone always
        moves), years among ``±1..10``, with the sign the direction allows.
        """
        if attempt == 0:
            return base
        number = self.key.integer(self.name, f"shift {unit}", scope, f"redraw {attempt}")
        value = self._sign(number) * (1 + number % (11 if unit == "months" else 10))
        return replace_field(base, **{unit: value})

    def _sign(self, number: int) -> int:
        direction = self.options["direction"]
        negative = direction == "backward" or (direction == "both" and number >> 255 == 1)
        return -1 if negative else 1

    def shift_days(self, mention: Mention) -> int:
        """The signed number of days the mention's scope moves by."""
        return self.shift(mention).days

    def replace(self, mention: Mention) -> str:
        surface = mention.surface
        shifted = shift_text(surface, self.shift(mention))
        if shifted is not None and shifted != surface:
            if not self.is_original(mention, shifted):
                self.counts["shifted_dates"] += 1
                return shifted
            self.counts["dates_colliding_with_originals"] += 1
        else:
            self.counts["unparsed_dates"] += 1
        candidate = same_shape(surface, self.rng(mention))
        for attempt in range(1, MAX_SHIFT_DRAWS):
            if not self.is_original(mention, candidate):
                break
            candidate = same_shape(surface, self.rng(mention, f"redraw {attempt}"))
        return candidate


def _least_colliding(
    draw: Callable[[int], DateShift],
    level: str,
    dates: Sequence[tuple[str, frozenset[str]]],
    taken: Container[str],
) -> DateShift:
    """The first of the keyed candidates ``draw(0), draw(1), ...`` that moves no date onto an original.

    Only the dates of granularity ``level`` are checked (the others do not use
    that part of the shift); failing a candidate without collisions among
    :data:`MAX_SHIFT_DRAWS`, the first with the fewest.
    """
    relevant = [text for text, levels in dates if level in levels]
    best, fewest = draw(0), None
    for attempt in range(MAX_SHIFT_DRAWS):
        candidate = draw(attempt) if attempt else best
        collisions = 0
        for text in relevant:
            moved = shift_text(text, candidate)
            if moved is not None and normalize(moved) in taken:
                collisions += 1
                if fewest is not None and collisions >= fewest:
                    break
        if fewest is None or collisions < fewest:
            best, fewest = candidate, collisions
        if fewest == 0 or not relevant:
            break
    return best
