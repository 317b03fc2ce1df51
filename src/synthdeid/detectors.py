"""The grammar of dates, phone numbers, identifiers and ages: finding them, reading a date.

One vocabulary (month and weekday names and their abbreviations, ordinal
suffixes, two-digit years) serves two jobs:

* **finding** them in running text (:data:`DETECTORS`, :func:`detect`): the
  regex detection pass of de-identification, whose spans are unioned with a
  model's (:func:`union_spans`), and the identifier scanner of
  :mod:`synthdeid.identifiers`;
* **reading** one date mention (:func:`read_date`, :func:`parse_date`): what
  the surrogate date shift (:mod:`synthdeid.surrogate.operators.dates`) moves
  and writes back in the same form.

Finding
-------
High-recall detectors for DATE, PHONE, ID and AGE (> 89). They aim at recall;
a few guards keep the commonest clinical false positives out:

* DATE: numeric ``m/d``, ``m/d/yy``, ``m/d/yyyy`` (also ``-`` and ``.`` with a
  year), ``m/yyyy``, ``yyyy-mm-dd`` (``/`` and ``.`` too), and month-name forms
  (``Jan 3``, ``Jan. 3rd, 2019``, ``3 January 2019``, ``3rd of Jan``,
  ``January 2019``, ``03-Jan-2019``, a bare ``January``). Not dates: times
  (``10:30``), blood pressures (``120/80``: the first number is no month),
  decimals and lab ratios (``7.35/40/90``), numbers followed by a dose or
  measure unit (``1/2 tab``, ``5-10-15 mg``) and ``m/d`` right after ``BP``,
  ``pain``, ``score`` or ``scale`` or right before ``pain``.
* PHONE: North American numbers with or without ``+1`` and area code
  (``(617) 555-1234``, ``617-555-1234``, ``617.555.1234``, ``617 555 1234``,
  ``555-1234``), with an optional extension (``x123``, ``ext. 1234``).
* ID: labelled forms (``MRN: 123``, ``Acct # A-77``, ``SSN 123-45-6789``; the
  span is the value, not the label), SSN-shaped ``123-45-6789``, digit runs of
  six or more, and upper-case letters followed by four or more digits
  (``A1234567``, ``MR-0012345``), never before a dose unit (``100000 units``).
* AGE: only ages over 89 (HIPAA Safe Harbor treats only those as PHI), 90 to
  119: ``92 yo``, ``92yoF``, ``93-year-old``, ``95 years old``, ``95 years of
  age``, ``age 95``, ``aged: 101``. The span is the number.

Known limits: pain scores written ``5/10`` with no nearby ``pain`` / ``score``
word are taken for dates; bare years (``in 2019``), seasons, weekdays and
relative dates (``last Tuesday``) are not detected; bare month abbreviations
and a bare ``May`` are left alone (names and the verb); ``Jan 3`` is found even
where ``Jan`` is a name; ten bare digits are an ID, not a PHONE; ``in her 90s``
is not an AGE; European ``d.m.yyyy`` is found but ``d/m`` without a year only
when it also reads as ``m/d``.

A pattern with a named group ``value`` yields that group's span when it took
part in the match (the label of a labelled form stays outside the span);
otherwise the whole match.

Reading a date
--------------
A mention is matched whole after stripping surrounding spaces and punctuation
``.,;:()[]`` (kept as head and tail); month names in any case, abbreviated or
full, with or without a dot; US month-first order. The forms, tried in order
(:data:`FORMS`; the first whose match is a valid date wins):

* numeric ``7/22``, ``07/22``, ``7/22/06``, ``7/22/2006``, ``7-22-2006``,
  ``7.22.2006`` (the same separator twice); day-first ``22/7/2006`` only when
  the first number cannot be a month;
* ISO ``2006-07-22``, ``2006/7/22``, compact ``20060722``;
* named month ``July 22, 2006``, ``July 22 2006``, ``Jul 22``, ``JULY 22``,
  ``Jul. 22nd``, ``Jul-22-2006``; ``22-Jul-2006``, ``22 Jul 2006``, ``22Jul06``,
  ``22nd of July``; any of the day-level forms may follow a weekday
  (``Tue 7/22``, ``Tuesday, July 22``);
* month-year ``7/2006``, ``07/2006``, ``2006-07``, ``July 2006``, ``Jul-2006``,
  ``July, 2006``, ``Jul '06``, and ``8/88`` (a two-digit year only where it
  cannot be a day: ``00`` or ``32``-``99``);
* month name alone ``Nov``, ``Nov.``, ``NOVEMBER``, ``sept``;
* ordinal day alone ``11th``, ``3rd``;
* bare year ``2006``, ``'06``, ``92``;
* a range of two of the above joined by ``-``, an en or em dash, ``to`` or
  ``through`` (``6/30-7/2``, ``1980-85``).

Two-digit years pivot at 30: ``00``-``29`` are 2000-2029, ``30``-``99`` are
1930-1999. Ambiguous short forms read as month-day: ``07/06`` is July 6,
``Jul 06`` is July 6 (``Jul '06`` is July 2006). Each form's match keeps its
value fields as named groups (``month``, ``day``, ``suffix``, ``year``,
``weekday``), so a writer can replace exactly those and keep everything
between them as written.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Protocol, TypeVar

from synthdeid.errors import ConfigError
from synthdeid.notes import Note, Span

log = logging.getLogger(__name__)

# --- vocabulary ------------------------------------------------------------

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
# abbreviations in use beyond the first three letters of a name
LONG_ABBREVIATIONS = ("Sept", "Tues", "Thur", "Thurs")
ORDINAL_SUFFIXES = ("st", "nd", "rd", "th")
APOSTROPHES = "'\u2019"  # before a two-digit year: '06
TWO_DIGIT_PIVOT = 30  # two-digit years below this are 20xx, the others 19xx


def abbreviations(names: Sequence[str]) -> tuple[str, ...]:
    """The abbreviations of ``names``: the first three letters, and the longer ones in use."""
    short = [name[:3] for name in names if len(name) > 3]
    longer = [a for a in LONG_ABBREVIATIONS if any(name.startswith(a) for name in names)]
    return (*short, *longer)


def name_index(names: Sequence[str], token: str) -> int:
    """The index in ``names`` of the name ``token`` (any case) spells or abbreviates."""
    prefix = token[:3].casefold()
    return next(i for i, name in enumerate(names) if name[:3].casefold() == prefix)


def year_value(token: str) -> int:
    """The year a 4-digit or 2-digit (maybe ``'06``) token stands for."""
    digits = token.lstrip(APOSTROPHES)
    value = int(digits)
    if len(digits) == 2:
        return value + (2000 if value < TWO_DIGIT_PIVOT else 1900)
    return value


def _alternation(words: Iterable[str]) -> str:
    """The words as a regex alternation, longest first (deterministic order)."""
    return "|".join(sorted(set(words), key=lambda word: (-len(word), word)))


def _cased(words: Iterable[str]) -> str:
    """Alternation of the words Capitalized or UPPER (lower-case ``may``/``march`` are words)."""
    return _alternation(v for w in words for v in (w, w.upper()))


def _any_case(words: Iterable[str]) -> str:
    """A whole word among ``words`` for a case-insensitive pattern (no letter may follow)."""
    return rf"(?:{_alternation(w.casefold() for w in words)})(?![a-z])"


_ORDINAL = "|".join(ORDINAL_SUFFIXES)

# --- finding ---------------------------------------------------------------


def _not_after(*words: str) -> str:
    """Negative lookbehinds (fixed width each) for the words, case-insensitive."""
    return "".join(f"(?<!(?i:{re.escape(w)}))" for w in words)


# a dose or measure unit right after a number makes it a quantity, not an identifier
_UNIT = (
    r"(?:mg|mcg|ug|µg|g|gm|gms|kg|ml|cc|l|units?|iu|mmol|meq|mmhg|bpm|cm|mm|lbs?|oz|"
    r"tabs?|tablets?|caps?|capsules?|puffs?|drops?|sprays?|cells|copies|k)"
)
_NO_UNIT = rf"(?!\s*(?i:{_UNIT})(?![A-Za-z]))"
_NO_UNIT_PERCENT = rf"(?!\s*%){_NO_UNIT}"

_MONTH_NUM = r"(?:0?[1-9]|1[0-2])"
_DAY_NUM = r"(?:0?[1-9]|[12]\d|3[01])"
_DAY = rf"{_DAY_NUM}(?:{_ORDINAL})?"
_YEAR_19_20 = r"(?:19|20)\d{2}"
_MONTH_NAME = rf"(?:(?:{_cased(MONTHS)})|(?:{_cased(abbreviations(MONTHS))})\.?)"
_MONTH_BARE = _cased(m for m in MONTHS if m != "May")

_DATE_NUMERIC = rf"""
    (?<![\w/.:,-])
    (?:
        {_YEAR_19_20}([-/.])(?:0?[1-9]|1[0-2])\1{_DAY_NUM}           # 2019-03-14
      | [0-3]?\d([-/.])[0-3]?\d\2(?:{_YEAR_19_20}|\d{{2}})           # 3/14/19, 14.03.2019
      | {_MONTH_NUM}/{_YEAR_19_20}                                     # 03/2019
      | {_not_after("BP ", "BP: ", "B/P ", "pain ", "pain: ", "score ", "scale ", "score: ")}
        {_MONTH_NUM}/{_DAY_NUM}(?!\s*(?i:pain))                   # 3/14
    )
    (?![\w/:]|[.,-]\d)
    {_NO_UNIT_PERCENT}
"""

_DATE_NAMED = rf"""
    (?<![\w-])
    (?:
        {_MONTH_NAME}\s*{_DAY}(?:,?\s*{_YEAR_19_20})?                 # Jan 3, Jan. 3rd, 2019
      | {_DAY}[-\s](?:of\s+)?{_MONTH_NAME}(?:[-,\s]\s*{_YEAR_19_20})? # 3 January 2019, 03-Jan-2019
      | {_MONTH_NAME},?\s+(?:of\s+)?{_YEAR_19_20}                     # January 2019, Jan. of 2019
      | (?:{_MONTH_BARE})                                          # January
    )
    (?![\w-])
"""

_PHONE = rf"""
    (?<![\w+(/.-])
    (?:
        (?:\+?1[\s.-]?)?(?:\(\d{{3}}\)\s?|\d{{3}}[\s.-])\d{{3}}[\s.-]\d{{4}}   # (617) 555-1234
      | \d{{3}}-\d{{4}}                                                        # 555-1234
    )
    (?:\s*(?i:x|ext\.?|extension)\s*\d{{1,5}})?
    (?![\w/]|[.-]\d)
    {_NO_UNIT}
"""

_ID_LABEL = (
    r"(?i:\b(?:MRN|MR\s*\#|medical\s+record(?:\s+(?:number|no\.?|\#))?|acct|"
    r"account(?:\s+(?:number|no\.?|\#))?|patient\s+id|unit\s+(?:number|no\.?)|"
    r"record\s+(?:number|no\.?|\#)|SSN|ID)\b\.?\s*(?:\#|no\.?|number)?\s*[:\#]?\s*)"
)
_ID = rf"""
    {_ID_LABEL}(?P<value>(?=[A-Za-z0-9-]*\d)[A-Za-z0-9][A-Za-z0-9-]*[A-Za-z0-9])
    (?![\w-])
  | (?<![\w.,/-])
    (?:
        \d{{3}}-\d{{2}}-\d{{4}}                   # SSN shape
      | \d{{6,}}                                 # long digit run
      | [A-Z]{{1,4}}-?\d{{4,}}[A-Z]?             # A1234567, MR-0012345
    )
    (?![\w]|[.,/-]\d)
    {_NO_UNIT_PERCENT}
"""

_AGE_NUM = r"(?:9\d|1[01]\d)"
_AGE = rf"""
    (?i:\bage[ds]?\b\s*:?\s*(?:of\s+)?)(?P<value>{_AGE_NUM})(?!\d|\.\d|\s*%)
  | (?<![\w.]){_AGE_NUM}
    (?=\s*-?\s*(?i:
        y/?o(?:[mf])?\b | y\.o\.?
      | (?:years?|yrs?|y)(?:\s*-\s*|\s+)old\b
      | years?\s+of\s+age\b
    ))
"""

DETECTORS: dict[str, re.Pattern[str]] = {
    # numeric and month-name dates; not times, blood pressures or quantities
    "DATE": re.compile(rf"{_DATE_NUMERIC}|{_DATE_NAMED}", re.VERBOSE),
    # North American phone numbers, optional +1, area code and extension
    "PHONE": re.compile(_PHONE, re.VERBOSE),
    # record / account numbers: labelled values, SSN shape, >= 6 digits, letters + >= 4 digits
    "ID": re.compile(_ID, re.VERBOSE),
    # ages over 89 only (HIPAA); the span is the number
    "AGE": re.compile(_AGE, re.VERBOSE),
}


class _Ranged(Protocol):
    @property
    def start(self) -> int: ...

    @property
    def end(self) -> int: ...


R = TypeVar("R", bound=_Ranged)


def non_overlapping(items: Iterable[R], order: Sequence[str], kind: Callable[[R], str]) -> list[R]:
    """Greedy: earliest start first, then longest, then ``kind`` in ``order``; overlaps dropped."""
    rank = {name: i for i, name in enumerate(order)}
    kept: list[R] = []
    for item in sorted(items, key=lambda i: (i.start, i.start - i.end, rank[kind(i)])):
        if not kept or item.start >= kept[-1].end:
            kept.append(item)
    return kept


def _match_span(match: re.Match[str], label: str) -> Span:
    if "value" in match.re.groupindex and match.group("value") is not None:
        return Span(match.start("value"), match.end("value"), label)
    return Span(match.start(), match.end(), label)


def _label(span: Span) -> str:
    return span.label


def detect(text: str, labels: Iterable[str] | None = None) -> list[Span]:
    """Spans the detectors find in ``text`` (all, or only ``labels``), sorted, non-overlapping.

    Where detectors overlap, the span starting first wins, then the longer.
    An unknown label is a :class:`ConfigError`.
    """
    chosen = list(DETECTORS) if labels is None else list(dict.fromkeys(labels))
    unknown = sorted(set(chosen) - set(DETECTORS))
    if unknown:
        raise ConfigError(f"unknown regex detectors {unknown}; known: {sorted(DETECTORS)}")
    found = [
        _match_span(match, label) for label in chosen for match in DETECTORS[label].finditer(text)
    ]
    return non_overlapping((s for s in found if s.start < s.end), chosen, _label)


def union_spans(model_spans: Sequence[Span], regex_spans: Sequence[Span]) -> list[Span]:
    """Model spans plus the regex spans that overlap no model span (nor a kept regex span).

    Model spans win: their labels and boundaries are kept unchanged (they are
    assumed not to overlap one another, as a tagger's output does not). The
    result is sorted.
    """
    taken = sorted(model_spans)
    result = list(taken)
    for span in sorted(regex_spans):
        if not any(span.start < other.end and other.start < span.end for other in taken):
            taken.append(span)
            result.append(span)
    return sorted(result)


def add_regex_spans(
    notes: Sequence[Note], predicted: Sequence[list[Span]], labels: Sequence[str]
) -> tuple[list[list[Span]], int]:
    """Union of model spans and regex spans; returns the spans and how many regex added."""
    merged: list[list[Span]] = []
    added = 0
    for note, spans in zip(notes, predicted, strict=True):
        union = union_spans(spans, detect(note.text, labels))
        added += len(union) - len(spans)
        merged.append(union)
    return merged, added


# --- reading a date ----------------------------------------------------------
# Each form is a regex over the whole (stripped) mention with named value
# groups: ``month`` (digits or a name), ``day``, ``suffix`` (ordinal), ``year``
# (2 or 4 digits, maybe after an apostrophe) and ``weekday``. Which of them take
# part decides the granularity.

LEAP_REFERENCE_YEAR = 2000  # where month-day dates without a year are placed
REFERENCE_MONTH = 1  # where an ordinal day without a month is placed (31 days)
RANGE_MAX_LENGTH = 40  # longer text is never read as a range of two dates

_DIGIT = "[0-9]"


def _field(name: str, body: str) -> str:
    """A named value group of a form."""
    return f"(?P<{name}>{body})"


_ONE_OR_TWO = f"{_DIGIT}{{1,2}}"
_WEEKDAY_NAME = _any_case([*WEEKDAYS, *abbreviations(WEEKDAYS)])
_WEEKDAY = rf"(?:{_field('weekday', _WEEKDAY_NAME)}\.?(?:,\s*|\s+))?"
_NUM_MONTH = _field("month", _ONE_OR_TWO)
_NUM_DAY = _field("day", _ONE_OR_TWO)
_YEAR4 = _field("year", f"{_DIGIT}{{4}}")
# a year beside numbers may be 2 digits bare; alone or beside a month name,
# 2 digits need an apostrophe ("Jul 06" is July 6, "Jul '06" is July 2006)
_YEAR24 = _field("year", f"{_DIGIT}{{4}}|[{APOSTROPHES}]?{_DIGIT}{{2}}")
_YEAR_NAMED = _field("year", f"{_DIGIT}{{4}}|[{APOSTROPHES}]{_DIGIT}{{2}}")
# after a numeric month, a two-digit year only where it cannot be a day ("8/88")
_YEAR_NOT_DAY = _field("year", f"{_DIGIT}{{4}}|00|3[2-9]|[4-9]{_DIGIT}")
_NAMED_MONTH = _field("month", _any_case([*MONTHS, *abbreviations(MONTHS)])) + r"\.?"
_NAMED_DAY = f"{_NUM_DAY}(?!{_DIGIT}){_field('suffix', _ORDINAL)}?"
_SEP = _field("sep", "[/.-]")
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
    _form("ordinal_day", f"{_NUM_DAY}{_field('suffix', _ORDINAL)}"),
    # year level
    _form("year", _YEAR24),
)
# between the two dates of a range
_RANGE_SEPARATOR = re.compile(r"\s*(?:-|\u2013|\u2014|\bto\b|\bthrough\b)\s*", re.IGNORECASE)

_EDGES = re.compile(r"^([\s.,;:()\[\]]*)(.*?)([\s.,;:()\[\]]*)$", re.DOTALL)


@dataclass(frozen=True)
class DateValue:
    """The value of a written date; ``day is None`` below day level."""

    year: int | None
    month: int | None
    day: int | None

    @property
    def level(self) -> str:
        """The granularity: ``day``, ``month`` or ``year``."""
        if self.day is not None:
            return "day"
        return "month" if self.month is not None else "year"


@dataclass(frozen=True)
class DatePiece:
    """One date of a text: its form's match and its value."""

    match: re.Match[str]
    value: DateValue


@dataclass(frozen=True)
class DateReading:
    """A text read as one date or a range of two: edges, dates and what joins them."""

    head: str
    pieces: tuple[DatePiece, ...]
    joints: tuple[str, ...]  # the text between consecutive pieces
    tail: str

    def levels(self) -> frozenset[str]:
        """The granularities taking part: ``day``, ``month``, ``year``."""
        return frozenset(piece.value.level for piece in self.pieces)


def _month_value(token: str) -> int:
    return int(token) if token.isdigit() else name_index(MONTHS, token) + 1


def _value(match: re.Match[str]) -> DateValue | None:
    """The date a form's match stands for, or None when it is no valid date."""
    groups = match.groupdict()
    year = year_value(groups["year"]) if groups.get("year") else None
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
    return DateValue(year, month, day)


def _read_one(core: str) -> DatePiece | None:
    for form in FORMS:
        match = form.pattern.fullmatch(core)
        if match is not None and (value := _value(match)) is not None:
            return DatePiece(match, value)
    return None


def read_date(text: str) -> DateReading | None:
    """``text`` as a date (or a short range of two), or None."""
    edges = _EDGES.match(text)
    assert edges is not None  # the pattern matches every string
    head, core, tail = edges.groups()
    piece = _read_one(core)
    if piece is not None:
        return DateReading(head, (piece,), (), tail)
    if len(core) > RANGE_MAX_LENGTH:
        return None
    for joint in _RANGE_SEPARATOR.finditer(core):
        if joint.start() == 0 or joint.end() == len(core):
            continue
        first, second = _read_one(core[: joint.start()]), _read_one(core[joint.end() :])
        if first is not None and second is not None:
            return DateReading(head, (first, second), (joint.group(),), tail)
    return None


def parse_date(text: str) -> DateValue | None:
    """The date ``text`` stands for (year, month, day; None where absent), or None.

    None for a range of two dates too (see :func:`date_levels`).
    """
    reading = read_date(text)
    if reading is None or len(reading.pieces) != 1:
        return None
    return reading.pieces[0].value


def date_levels(text: str) -> frozenset[str]:
    """The granularities of the date(s) ``text`` holds (``day``, ``month``, ``year``); empty if none."""
    reading = read_date(text)
    return frozenset() if reading is None else reading.levels()
