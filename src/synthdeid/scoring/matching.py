"""Matching one note's predicted spans to its gold spans, five ways.

All functions are pure and work on one document. Spans are
:class:`~synthdeid.notes.Span` (``end`` exclusive); the functions sort their
inputs themselves and return outcomes in sorted order, so the order in which
spans are given never changes a result. Overlapping predictions are allowed
(the notes table forbids them, other callers may not).

* **exact**: a prediction is a true positive iff a gold span has the same
  label and the same boundaries (one-to-one; duplicates do not count twice).
* **overlap** (VetSynth, sec. 2.6): label-consistent greedy one-to-one matching
  by maximum character intersection. Every same-label (gold, prediction) pair
  that shares at least one character is a candidate; candidates are taken in
  order of decreasing intersection (ties: earlier gold span, then earlier
  prediction, in sorted order), each gold span and each prediction at most
  once. Matched pairs are true positives, unmatched predictions false
  positives, unmatched gold spans false negatives.
* **detection** (label-agnostic, what matters for redaction): a gold span is
  *detected* if any prediction of any label shares a character with it; a
  prediction is *correct* if it shares a character with any gold span. Not
  one-to-one: a gold span split into two predictions makes both predictions
  correct and the gold span detected once; one prediction covering two gold
  spans detects both.
* **coverage80** (SHIELD, sec. 2.5): a gold span is *found* if at least 80% of
  its characters lie in the union of the predictions (any label for the
  headline, the same label for per-label figures). Recall only.
* **token**: the text is split model-agnostically with ``\\w+|[^\\w\\s]``;
  gold and predicted spans become BIO tag sequences (a token takes the label
  of a span it overlaps; ``B-`` on the span's first token, ``I-`` after), and
  entities are read back with seqeval's :func:`get_entities` (conlleval
  rules), so summed counts reproduce seqeval's micro scores. A token claimed
  by an earlier span (in sorted order) is not re-tagged by a later one; a
  span with no token of its own (whitespace only, or all its tokens claimed)
  has no token-level entity.
"""

from __future__ import annotations

import bisect
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from seqeval.metrics.sequence_labeling import get_entities

from synthdeid.notes import Span

TOKEN_PATTERN = re.compile(r"\w+|[^\w\s]")
COVERAGE_THRESHOLD = Fraction(4, 5)

Entity = tuple[str, int, int]  # seqeval: (type, first token, last token), inclusive


@dataclass(frozen=True)
class SpanOutcome:
    """Per-span outcome of one matching scheme, in sorted span order.

    ``gold_hit[i]`` says whether ``gold[i]`` counts as found; ``pred_hit[j]``
    whether ``pred[j]`` counts as correct. For one-to-one schemes (exact,
    overlap) ``sum(gold_hit) == sum(pred_hit)``; for detection it need not.
    """

    gold: tuple[Span, ...]
    pred: tuple[Span, ...]
    gold_hit: tuple[bool, ...]
    pred_hit: tuple[bool, ...]


def intersection(a: Span, b: Span) -> int:
    """Number of characters two spans share."""
    return max(0, min(a.end, b.end) - max(a.start, b.start))


def _claimed(spans: Sequence[Span], pool: Sequence[Span]) -> tuple[bool, ...]:
    """For each span in order, whether an equal span of ``pool`` is left to claim."""
    available = Counter(pool)
    hits = []
    for span in spans:
        hit = available[span] > 0
        if hit:
            available[span] -= 1
        hits.append(hit)
    return tuple(hits)


def exact_match(gold: Sequence[Span], pred: Sequence[Span]) -> SpanOutcome:
    """Exact matching: same label and identical boundaries, one-to-one."""
    g, p = tuple(sorted(gold)), tuple(sorted(pred))
    return SpanOutcome(g, p, _claimed(g, p), _claimed(p, g))


def overlap_pairs(gold: Sequence[Span], pred: Sequence[Span]) -> list[tuple[int, int]]:
    """Greedy label-consistent matching by maximum intersection.

    Returns ``(gold index, prediction index)`` pairs into ``sorted(gold)`` and
    ``sorted(pred)``, in the order they were matched.
    """
    g, p = sorted(gold), sorted(pred)
    candidates = [
        (-shared, i, j)
        for i, gs in enumerate(g)
        for j, ps in enumerate(p)
        if gs.label == ps.label and (shared := intersection(gs, ps)) > 0
    ]
    candidates.sort()
    used_gold: set[int] = set()
    used_pred: set[int] = set()
    pairs = []
    for _, i, j in candidates:
        if i not in used_gold and j not in used_pred:
            used_gold.add(i)
            used_pred.add(j)
            pairs.append((i, j))
    return pairs


def overlap_match(gold: Sequence[Span], pred: Sequence[Span]) -> SpanOutcome:
    """Overlap matching (see the module docstring) as per-span outcomes."""
    g, p = tuple(sorted(gold)), tuple(sorted(pred))
    pairs = overlap_pairs(g, p)
    matched_gold = {i for i, _ in pairs}
    matched_pred = {j for _, j in pairs}
    return SpanOutcome(
        g,
        p,
        tuple(i in matched_gold for i in range(len(g))),
        tuple(j in matched_pred for j in range(len(p))),
    )


def detection_match(gold: Sequence[Span], pred: Sequence[Span]) -> SpanOutcome:
    """Label-agnostic detection: any character overlap, not one-to-one."""
    g, p = tuple(sorted(gold)), tuple(sorted(pred))
    gold_hit = tuple(any(intersection(gs, ps) > 0 for ps in p) for gs in g)
    pred_hit = tuple(any(intersection(gs, ps) > 0 for gs in g) for ps in p)
    return SpanOutcome(g, p, gold_hit, pred_hit)


def merge_intervals(spans: Sequence[Span]) -> list[tuple[int, int]]:
    """The union of the spans' character ranges, as sorted disjoint intervals."""
    merged: list[tuple[int, int]] = []
    for span in sorted(spans):
        if merged and span.start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], span.end))
        else:
            merged.append((span.start, span.end))
    return merged


def covered_characters(span: Span, intervals: Sequence[tuple[int, int]]) -> int:
    """Characters of ``span`` inside the disjoint ``intervals``."""
    return sum(max(0, min(span.end, end) - max(span.start, start)) for start, end in intervals)


def coverage_found(
    gold: Sequence[Span],
    pred: Sequence[Span],
    *,
    same_label: bool = False,
    threshold: Fraction = COVERAGE_THRESHOLD,
) -> tuple[bool, ...]:
    """Per gold span (sorted): at least ``threshold`` of its characters predicted.

    The predictions' union is taken over all labels, or over the gold span's
    own label when ``same_label``. The comparison is exact (integer
    arithmetic), so 8 of 10 characters pass at 80% and 79 of 100 do not.
    """
    threshold = Fraction(threshold)
    g = sorted(gold)
    if same_label:
        unions = {
            label: merge_intervals([s for s in pred if s.label == label])
            for label in {s.label for s in g}
        }
        per_gold = [unions[s.label] for s in g]
    else:
        everything = merge_intervals(pred)
        per_gold = [everything] * len(g)
    return tuple(
        covered_characters(s, intervals) * threshold.denominator
        >= (s.end - s.start) * threshold.numerator
        for s, intervals in zip(g, per_gold, strict=True)
    )


def tokenize(text: str) -> list[tuple[int, int]]:
    """Model-agnostic tokens: ``(start, end)`` of each ``\\w+|[^\\w\\s]`` match."""
    return [m.span() for m in TOKEN_PATTERN.finditer(text)]


def bio_tags(tokens: Sequence[tuple[int, int]], spans: Sequence[Span]) -> list[str]:
    """BIO tags of ``tokens`` for ``spans`` (see the module docstring for conflicts)."""
    starts = [start for start, _ in tokens]
    ends = [end for _, end in tokens]
    tags = ["O"] * len(tokens)
    for span in sorted(spans):
        first = bisect.bisect_right(ends, span.start)  # first token ending after the start
        stop = bisect.bisect_left(starts, span.end)  # first token starting at or after the end
        prefix = "B-"
        for k in range(first, stop):
            if tags[k] == "O":
                tags[k] = prefix + span.label
                prefix = "I-"
    return tags


def token_entities(tags: Sequence[str]) -> set[Entity]:
    """Entities of one document's tag sequence, as seqeval reads them.

    No entity crosses an ``O`` tag, so seqeval reads each run of non-``O``
    tags on its own (the same result, in time proportional to tagged tokens).
    """
    tagged = [k for k, tag in enumerate(tags) if tag != "O"]
    entities: set[Entity] = set()
    run_start = 0
    for i in range(1, len(tagged) + 1):
        if i == len(tagged) or tagged[i] != tagged[i - 1] + 1:
            first = tagged[run_start]
            run = list(tags[first : tagged[i - 1] + 1])
            entities.update((kind, first + a, first + b) for kind, a, b in get_entities(run))
            run_start = i
    return entities


def document_entities(
    text: str, gold: Sequence[Span], pred: Sequence[Span]
) -> tuple[set[Entity], set[Entity]]:
    """Gold and predicted token-level entities of one document."""
    tokens = tokenize(text)
    return token_entities(bio_tags(tokens, gold)), token_entities(bio_tags(tokens, pred))
