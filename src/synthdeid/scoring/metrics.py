"""Per-document counts, and every evaluation ratio computed from summed counts.

Each document becomes one row of integer counters (:class:`CountTable`):
for every label and for ``ALL``, the counters in :data:`LABEL_COUNTERS`, and
for ``ALL`` only the document flags in :data:`DOCUMENT_COUNTERS` (both named
in :mod:`~synthdeid.scoring.vocabulary`, with every metric). Column
names are ``"<label>.<counter>"`` (``"DATE.overlap_fn"``, ``"ALL.leak_overlap"``).
A table read from a file written before a counter existed has that counter
*missing* (:attr:`CountTable.missing`, zeros in its columns): every metric
computed from it is undefined for that table, the others are as before.
Every metric is a function of column *sums*, so the same code scores the
whole set (one sum) and every bootstrap resample (a matrix of sums, see
:mod:`~synthdeid.evaluation.bootstrap`).

``ALL`` sums the labels for exact, overlap and token counts (matching is
label-consistent there); detection and coverage80 are label-agnostic, so for
``ALL`` a gold span counts as detected / found by predictions of any label,
and per label by predictions of any label (detection) or of its own label
(coverage80).

Every figure is a ratio of sums, never an average of per-document ratios.
A ratio whose denominator is empty is undefined, NaN here and n/a in every
table and figure, never a number that would read as a finding:

* recall = found / gold; no gold: undefined (nothing could be found or missed).
* precision = correct / predicted; no predictions: undefined (nothing to be
  right or wrong about). Silence on text with PHI shows as recall 0, not as
  precision 0.
* F1 = 2PR / (P + R); 0.0 when P + R = 0; undefined when both P and R are.
  When exactly one of them is undefined the other is 0 (no prediction can be
  correct without gold, no gold span found without a prediction), and F1 is
  0.0, as 2TP / (2TP + FP + FN) gives; where the other is positive (only the
  label-agnostic detection figures of a label, whose predictions hit gold of
  other labels) F1 is undefined.
* leakage over notes with PHI, with no such note, and over all notes, with
  no note: undefined.

The two leakage families differ in what protects a gold span:
``leakage_overlap_*`` is label-consistent (a gold span counts as found only
when a prediction of its own label overlaps it, so PHI found but given
another label is leaked); ``leakage_detection_*`` is label-agnostic (any
overlapping prediction protects it, which is what redaction needs).

seqeval returns 0.0 for every empty denominator; the token figures agree
with it whenever the denominators are positive.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import cast

import numpy as np

from synthdeid.labels import CANONICAL_LABELS
from synthdeid.notes import Note, Span
from synthdeid.scoring.matching import (
    coverage_found,
    detection_match,
    document_entities,
    exact_match,
    overlap_match,
)
from synthdeid.scoring.vocabulary import CONVENTIONS, METRICS, metric
from synthdeid.scoring.vocabulary import DOCUMENT_COUNTERS as DOCUMENT_COUNTERS
from synthdeid.scoring.vocabulary import LABEL_COUNTERS as LABEL_COUNTERS

log = logging.getLogger(__name__)

ALL = "ALL"

# per-label ratios, in report order (safety first): the metrics with a per-label name
LABEL_RATIOS: tuple[str, ...] = tuple(
    m.per_label for m in METRICS if m.kind == "ratio" and m.per_label is not None
)
# headline ratios and counts, in report order (safety first)
HEADLINE_RATIOS: tuple[str, ...] = tuple(m.key for m in METRICS if m.kind == "ratio")
HEADLINE_COUNTS: tuple[str, ...] = tuple(m.key for m in METRICS if m.kind == "count")
DEFINITIONS: dict[str, str] = {m.key: m.definition for m in METRICS} | {"conventions": CONVENTIONS}


def column_name(label: str, counter: str) -> str:
    return f"{label}.{counter}"


def split_column(name: str) -> tuple[str, str]:
    """``"DATE.overlap_fn"`` -> ``("DATE", "overlap_fn")`` (labels may hold dots)."""
    label, _, counter = name.rpartition(".")
    return label, counter


def table_columns(labels: Sequence[str]) -> tuple[str, ...]:
    """Counter columns for ``labels``: each label's counters, then ALL's, then the flags."""
    columns = [column_name(label, c) for label in (*labels, ALL) for c in LABEL_COUNTERS]
    columns += [column_name(ALL, c) for c in DOCUMENT_COUNTERS]
    return tuple(columns)


def order_labels(labels: Iterable[str]) -> tuple[str, ...]:
    """Canonical labels first (all of them, for stable columns), then others sorted."""
    extra = sorted(set(labels) - set(CANONICAL_LABELS) - {ALL})
    return (*CANONICAL_LABELS, *extra)


@dataclass(frozen=True)
class CountTable:
    """Integer counters, one row per document (see the module docstring)."""

    note_ids: tuple[str, ...]
    labels: tuple[str, ...]
    values: np.ndarray  # (documents, columns), int64
    # counters the source did not hold (a file older than they are): zeros in ``values``,
    # and every metric computed from them undefined
    missing: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        expected = (len(self.note_ids), len(self.columns))
        if self.values.shape != expected:
            raise ValueError(f"count table has shape {self.values.shape}, expected {expected}")

    @cached_property
    def columns(self) -> tuple[str, ...]:
        return table_columns(self.labels)

    @cached_property
    def index(self) -> dict[str, int]:
        return {name: k for k, name in enumerate(self.columns)}

    def column(self, name: str) -> np.ndarray:
        return self.values[:, self.index[name]]

    def totals(self) -> np.ndarray:
        return cast(np.ndarray, self.values.sum(axis=0))

    def reordered(self, note_ids: Sequence[str]) -> CountTable:
        """The same counts with their rows in the order of ``note_ids`` (this table's ids)."""
        order = {note_id: k for k, note_id in enumerate(self.note_ids)}
        rows = [order[note_id] for note_id in note_ids]
        return CountTable(tuple(note_ids), self.labels, self.values[rows], self.missing)

    def with_labels(self, labels: Sequence[str]) -> CountTable:
        """The same counts over ``labels`` (a superset); new labels count zero."""
        missing = set(self.labels) - set(labels)
        if missing:
            raise ValueError(f"with_labels would drop labels {sorted(missing)}")
        columns = table_columns(labels)
        values = np.zeros((len(self.note_ids), len(columns)), dtype=np.int64)
        for k, name in enumerate(columns):
            if name in self.index:
                values[:, k] = self.values[:, self.index[name]]
        return CountTable(self.note_ids, tuple(labels), values, self.missing)


def document_counts(
    text: str, gold: Sequence[Span], pred: Sequence[Span], index: Mapping[str, int]
) -> np.ndarray:
    """One document's counter row (columns as in ``index``)."""
    row = np.zeros(len(index), dtype=np.int64)

    def add(label: str, counter: str, amount: int = 1) -> None:
        row[index[column_name(label, counter)]] += amount
        row[index[column_name(ALL, counter)]] += amount

    for span in gold:
        add(span.label, "gold")
    for span in pred:
        add(span.label, "pred")
    for scheme, outcome in (
        ("exact", exact_match(gold, pred)),
        ("overlap", overlap_match(gold, pred)),
    ):
        for span, hit in zip(outcome.gold, outcome.gold_hit, strict=True):
            add(span.label, f"{scheme}_tp" if hit else f"{scheme}_fn")
        for span, hit in zip(outcome.pred, outcome.pred_hit, strict=True):
            if not hit:
                add(span.label, f"{scheme}_fp")
    detected = detection_match(gold, pred)
    for span, hit in zip(detected.gold, detected.gold_hit, strict=True):
        add(span.label, "detection_tp_gold" if hit else "detection_fn")
    for span, hit in zip(detected.pred, detected.pred_hit, strict=True):
        add(span.label, "detection_tp_pred" if hit else "detection_fp")
    # coverage80: label-agnostic union for ALL, same-label union per label
    ordered = sorted(gold)
    row[index[column_name(ALL, "coverage80_found")]] += sum(coverage_found(ordered, pred))
    for span, found in zip(ordered, coverage_found(ordered, pred, same_label=True), strict=True):
        row[index[column_name(span.label, "coverage80_found")]] += found
    true_entities, pred_entities = document_entities(text, gold, pred)
    for label, *_ in true_entities:
        add(label, "token_true")
    for label, *_ in pred_entities:
        add(label, "token_pred")
    for label, *_ in true_entities & pred_entities:
        add(label, "token_tp")
    all_ = {c: row[index[column_name(ALL, c)]] for c in ("gold", "overlap_fn", "detection_fn")}
    row[index[column_name(ALL, "documents")]] = 1
    row[index[column_name(ALL, "has_gold")]] = int(all_["gold"] > 0)
    row[index[column_name(ALL, "leak_overlap")]] = int(all_["overlap_fn"] > 0)
    row[index[column_name(ALL, "leak_detection")]] = int(all_["detection_fn"] > 0)
    return row


def count_table(
    gold: Sequence[Note],
    predicted: Mapping[str, Sequence[Span]],
    labels: Iterable[str] = (),
) -> CountTable:
    """Per-document counts of ``predicted`` (note_id -> spans; absent = none) against ``gold``.

    The table's labels are the canonical labels, every other label of the
    gold or predicted spans, and any extra ``labels`` (see :func:`order_labels`).
    """
    seen = set(labels) | {s.label for note in gold for s in note.spans}
    seen |= {s.label for note in gold for s in predicted.get(note.note_id, ())}
    ordered = order_labels(seen)
    index = {name: k for k, name in enumerate(table_columns(ordered))}
    values = np.zeros((len(gold), len(index)), dtype=np.int64)
    for k, note in enumerate(gold):
        values[k] = document_counts(note.text, note.spans, predicted.get(note.note_id, ()), index)
    return CountTable(tuple(note.note_id for note in gold), ordered, values)


def share(part: np.ndarray, whole: np.ndarray) -> np.ndarray:
    """part / whole; NaN (undefined) where whole = 0."""
    part, whole = np.asarray(part, dtype=float), np.asarray(whole, dtype=float)
    return np.where(whole > 0, part / np.where(whole > 0, whole, 1.0), np.nan)


def recall(found: np.ndarray, gold: np.ndarray) -> np.ndarray:
    """found / gold; NaN (undefined) where there is no gold."""
    return share(found, gold)


def precision(correct: np.ndarray, predicted: np.ndarray) -> np.ndarray:
    """correct / predicted; NaN (undefined) where there are no predictions."""
    return share(correct, predicted)


def f1(p: np.ndarray, r: np.ndarray) -> np.ndarray:
    """2PR / (P + R) with the conventions of the module docstring.

    0.0 where P + R = 0, and where one of P, R is undefined and the other is
    0; NaN where both are undefined, or one is and the other is positive.
    """
    p, r = np.asarray(p, dtype=float), np.asarray(r, dtype=float)
    p_known, r_known = ~np.isnan(p), ~np.isnan(r)
    p0, r0 = np.where(p_known, p, 0.0), np.where(r_known, r, 0.0)
    total = p0 + r0
    harmonic = np.where(total > 0, 2 * p0 * r0 / np.where(total > 0, total, 1.0), 0.0)
    one_sided_zero = (p_known & ~r_known & (p0 == 0)) | (r_known & ~p_known & (r0 == 0))
    return np.where((p_known & r_known) | one_sided_zero, harmonic, np.nan)


def undefined_without(
    figures: dict[str, np.ndarray], missing: Collection[str]
) -> dict[str, np.ndarray]:
    """``figures`` (metric name -> values) with NaN wherever a metric needs a ``missing`` counter."""
    if not missing:
        return figures
    return {
        name: np.full(np.shape(values), np.nan) if metric(name).needs_any(missing) else values
        for name, values in figures.items()
    }


def label_ratios(
    sums: np.ndarray, index: Mapping[str, int], label: str, missing: Collection[str] = ()
) -> dict[str, np.ndarray]:
    """Every ratio in :data:`LABEL_RATIOS` (plus ``support``, ``n_predicted``) for one label.

    ``sums`` holds column sums on its last axis: a vector for one estimate,
    a (resamples x columns) matrix for many. Every figure that needs a
    counter in ``missing`` (:attr:`CountTable.missing`) is NaN.
    """

    def get(counter: str) -> np.ndarray:
        return sums[..., index[column_name(label, counter)]]

    gold, pred = get("gold"), get("pred")
    out: dict[str, np.ndarray] = {}
    for scheme in ("exact", "overlap"):
        out[f"{scheme}_recall"] = recall(get(f"{scheme}_tp"), gold)
        out[f"{scheme}_precision"] = precision(get(f"{scheme}_tp"), pred)
    out["detection_recall"] = recall(get("detection_tp_gold"), gold)
    out["detection_precision"] = precision(get("detection_tp_pred"), pred)
    out["coverage80_recall"] = recall(get("coverage80_found"), gold)
    out["token_recall"] = recall(get("token_tp"), get("token_true"))
    out["token_precision"] = precision(get("token_tp"), get("token_pred"))
    for scheme in ("exact", "overlap", "detection", "token"):
        out[f"{scheme}_f1"] = f1(out[f"{scheme}_precision"], out[f"{scheme}_recall"])
    ordered = {name: out[name] for name in LABEL_RATIOS}
    ordered["support"] = np.asarray(gold, dtype=float)
    ordered["n_predicted"] = np.asarray(pred, dtype=float)
    return undefined_without(ordered, missing)


def headline_ratios(
    sums: np.ndarray, index: Mapping[str, int], missing: Collection[str] = ()
) -> dict[str, np.ndarray]:
    """Every ratio in :data:`HEADLINE_RATIOS`, from column sums on the last axis (NaN where
    it needs a counter in ``missing``)."""
    everything = label_ratios(sums, index, ALL, missing)

    def get(counter: str) -> np.ndarray:
        return sums[..., index[column_name(ALL, counter)]]

    out = {
        "leakage_overlap_all": share(get("leak_overlap"), get("documents")),
        "leakage_overlap_phi": share(get("leak_overlap"), get("has_gold")),
        "leakage_detection_all": share(get("leak_detection"), get("documents")),
        "leakage_detection_phi": share(get("leak_detection"), get("has_gold")),
    }
    for name in HEADLINE_RATIOS:
        if name not in out:
            out[name] = everything[name.removeprefix("span_")]
    return undefined_without({name: out[name] for name in HEADLINE_RATIOS}, missing)


def headline_counts(sums: np.ndarray, index: Mapping[str, int]) -> dict[str, float]:
    """:data:`HEADLINE_COUNTS`: the single counter each counts, summed over ALL."""
    return {
        name: float(sums[index[column_name(ALL, metric(name).counters[0])]])
        for name in HEADLINE_COUNTS
    }


def table_headline(table: CountTable) -> dict[str, float]:
    """Headline figures (:data:`HEADLINE_RATIOS` and :data:`HEADLINE_COUNTS`) of a table."""
    sums = table.totals()
    ratios = headline_ratios(sums, table.index, table.missing)
    out = {name: float(value) for name, value in ratios.items()}
    out.update(headline_counts(sums, table.index))
    return out


def table_per_label(table: CountTable) -> dict[str, dict[str, float]]:
    """Per-label ratios, support and predictions for every label of the table, then ALL."""
    sums = table.totals()
    return {
        label: {
            name: float(v)
            for name, v in label_ratios(sums, table.index, label, table.missing).items()
        }
        for label in (*table.labels, ALL)
    }


def headline_metrics(
    gold: Sequence[Note], predicted: Mapping[str, Sequence[Span]]
) -> dict[str, float]:
    """Headline figures of ``predicted`` (note_id -> spans; absent = none, extra ids ignored).

    Keys: :data:`HEADLINE_RATIOS` (span exact / overlap, detection, coverage80
    and token precision / recall / F1, the four leakage rates) and
    :data:`HEADLINE_COUNTS`; all floats, NaN where undefined (module docstring).
    """
    return table_headline(count_table(gold, predicted))


def per_label_metrics(
    gold: Sequence[Note],
    predicted: Mapping[str, Sequence[Span]],
    labels: Sequence[str] | None = None,
) -> dict[str, dict[str, float]]:
    """Per-label precision / recall / F1 (overlap, exact, detection, token), support.

    Keys are the labels with gold support or predictions (or ``labels`` when
    given), then ``ALL``; each value maps :data:`LABEL_RATIOS`, ``support``
    (gold spans) and ``n_predicted`` to floats.
    """
    table = count_table(gold, predicted, labels or ())
    result = table_per_label(table)
    if labels is None:
        wanted = [
            lab for lab in table.labels if result[lab]["support"] or result[lab]["n_predicted"]
        ]
    else:
        wanted = list(labels)
    return {label: result[label] for label in (*wanted, ALL)}
