"""High-recall regular-expression detectors for DATE, PHONE, ID and AGE (> 89).

Optional detectors whose spans are unioned with a model's predicted spans (on
by configuration), to catch formatted identifiers a model may miss. They aim
at recall; a few guards keep the commonest clinical false positives out:

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
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence

from synthdeid.errors import ConfigError
from synthdeid.notes import Span
from synthdeid.surrogate.operators.dates import MONTHS

log = logging.getLogger(__name__)

_MONTHS_FULL = MONTHS  # the surrogate date operator's month names
_MONTHS_ABBR = ("Jan", "Feb", "Mar", "Apr", "Jun", "Jul", "Aug", "Sep", "Sept", "Oct", "Nov", "Dec")


def _cased(words: Iterable[str]) -> str:
    """Alternation of the words Capitalized or UPPER (lower-case ``may``/``march`` are words)."""
    variants = sorted({v for w in words for v in (w, w.upper())}, key=len, reverse=True)
    return "|".join(variants)


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
_DAY = r"(?:0?[1-9]|[12]\d|3[01])(?:st|nd|rd|th)?"
_YEAR4 = r"(?:19|20)\d{2}"
_MONTH_NAME = rf"(?:(?:{_cased(_MONTHS_FULL)})|(?:{_cased(_MONTHS_ABBR)})\.?)"
_MONTH_BARE = _cased(m for m in _MONTHS_FULL if m != "May")

_DATE_NUMERIC = rf"""
    (?<![\w/.:,-])
    (?:
        {_YEAR4}([-/.])(?:0?[1-9]|1[0-2])\1{_DAY_NUM}           # 2019-03-14
      | [0-3]?\d([-/.])[0-3]?\d\2(?:{_YEAR4}|\d{{2}})           # 3/14/19, 14.03.2019
      | {_MONTH_NUM}/{_YEAR4}                                     # 03/2019
      | {_not_after("BP ", "BP: ", "B/P ", "pain ", "pain: ", "score ", "scale ", "score: ")}
        {_MONTH_NUM}/{_DAY_NUM}(?!\s*(?i:pain))                   # 3/14
    )
    (?![\w/:]|[.,-]\d)
    {_NO_UNIT_PERCENT}
"""

_DATE_NAMED = rf"""
    (?<![\w-])
    (?:
        {_MONTH_NAME}\s*{_DAY}(?:,?\s*{_YEAR4})?                 # Jan 3, Jan. 3rd, 2019
      | {_DAY}[-\s](?:of\s+)?{_MONTH_NAME}(?:[-,\s]\s*{_YEAR4})? # 3 January 2019, 03-Jan-2019
      | {_MONTH_NAME},?\s+(?:of\s+)?{_YEAR4}                     # January 2019, Jan. of 2019
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


def _match_span(match: re.Match[str], label: str) -> Span:
    if "value" in match.re.groupindex and match.group("value") is not None:
        return Span(match.start("value"), match.end("value"), label)
    return Span(match.start(), match.end(), label)


def _non_overlapping(spans: Iterable[Span], order: Sequence[str]) -> list[Span]:
    """Greedy: earliest start first, then longest, then detector order; overlaps dropped."""
    rank = {label: i for i, label in enumerate(order)}
    kept: list[Span] = []
    for span in sorted(spans, key=lambda s: (s.start, s.start - s.end, rank[s.label])):
        if not kept or span.start >= kept[-1].end:
            kept.append(span)
    return kept


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
    return _non_overlapping((s for s in found if s.start < s.end), chosen)


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
