"""The evaluation's vocabulary: every counter, and every metric with its name and meaning.

A document's counts are integer counters (:data:`LABEL_COUNTERS` for every
label and for ``ALL``, :data:`DOCUMENT_COUNTERS` for ``ALL`` only; see
:mod:`~synthdeid.scoring.metrics`). Every figure computed from them is one
:class:`Metric` of :data:`METRICS`: its key (the name in metrics.json, the
CSV columns and the archives, which never changes), its label (the one
wording of every table, legend and axis), its definition, its unit, which way
is better, and the counters it is computed from. Every list of metrics
elsewhere (a report's columns, a figure's panels, a model card's rows) is a
selection of this registry (:func:`select`), so a metric is named and defined
here only.

A counter added later is missing from the per-document tables written before
it (:mod:`~synthdeid.evaluation.report` reads them); the metrics that need it
(:attr:`Metric.counters`) are then undefined for those runs, and the others
are computed as before.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Literal

# counted for every label and for ALL
LABEL_COUNTERS: tuple[str, ...] = (
    "gold",  # gold spans
    "pred",  # predicted spans
    "exact_tp",
    "exact_fp",
    "exact_fn",
    "overlap_tp",
    "overlap_fp",
    "overlap_fn",
    "detection_tp_gold",  # gold spans detected by any prediction
    "detection_fn",  # gold spans no prediction touches
    "detection_tp_pred",  # predictions touching any gold span
    "detection_fp",  # predictions touching no gold span
    "coverage80_found",  # gold spans >= 80% covered
    "token_tp",
    "token_pred",
    "token_true",
)
# counted for ALL only: 1 per document, and 0/1 flags
DOCUMENT_COUNTERS: tuple[str, ...] = ("documents", "has_gold", "leak_overlap", "leak_detection")
# what every per-document table holds, whatever its version: the counts that name its
# notes, spans and labels (a table without them is not one)
CORE_COUNTERS: frozenset[str] = frozenset({"gold", "pred", "documents", "has_gold"})

Kind = Literal["ratio", "count"]
Direction = Literal["higher", "lower"]


@dataclass(frozen=True)
class Metric:
    """One figure of an evaluation: its key, its name, its meaning and what it needs."""

    key: str  # metrics.json, CSV columns, archives: never renamed
    label: str  # the one wording of tables, legends and axes
    definition: str
    counters: tuple[str, ...]  # the counters it is a function of (of ALL, or of one label)
    per_label: str | None = None  # its name in per-label tables; None: ALL only
    kind: Kind = "ratio"
    unit: str = "0-1 scale"  # "0-1 scale", "share of notes"; counts: "notes", "spans"
    better: Direction | None = "higher"  # None: a count, neither

    @property
    def lower_is_better(self) -> bool:
        return self.better == "lower"

    def difference_unit(self) -> str:
        """What a difference of this metric is measured in (``difference on the 0-1 scale``)."""
        preposition = "on" if self.unit.endswith("scale") else "in"
        return f"difference {preposition} the {self.unit}"

    def needs_any(self, counters: Collection[str]) -> bool:
        """Whether any of ``counters`` is one this metric is computed from."""
        return any(counter in counters for counter in self.counters)


_TOKENS = "of BIO entities over \\w+|[^\\w\\s] tokens"

# report order (safety first): leakage, recall, precision, F1, then the counts
METRICS: tuple[Metric, ...] = (
    Metric(
        "leakage_overlap_all",
        "label-consistent document leakage",
        "label-consistent leakage: share of all notes with >=1 gold span unmatched under "
        "label-consistent overlap matching, so PHI found but given another label counts as "
        "leaked (VetSynth's primary safety metric)",
        ("leak_overlap", "documents"),
        unit="share of notes",
        better="lower",
    ),
    Metric(
        "leakage_overlap_phi",
        "label-consistent document leakage, notes with PHI",
        "leakage_overlap_all restricted to notes with >=1 gold span",
        ("leak_overlap", "has_gold"),
        unit="share of notes",
        better="lower",
    ),
    Metric(
        "leakage_detection_all",
        "label-agnostic document leakage",
        "label-agnostic leakage: share of all notes with >=1 gold span that no prediction of "
        "any label overlaps (any overlapping prediction protects a span)",
        ("leak_detection", "documents"),
        unit="share of notes",
        better="lower",
    ),
    Metric(
        "leakage_detection_phi",
        "label-agnostic document leakage, notes with PHI",
        "leakage_detection_all restricted to notes with >=1 gold span",
        ("leak_detection", "has_gold"),
        unit="share of notes",
        better="lower",
    ),
    Metric(
        "detection_recall",
        "detection recall",
        "share of gold spans overlapped by >=1 prediction of any label (label-agnostic, not "
        "one-to-one)",
        ("detection_tp_gold", "gold"),
        per_label="detection_recall",
    ),
    Metric(
        "span_overlap_recall",
        "span-overlap recall",
        "gold spans matched / gold spans; label-consistent greedy one-to-one matching by "
        "maximum character intersection",
        ("overlap_tp", "gold"),
        per_label="overlap_recall",
    ),
    Metric(
        "coverage80_recall",
        "80% coverage recall",
        "share of gold spans with >=80% of their characters inside the union of predictions "
        "(any label; SHIELD)",
        ("coverage80_found", "gold"),
        per_label="coverage80_recall",
    ),
    Metric(
        "span_exact_recall",
        "span-exact recall",
        "gold spans with a prediction of the same label and identical boundaries / gold spans",
        ("exact_tp", "gold"),
        per_label="exact_recall",
    ),
    Metric(
        "token_recall",
        "token recall",
        f"seqeval micro recall (conlleval mode) {_TOKENS}",
        ("token_tp", "token_true"),
        per_label="token_recall",
    ),
    Metric(
        "detection_precision",
        "detection precision",
        "share of predictions overlapping >=1 gold span of any label (label-agnostic, not "
        "one-to-one)",
        ("detection_tp_pred", "pred"),
        per_label="detection_precision",
    ),
    Metric(
        "span_overlap_precision",
        "span-overlap precision",
        "matched predictions / predictions under the same overlap matching",
        ("overlap_tp", "pred"),
        per_label="overlap_precision",
    ),
    Metric(
        "span_exact_precision",
        "span-exact precision",
        "predictions with a gold span of the same label and identical boundaries / predictions",
        ("exact_tp", "pred"),
        per_label="exact_precision",
    ),
    Metric(
        "token_precision",
        "token precision",
        f"seqeval micro precision (conlleval mode) {_TOKENS}",
        ("token_tp", "token_pred"),
        per_label="token_precision",
    ),
    Metric(
        "detection_f1",
        "detection F1",
        "harmonic mean of detection precision and recall",
        ("detection_tp_gold", "gold", "detection_tp_pred", "pred"),
        per_label="detection_f1",
    ),
    Metric(
        "span_overlap_f1",
        "span-overlap F1",
        "harmonic mean of span-overlap precision and recall",
        ("overlap_tp", "gold", "pred"),
        per_label="overlap_f1",
    ),
    Metric(
        "span_exact_f1",
        "span-exact F1",
        "harmonic mean of span-exact precision and recall",
        ("exact_tp", "gold", "pred"),
        per_label="exact_f1",
    ),
    Metric(
        "token_f1",
        "token F1",
        f"seqeval micro F1 (conlleval mode) {_TOKENS}",
        ("token_tp", "token_true", "token_pred"),
        per_label="token_f1",
    ),
    Metric(
        "n_notes",
        "notes",
        "notes scored",
        ("documents",),
        kind="count",
        unit="notes",
        better=None,
    ),
    Metric(
        "n_notes_with_phi",
        "notes with PHI",
        "notes with >=1 gold span",
        ("has_gold",),
        kind="count",
        unit="notes",
        better=None,
    ),
    Metric(
        "n_gold_spans",
        "gold spans",
        "gold spans",
        ("gold",),
        per_label="support",
        kind="count",
        unit="spans",
        better=None,
    ),
    Metric(
        "n_predicted_spans",
        "predicted spans",
        "predicted spans",
        ("pred",),
        per_label="n_predicted",
        kind="count",
        unit="spans",
        better=None,
    ),
)

CONVENTIONS = (
    "ratios of summed counts; undefined (null, n/a) where the denominator is empty: recall "
    "with no gold, precision with no predictions, leakage with no notes; F1 = 0 when P + R = 0 "
    "or when one of P, R is undefined and the other 0, undefined when both are; bootstrap "
    "intervals over the resamples where the figure is defined, n/a when it is defined in "
    "none"
)

# every metric by its key and by its per-label name
BY_NAME: dict[str, Metric] = {
    **{m.per_label: m for m in METRICS if m.per_label is not None},
    **{m.key: m for m in METRICS},
}


def metric(name: str) -> Metric:
    """The metric of a key (``span_overlap_f1``) or a per-label name (``overlap_f1``)."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"no metric {name!r}; known: {', '.join(BY_NAME)}") from None


def select(*names: str) -> tuple[str, ...]:
    """``names``, each checked to be a metric of the registry (KeyError otherwise)."""
    for name in names:
        metric(name)
    return names


def label(name: str) -> str:
    """How tables, legends and axes name the metric ``name`` (a key or a per-label name)."""
    return metric(name).label
