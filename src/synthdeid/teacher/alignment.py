"""Aligning an LLM teacher's extracted strings back to character offsets in the note.

The extraction prompt asks the model to copy each entity exactly as written
and to list every occurrence, but models normalise case and spacing and list
a repeated name once. So alignment takes *every* occurrence of each extracted
string, and falls back to a case- and whitespace-insensitive search when the
verbatim string is not in the note.

Rules, per entity (:func:`align_entities`):

1. The extracted text is stripped of surrounding whitespace; an empty string
   is ``malformed`` and yields no span.
2. Exact: every non-overlapping occurrence of the string in the note
   (a literal regular expression, :func:`re.escape`) that respects word
   boundaries (below). Scanning goes left to right; after a kept occurrence
   it resumes at the occurrence's end, after a rejected one at the next
   character, so a rejected occurrence never hides a later kept one.
3. Relaxed, only when step 2 keeps nothing: the string split on whitespace,
   each token escaped, joined by ``\\s+``, matched with :data:`re.IGNORECASE`;
   the same scan and boundary rule. Offsets are those of the matched note
   text, which may differ from the extracted string in case and spacing.
4. When neither step keeps an occurrence the entity yields no span: it is
   ``inside_word`` when the relaxed pattern (which also matches every exact
   occurrence) occurs somewhere ignoring boundaries, else ``absent`` (a
   hallucination).

Word boundaries: a word character is one for which :meth:`str.isalnum` is
true, or ``_``. An occurrence is rejected when the string starts with a word
character and the note character just before the occurrence is one, or the
string ends with a word character and the character just after is one. So
``12`` is not found inside ``2012`` nor ``Ann`` inside ``Annual``, while
``Dr. Lee`` is found before a comma and ``(555) 123`` right after a word
(its first character, ``(``, is not a word character).

Counters (always all present, zeros included): ``aligned_exact`` and
``aligned_relaxed`` count entities aligned by step 2 or 3; ``occurrences``
counts the spans produced; ``absent``, ``inside_word`` and ``malformed``
count entities that yield none. Each occurrence becomes a
:class:`~synthdeid.teacher.silver.ScoredSpan` with the entity's label and
confidence. Overlaps are *not* resolved here (the same string extracted
twice, or a name inside a longer extracted name, give overlapping or equal
spans); :func:`~synthdeid.teacher.silver.resolve_overlaps` does that later.
Spans are returned sorted by start, end and label (stable otherwise: the
same span from two entities keeps entity order, whatever the confidences).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from synthdeid.teacher.extraction import Extracted
from synthdeid.teacher.silver import COUNT_FIELDS, ScoredSpan

ALIGNMENT_COUNTS: tuple[str, ...] = (
    "aligned_exact",
    "aligned_relaxed",
    "occurrences",
    "absent",
    "inside_word",
    "malformed",
)
assert set(ALIGNMENT_COUNTS) <= set(COUNT_FIELDS)


def _is_word_char(char: str) -> bool:
    return char.isalnum() or char == "_"


def _boundary_occurrences(
    pattern: re.Pattern[str], text: str, needle: str
) -> list[tuple[int, int]]:
    """Non-overlapping (start, end) of ``pattern`` in ``text`` that respect word boundaries."""
    check_before = _is_word_char(needle[0])
    check_after = _is_word_char(needle[-1])
    found: list[tuple[int, int]] = []
    position = 0
    while (match := pattern.search(text, position)) is not None:
        start, end = match.span()
        if (check_before and start > 0 and _is_word_char(text[start - 1])) or (
            check_after and end < len(text) and _is_word_char(text[end])
        ):
            position = start + 1
            continue
        found.append((start, end))
        position = end
    return found


def _relaxed_pattern(needle: str) -> re.Pattern[str]:
    return re.compile(r"\s+".join(re.escape(token) for token in needle.split()), re.IGNORECASE)


def align_entities(
    text: str, entities: Sequence[Extracted]
) -> tuple[list[ScoredSpan], dict[str, int]]:
    """Spans for every occurrence of every entity in ``text`` (sorted) and the counters."""
    counts = dict.fromkeys(ALIGNMENT_COUNTS, 0)
    spans: list[ScoredSpan] = []
    for entity in entities:
        needle = entity.text.strip()
        if not needle:
            counts["malformed"] += 1
            continue
        occurrences = _boundary_occurrences(re.compile(re.escape(needle)), text, needle)
        if occurrences:
            counts["aligned_exact"] += 1
        else:
            relaxed = _relaxed_pattern(needle)
            occurrences = _boundary_occurrences(relaxed, text, needle)
            if occurrences:
                counts["aligned_relaxed"] += 1
            else:
                counts["inside_word" if relaxed.search(text) else "absent"] += 1
                continue
        counts["occurrences"] += len(occurrences)
        spans.extend(
            ScoredSpan(start, end, entity.label, entity.confidence) for start, end in occurrences
        )
    return sorted(spans, key=lambda s: (s.start, s.end, s.label)), counts
