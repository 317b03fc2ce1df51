"""HIPAA Safe Harbor ages: an age of 89 or under is not an identifier.

Safe Harbor lists "all ages over 89" among the identifiers to remove; younger
ages may stay in released text, and the PhysioNet gold standard marks only
those (label ``Age``). A model trained on such notes still tags the "79" of
"79 YO FEMALE" now and then, mostly as a DATE (a two-digit number), and
every such span is a false positive that also hides a clinically useful age.

With the policy on (``ner.deid.safe_harbor_ages``, ``synthdeid predict-ner
--safe-harbor-ages``), a predicted span is dropped when it is a whole number
below the limit written as an age:

* followed by an age unit: "79 yo", "83 y/o", "80 y.o.", "87 year old",
  "45-year-old", "60 yrs old", "71 years of age";
* or after the word "age"/"aged": "age 45", "Age: 62", "aged 60".

The span may hold the unit too ("79 yo" predicted as one span). Ages of 90
and over, numbers written any other way ("6 days", "83/50") and spans that
hold more than the number and its unit are kept.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from synthdeid.notes import Note, Span

SAFE_HARBOR_AGE_LIMIT = 90

# what may follow the number: "yo", "y/o", "y.o.", "yr old", "yrs. old", "year-old", "years of age"
_UNIT = (
    r"[ \t]?-?[ \t]?(?:y/?o\b|y\.o\b\.?|yrs?\.?[ \t-]*old\b|years?[ \t-]*old\b"
    r"|years?[ \t]+of[ \t]+age\b)"
)
_UNIT_AFTER = re.compile(_UNIT, re.IGNORECASE)
# the span itself: the number, perhaps with its unit ("79 yo" predicted as one span)
_SPAN = re.compile(rf"[ \t]*(\d{{1,3}})(?P<unit>{_UNIT})?[ \t]*", re.IGNORECASE)
# what may come before the number: "age 45", "Age: 62", "aged 60"
_WORD_BEFORE = re.compile(r"\bage[d]?[ \t]*:?[ \t]*$", re.IGNORECASE)


def is_young_age(text: str, span: Span, limit: int = SAFE_HARBOR_AGE_LIMIT) -> bool:
    """True when ``span`` is a number below ``limit`` that ``text`` writes as an age."""
    written = _SPAN.fullmatch(text, span.start, span.end)
    if written is None or int(written.group(1)) >= limit:
        return False
    if written.group("unit") or _UNIT_AFTER.match(text, span.end):
        return True
    return _WORD_BEFORE.search(text[max(0, span.start - 12) : span.start]) is not None


def drop_young_ages(
    spans: Sequence[Span], text: str, limit: int = SAFE_HARBOR_AGE_LIMIT
) -> list[Span]:
    """``spans`` without those that are ages below ``limit`` (see the module docstring)."""
    return [span for span in spans if not is_young_age(text, span, limit)]


def drop_young_age_spans(
    notes: Sequence[Note], predicted: Sequence[list[Span]]
) -> tuple[list[list[Span]], int]:
    """Spans without the ages of 89 or under (Safe Harbor); returns them and how many went."""
    kept = [drop_young_ages(spans, note.text) for note, spans in zip(notes, predicted, strict=True)]
    return kept, sum(
        len(before) - len(after) for before, after in zip(predicted, kept, strict=True)
    )
