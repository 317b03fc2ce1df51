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

Forms (matched against the whole mention after stripping surrounding spaces and
punctuation ``.,;:()[]``, which are kept; month names in any case, abbreviated
or full, with or without a dot; US month-first order):

* numeric ``7/22``, ``07/22``, ``7/22/06``, ``7/22/2006``, ``7-22-2006``,
  ``7.22.2006`` (the same separator twice); day-first ``22/7/2006`` only when
  the first number cannot be a month;
* ISO ``2006-07-22``, ``2006/7/22``, compact ``20060722``;
* named month ``July 22, 2006``, ``July 22 2006``, ``Jul 22``, ``JULY 22``,
  ``Jul. 22nd``, ``Jul-22-2006``; ``22-Jul-2006``, ``22 Jul 2006``, ``22Jul06``,
  ``22nd of July``;
* month-year ``7/2006``, ``07/2006``, ``2006-07``, ``July 2006``, ``Jul-2006``,
  ``July, 2006``, ``Jul '06``, and ``8/88`` (a two-digit year only where it
  cannot be a day: ``00`` or ``32``-``99``);
* month name alone ``Nov``, ``Nov.``, ``NOVEMBER``, ``sept``;
* ordinal day alone ``11th``, ``3rd``;
* bare year ``2006``, ``'06``, ``92``;
* a range of two of the above joined by ``-``, an en or em dash, ``to`` or
  ``through`` (``6/30-7/2``, ``1980-85``), each moved on its own.

Each form is written back exactly as it came: separators, month-name case
(``NOV``, ``Nov``, ``nov``) and abbreviation (``November``, ``Nov``, ``Nov.``;
a four-letter ``Sept`` style writes ``Sept`` for September and three letters
for the other months), ordinal suffixes (recomputed: ``22nd`` -> ``3rd``), 2- or
4-digit year. Zero padding of a numeric month or day follows the original field (``7``
unpadded, ``07`` padded); a two-digit field of 10 or more follows the other
numeric field of the date, and is padded when that says nothing (``12/15/2006``);
a day beside a month name is padded only if it has a leading zero.
Two-digit years pivot at 30: ``00``-``29`` are 2000-2029, ``30``-``99`` are
1930-1999; they are written back as two digits. Ambiguous short forms read as
month-day: ``07/06`` is July 6, ``Jul 06`` is July 6 (``Jul '06`` is July 2006).

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
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass
from dataclasses import replace as replace_field
from datetime import date, timedelta
from typing import Any, ClassVar

from synthdeid.errors import ConfigError
from synthdeid.surrogate.operators.base import (
    Mention,
    SurrogateOperator,
    normalize,
    register,
)

DIRECTIONS = ("both", "forward", "backward")
TWO_DIGIT_PIVOT = 30  # two-digit years below this are 20xx, the others 19xx
LEAP_REFERENCE_YEAR = 2000  # where month-day dates without a year are placed
REFERENCE_MONTH = 1  # where an ordinal day without a month is placed (31 days)
MAX_SHIFT_DRAWS = 64  # keyed candidate shifts tried per scope and granularity
RANGE_MAX_LENGTH = 40  # longer text is never read as a range of two dates

MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_MONTH_BY_PREFIX = {name[:3].casefold(): number for number, name in enumerate(MONTHS, 1)}
_WEEKDAY_BY_PREFIX = {name[:3].casefold(): number for number, name in enumerate(WEEKDAYS)}

# --- the forms -------------------------------------------------------------
# Each form is a regex over the whole (stripped) mention with named value
# groups: ``month`` (digits or a name), ``day``, ``suffix`` (ordinal), ``year``
# (2 or 4 digits, maybe after an apostrophe) and ``weekday``. Which of them take
# part decides the granularity; rendering replaces exactly those groups, so
# everything between them (separators, dots, commas, "of") stays as written.

_DIGIT = "[0-9]"
_APOSTROPHES = "'\u2019"  # before a two-digit year: '06
_MONTH_NAME = (
    r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?"
    r"|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)(?![a-z])"
)
_WEEKDAY_NAME = (
    r"(?:mon(?:day)?|tue(?:s(?:day)?)?|wed(?:nesday)?|thu(?:r(?:s(?:day)?)?)?"
    r"|fri(?:day)?|sat(?:urday)?|sun(?:day)?)(?![a-z])"
)
_WEEKDAY = rf"(?:(?P<weekday>{_WEEKDAY_NAME})\.?(?:,\s*|\s+))?"
_NUM_MONTH = rf"(?P<month>{_DIGIT}{{1,2}})"
_NUM_DAY = rf"(?P<day>{_DIGIT}{{1,2}})"
_YEAR4 = rf"(?P<year>{_DIGIT}{{4}})"
# a year beside numbers may be 2 digits bare; alone or beside a month name,
# 2 digits need an apostrophe ("Jul 06" is July 6, "Jul '06" is July 2006)
_YEAR24 = rf"(?P<year>{_DIGIT}{{4}}|[{_APOSTROPHES}]?{_DIGIT}{{2}})"
_YEAR_NAMED = rf"(?P<year>{_DIGIT}{{4}}|[{_APOSTROPHES}]{_DIGIT}{{2}})"
# after a numeric month, a two-digit year only where it cannot be a day ("8/88")
_YEAR_NOT_DAY = rf"(?P<year>{_DIGIT}{{4}}|00|3[2-9]|[4-9]{_DIGIT})"
_NAMED_MONTH = rf"(?P<month>{_MONTH_NAME})\.?"
_NAMED_DAY = rf"(?P<day>{_DIGIT}{{1,2}})(?!{_DIGIT})(?P<suffix>st|nd|rd|th)?"
_SEP = r"(?P<sep>[/.-])"
_LOOSE = r"(?:\s+of\s+|[\s,./-]*)"  # between a name and a number: anything or nothing
_FIRM = r"[\s,./-]+"  # between two numbers: at least one separator


@dataclass(frozen=True)
class DateForm:
    """One written form of a date: a name (for reading and debugging) and its regex."""

    name: str
    pattern: re.Pattern[str]


def _form(name: str, regex: str) -> DateForm:
    return DateForm(name, re.compile(regex, re.IGNORECASE))


# tried in order; the first whose match is a valid date wins
FORMS: tuple[DateForm, ...] = (
    # day level
    _form("month_day_year", rf"{_WEEKDAY}{_NUM_MONTH}{_SEP}{_NUM_DAY}(?:(?P=sep){_YEAR24})?"),
    _form("day_month_year", rf"{_WEEKDAY}{_NUM_DAY}{_SEP}{_NUM_MONTH}(?:(?P=sep){_YEAR24})?"),
    _form("iso", rf"{_WEEKDAY}{_YEAR4}{_SEP}{_NUM_MONTH}(?P=sep){_NUM_DAY}"),
    _form("compact", rf"(?P<year>{_DIGIT}{{4}})(?P<month>{_DIGIT}{{2}})(?P<day>{_DIGIT}{{2}})"),
    _form("name_day_year", rf"{_WEEKDAY}{_NAMED_MONTH}{_LOOSE}{_NAMED_DAY}(?:{_FIRM}{_YEAR24})?"),
    _form("day_name_year", rf"{_WEEKDAY}{_NAMED_DAY}{_LOOSE}{_NAMED_MONTH}(?:{_LOOSE}{_YEAR24})?"),
    # month level
    _form("month_year", rf"{_NUM_MONTH}{_SEP}{_YEAR_NOT_DAY}"),
    _form("iso_month", rf"{_YEAR4}{_SEP}{_NUM_MONTH}"),
    _form("name_year", rf"{_NAMED_MONTH}{_LOOSE}{_YEAR_NAMED}"),
    _form("month_name", _NAMED_MONTH),
    # day level without a month
    _form("ordinal_day", rf"(?P<day>{_DIGIT}{{1,2}})(?P<suffix>st|nd|rd|th)"),
    # year level
    _form("year", _YEAR24),
)
# between the two dates of a range
_RANGE_SEPARATOR = re.compile(r"\s*(?:-|\u2013|\u2014|\bto\b|\bthrough\b)\s*", re.IGNORECASE)

_EDGES = re.compile(r"^([\s.,;:()\[\]]*)(.*?)([\s.,;:()\[\]]*)$", re.DOTALL)


@dataclass(frozen=True)
class DateShift:
    """One scope's shift at each granularity (all with the same sign)."""

    days: int
    months: int
    years: int


@dataclass(frozen=True)
class _Parsed:
    """The value of a matched form; ``day is None`` below day level."""

    year: int | None
    month: int | None
    day: int | None


# --- parsing ---------------------------------------------------------------


def _year_value(token: str) -> int:
    digits = token.lstrip(_APOSTROPHES)
    value = int(digits)
    if len(digits) == 2:
        return value + (2000 if value < TWO_DIGIT_PIVOT else 1900)
    return value


def _month_value(token: str) -> int:
    if token.isdigit():
        return int(token)
    return _MONTH_BY_PREFIX[token[:3].casefold()]


def _parse(match: re.Match[str]) -> _Parsed | None:
    """The date a form's match stands for, or None when it is no valid date."""
    groups = match.groupdict()
    year = _year_value(groups["year"]) if groups.get("year") else None
    month = _month_value(groups["month"]) if groups.get("month") else None
    day = int(groups["day"]) if groups.get("day") else None
    if year is not None and not 1 <= year <= 9999:
        return None
    if month is not None and not 1 <= month <= 12:
        return None
    if day is not None:
        try:
            date(LEAP_REFERENCE_YEAR if year is None else year, month or REFERENCE_MONTH, day)
        except ValueError:
            return None
    return _Parsed(year, month, day)


@dataclass(frozen=True)
class _Piece:
    """One date of a text: its form's match and its value."""

    match: re.Match[str]
    value: _Parsed


@dataclass(frozen=True)
class _Reading:
    """A text read as one date or a range of two: edges, dates and what joins them."""

    head: str
    pieces: tuple[_Piece, ...]
    joints: tuple[str, ...]  # the text between consecutive pieces
    tail: str

    def levels(self) -> frozenset[str]:
        """The granularities taking part: ``day``, ``month``, ``year``."""
        return frozenset(_level(piece.value) for piece in self.pieces)


def _level(value: _Parsed) -> str:
    if value.day is not None:
        return "day"
    return "month" if value.month is not None else "year"


def _read_one(core: str) -> _Piece | None:
    for form in FORMS:
        match = form.pattern.fullmatch(core)
        if match is not None and (value := _parse(match)) is not None:
            return _Piece(match, value)
    return None


def _read(text: str) -> _Reading | None:
    """``text`` as a date (or a short range of two), or None."""
    edges = _EDGES.match(text)
    assert edges is not None  # the pattern matches every string
    head, core, tail = edges.groups()
    piece = _read_one(core)
    if piece is not None:
        return _Reading(head, (piece,), (), tail)
    if len(core) > RANGE_MAX_LENGTH:
        return None
    for joint in _RANGE_SEPARATOR.finditer(core):
        if joint.start() == 0 or joint.end() == len(core):
            continue
        first, second = _read_one(core[: joint.start()]), _read_one(core[joint.end() :])
        if first is not None and second is not None:
            return _Reading(head, (first, second), (joint.group(),), tail)
    return None


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
_FOUR_LETTER_ABBREVIATIONS = frozenset({"sept", "tues", "thur"})


def _render_name(names: tuple[str, ...], index: int, token: str) -> str:
    """The name at ``index``, full or abbreviated like ``token``."""
    full = names[index]
    if token.casefold() == names[_index_of(names, token)].casefold():
        word = full
    elif len(token) == 4 and full[:4].casefold() in _FOUR_LETTER_ABBREVIATIONS:
        word = full[:4]
    else:
        word = full[:3]
    return _cased(word, token)


def _index_of(names: tuple[str, ...], token: str) -> int:
    prefix = token[:3].casefold()
    return next(i for i, name in enumerate(names) if name[:3].casefold() == prefix)


def _render_year(value: int, token: str) -> str:
    apostrophe = token[: len(token) - len(token.lstrip(_APOSTROPHES))]
    digits = len(token) - len(apostrophe)
    return apostrophe + (f"{value % 100:02d}" if digits == 2 else f"{value:04d}")


def _render(match: re.Match[str], new: _Parsed, weekday_shift: int) -> str:
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
        index = (_WEEKDAY_BY_PREFIX[token[:3].casefold()] + weekday_shift) % 7
        values["weekday"] = _render_name(WEEKDAYS, index, token)
    pieces: list[str] = []
    position = 0
    for name, text in sorted(values.items(), key=lambda item: match.start(item[0])):
        pieces.append(match.string[position : match.start(name)])
        pieces.append(text)
        position = match.end(name)
    pieces.append(match.string[position : match.end()])
    return "".join(pieces)


def _shifted(value: _Parsed, shift: DateShift) -> _Parsed | None:
    """``value`` moved by ``shift`` at its own granularity; None past year 1-9999."""
    try:
        if value.day is not None:
            year = LEAP_REFERENCE_YEAR if value.year is None else value.year
            month = REFERENCE_MONTH if value.month is None else value.month
            moved = date(year, month, value.day) + timedelta(days=shift.days)
            return _Parsed(
                None if value.year is None else moved.year,
                None if value.month is None else moved.month,
                moved.day,
            )
    except OverflowError:
        return None
    if value.month is not None:
        if value.year is None:  # a month name alone
            return _Parsed(None, (value.month - 1 + shift.months) % 12 + 1, None)
        year, month0 = divmod(value.year * 12 + value.month - 1 + shift.months, 12)
        return _Parsed(year, month0 + 1, None) if 1 <= year <= 9999 else None
    assert value.year is not None
    year = value.year + shift.years
    return _Parsed(year, None, None) if 1 <= year <= 9999 else None


def parse_date(text: str) -> _Parsed | None:
    """The date ``text`` stands for (year, month, day; None where absent), or None.

    None for a range of two dates too (see :func:`date_levels`).
    """
    reading = _read(text)
    if reading is None or len(reading.pieces) != 1:
        return None
    return reading.pieces[0].value


def date_levels(text: str) -> frozenset[str]:
    """The granularities of the date(s) ``text`` holds (``day``, ``month``, ``year``); empty if none."""
    reading = _read(text)
    return frozenset() if reading is None else reading.levels()


def shift_text(text: str, shift: DateShift) -> str | None:
    """``text`` with its date (or both dates of a range) moved by ``shift`` in the same form.

    None when ``text`` is in no known form, is no valid date, or leaves years
    1-9999. Surrounding spaces and punctuation are kept as they are.
    """
    reading = _read(text)
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
        self._shifts: dict[tuple[str, str], DateShift] = {}

    def shift(self, mention: Mention) -> DateShift:
        """The shift of the mention's scope (patient, or ``*``).

        It depends on the key, the scope and the scope's originals only (see
        the module docstring), never on the mention's own date.
        """
        scope = self.scope(mention)
        cached = self._shifts.get((scope, mention.label))
        if cached is not None:
            return cached
        taken = self.originals.surfaces(scope)
        dates = [
            (text, levels)
            for text in sorted(self.originals.surfaces(scope, mention.label))
            if (levels := date_levels(text))
        ]
        by_days = _least_colliding(lambda k: self._drawn(scope, k), "day", dates, taken)
        by_months = _least_colliding(
            lambda k: self._redrawn(by_days, scope, "months", k), "month", dates, taken
        )
        result = _least_colliding(
            lambda k: self._redrawn(by_months, scope, "years", k), "year", dates, taken
        )
        self._shifts[(scope, mention.label)] = result
        return result

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
    taken: Set[str],
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
