"""Silver spans and what a teacher reports about each note.

Every teacher returns one :class:`NoteLabels` per note: the spans it proposes
(:class:`ScoredSpan`, with a confidence where the teacher gives one), a
status (``ok``, or why the note got no labels) and counters of what happened
on the way (alignment outcomes, dropped entities). Notes whose status is not
``ok`` never enter a silver pool: a note the teacher failed on would otherwise
teach the student that it holds no PHI. The same holds for a note whose
teacher named entities of which none survived (an unknown type, a malformed
item, a string absent from the note, a confidence under the threshold): its
status is ``no_usable_entities``, since an empty span list there means "the
teacher's answer could not be used", not "no PHI".

Overlap policy (:func:`resolve_overlaps`), used wherever one teacher proposes
overlapping spans:

1. identical spans (same start, end and label) are one span with the highest
   confidence among them (not counted as an overlap);
2. the remaining spans are ranked by confidence (highest first; a span without
   a confidence counts as 1.0, the teacher's word), then length (longest
   first), then start (earliest first), then label (the order of
   :data:`~synthdeid.labels.CANONICAL_LABELS`, then by name);
3. spans are kept in that order when they overlap no kept span; each span
   dropped this way is counted in ``overlap_dropped``.

Confidence thresholds (:func:`apply_thresholds`) are per label with a
``default``; a span without a confidence always passes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from synthdeid.errors import ConfigError
from synthdeid.labels import CANONICAL_LABELS
from synthdeid.notes import Span

OK = "ok"
# the teacher named entities and every one was dropped: its answer cannot be
# read as "this note holds no PHI", so the note stays out of the pool
NO_USABLE_ENTITIES = "no_usable_entities"
# counters every teacher may report per note (zero when not applicable)
COUNT_FIELDS: tuple[str, ...] = (
    "entities",  # entities the teacher proposed (LLM: items in the answer)
    "aligned_exact",  # entities found verbatim in the note
    "aligned_relaxed",  # entities found only ignoring case and whitespace
    "occurrences",  # spans produced by aligned entities (every occurrence)
    "absent",  # entities not in the note at all: hallucinations, dropped
    "inside_word",  # entities found only inside longer words, dropped
    "unknown_type",  # entities of a type the teacher has no label for, dropped
    "malformed",  # entities without usable text or confidence, dropped
    "below_threshold",  # spans under their label's confidence threshold, dropped
    "overlap_dropped",  # spans dropped by the overlap policy
)
# the counters of entities or spans dropped for what they were, not for an overlap
DROP_COUNTS: tuple[str, ...] = (
    "absent",
    "inside_word",
    "unknown_type",
    "malformed",
    "below_threshold",
)


@dataclass(frozen=True, order=True)
class ScoredSpan:
    """A proposed span with the teacher's confidence (None: the teacher gives none)."""

    start: int
    end: int
    label: str
    confidence: float | None = None

    def span(self) -> Span:
        return Span(self.start, self.end, self.label)

    def overlaps(self, other: ScoredSpan) -> bool:
        return self.start < other.end and other.start < self.end


@dataclass
class NoteLabels:
    """One teacher's labels for one note, with status, counters and token use."""

    note_id: str
    spans: list[ScoredSpan]
    status: str = OK
    detail: str = ""
    counts: dict[str, int] = field(default_factory=dict)
    input_tokens: int | None = None
    output_tokens: int | None = None

    @property
    def ok(self) -> bool:
        return self.status == OK

    def count(self, name: str, amount: int = 1) -> None:
        if name not in COUNT_FIELDS:
            raise KeyError(f"unknown teacher counter {name!r}; known: {COUNT_FIELDS}")
        self.counts[name] = self.counts.get(name, 0) + amount


def label_rank(label: str) -> tuple[int, str]:
    """Canonical labels in their order, then any other label by name."""
    order = {name: i for i, name in enumerate(CANONICAL_LABELS)}
    return (order.get(label, len(order)), label)


def _ranked_confidence(span: ScoredSpan) -> float:
    return 1.0 if span.confidence is None else span.confidence


def resolve_overlaps(spans: Iterable[ScoredSpan]) -> tuple[list[ScoredSpan], int]:
    """Non-overlapping spans by the module's policy, sorted; and how many were dropped."""
    best: dict[tuple[int, int, str], ScoredSpan] = {}
    for span in spans:
        key = (span.start, span.end, span.label)
        kept = best.get(key)
        if kept is None or _ranked_confidence(span) > _ranked_confidence(kept):
            best[key] = span
    ranked = sorted(
        best.values(),
        key=lambda s: (-_ranked_confidence(s), s.start - s.end, s.start, label_rank(s.label)),
    )
    kept_spans: list[ScoredSpan] = []
    for span in ranked:
        if not any(span.overlaps(other) for other in kept_spans):
            kept_spans.append(span)
    return sorted(kept_spans), len(ranked) - len(kept_spans)


@dataclass(frozen=True)
class Thresholds:
    """Per-label minimum confidence; ``default`` for labels not named."""

    default: float = 0.0
    per_label: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, value in {"default": self.default, **self.per_label}.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(f"teacher threshold {name!r} must be a number, not {value!r}")
            if not 0.0 <= float(value) <= 1.0 or math.isnan(value):
                raise ConfigError(f"teacher threshold {name!r} must lie in [0, 1], not {value}")

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, float] | None) -> Thresholds:
        values = dict(mapping or {})
        default = values.pop("default", 0.0)
        return cls(default=default, per_label=values)

    def minimum(self, label: str) -> float:
        return float(self.per_label.get(label, self.default))

    def as_dict(self) -> dict[str, float]:
        return {"default": float(self.default), **{k: float(v) for k, v in self.per_label.items()}}


def apply_thresholds(
    spans: Sequence[ScoredSpan], thresholds: Thresholds
) -> tuple[list[ScoredSpan], int]:
    """The spans whose confidence reaches their label's threshold; and how many fell short."""
    kept = [s for s in spans if s.confidence is None or s.confidence >= thresholds.minimum(s.label)]
    return kept, len(spans) - len(kept)
