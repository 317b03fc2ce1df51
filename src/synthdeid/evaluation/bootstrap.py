"""Document-level bootstrap: percentile intervals and paired tests between systems.

Following SHIELD (sec. 2.5): documents are resampled with replacement
(``n_resamples`` = 2,000, ``seed`` = 42 by default) and every ratio is
recomputed on each resample. The resamples are one integer matrix ``W``
(resamples x documents, ``W[r, d]`` = how often document ``d`` was drawn in
resample ``r``) from ``numpy.random.default_rng(seed)``; the column sums of
every resample are then one product ``W @ counts``, so every headline and
per-label ratio of every resample costs one matrix product. Intervals are
percentile intervals (2.5th and 97.5th percentiles).

A figure can be undefined on a resample (precision on a draw without a
prediction, recall on one without gold; see
:mod:`~synthdeid.scoring.metrics`). Such resamples are skipped, not scored
0: the interval is taken over the resamples on which the figure is defined,
and is undefined (NaN, n/a in reports) when it is defined on none. Paired
tests skip the resamples on which either system's figure is undefined; a
difference whose observed value is undefined gets no p-value and is never
significant.

The paired test scores two systems on the same documents with the same
``W``: on each resample the difference ``system - reference`` of one metric
(overlap recall by default) is computed per label and for ALL. The two-sided
p-value is ``min(1, 2 * share of resamples whose difference is <= 0)`` when
the observed difference is positive (``>= 0`` when negative; 1.0 when it is
0). Bonferroni: ``p_bonferroni = min(1, p * m)`` with ``m`` the number of
labels with gold support; the ALL row gets the same correction (conservative);
a row is significant when ``p_bonferroni < alpha`` (i.e. ``p < alpha / m``).

The generic pieces (``W``, percentile intervals, p-values, Bonferroni) are
those of :mod:`synthdeid.stats`; this module scores count tables with them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from synthdeid.scoring.metrics import (
    ALL,
    LABEL_RATIOS,
    CountTable,
    column_name,
    headline_ratios,
    label_ratios,
    table_headline,
    table_per_label,
)
from synthdeid.stats import (
    ALPHA,
    N_RESAMPLES,
    SEED,
    Interval,
    difference_test,
    percentile_interval,
    resample_weights,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BootstrapResult:
    """Headline and per-label intervals of one system."""

    headline: dict[str, Interval]
    per_label: dict[str, dict[str, Interval]]  # label (and ALL) -> ratio -> interval
    support: dict[str, int]  # label (and ALL) -> gold spans
    predicted: dict[str, int]  # label (and ALL) -> predicted spans
    counts: dict[str, float]  # n_notes, n_notes_with_phi, n_gold_spans, n_predicted_spans
    n_resamples: int
    seed: int


@dataclass(frozen=True)
class PairedTest:
    """One row of a paired bootstrap test: ``system - reference`` on one label."""

    label: str
    support: int
    system: float
    reference: float
    diff: float
    diff_lo: float
    diff_hi: float
    p: float
    p_bonferroni: float
    significant: bool


@dataclass(frozen=True)
class PairedTestResult:
    metric: str
    m: int  # labels tested (with gold support), the Bonferroni factor
    alpha: float
    alpha_bonferroni: float
    n_resamples: int
    seed: int
    rows: list[PairedTest]  # labels with support, then ALL


def resampled_sums(table: CountTable, weights: np.ndarray) -> np.ndarray:
    """Column sums of every resample: ``W @ counts`` (resamples x columns)."""
    if weights.shape[1] != len(table.note_ids):
        raise ValueError(
            f"resample matrix covers {weights.shape[1]} documents, the table {len(table.note_ids)}"
        )
    # float64 BLAS is exact for integer sums below 2**53
    return weights.astype(np.float64) @ table.values.astype(np.float64)


def get_weights(n_docs: int, n_resamples: int, seed: int, weights: np.ndarray | None) -> np.ndarray:
    return resample_weights(n_docs, n_resamples, seed) if weights is None else weights


def bootstrap_metrics(
    table: CountTable,
    *,
    n_resamples: int = N_RESAMPLES,
    seed: int = SEED,
    weights: np.ndarray | None = None,
) -> BootstrapResult:
    """Point estimates and percentile intervals of every headline and per-label ratio.

    Pass ``weights`` (from :func:`resample_weights`) to reuse one resample
    matrix across systems; ``n_resamples`` and ``seed`` then only label the result.
    """
    w = get_weights(len(table.note_ids), n_resamples, seed, weights)
    sums = resampled_sums(table, w)
    point = table_headline(table)
    headline = {
        name: Interval(point[name], *percentile_interval(samples))
        for name, samples in headline_ratios(sums, table.index, table.missing).items()
    }
    point_labels = table_per_label(table)
    per_label: dict[str, dict[str, Interval]] = {}
    for label in (*table.labels, ALL):
        samples = label_ratios(sums, table.index, label, table.missing)
        per_label[label] = {
            name: Interval(point_labels[label][name], *percentile_interval(samples[name]))
            for name in LABEL_RATIOS
        }
    totals = table.totals()
    return BootstrapResult(
        headline=headline,
        per_label=per_label,
        support={
            lab: int(totals[table.index[column_name(lab, "gold")]]) for lab in (*table.labels, ALL)
        },
        predicted={
            lab: int(totals[table.index[column_name(lab, "pred")]]) for lab in (*table.labels, ALL)
        },
        counts={
            name: point[name]
            for name in ("n_notes", "n_notes_with_phi", "n_gold_spans", "n_predicted_spans")
        },
        n_resamples=int(w.shape[0]),
        seed=seed,
    )


def check_same_documents(system: CountTable, reference: CountTable) -> None:
    """Raise ValueError unless both tables score the same documents with the same gold."""
    if system.note_ids != reference.note_ids:
        in_system, in_reference = set(system.note_ids), set(reference.note_ids)
        only_system = [n for n in system.note_ids if n not in in_reference]
        only_reference = [n for n in reference.note_ids if n not in in_system]
        detail = (
            f"only in the system: {only_system[:5]}, only in the reference: {only_reference[:5]}"
            if only_system or only_reference
            else "same documents in a different order"
        )
        raise ValueError(
            "paired bootstrap needs both systems scored on the same documents in the same "
            f"order; {detail}"
        )
    labels = tuple(dict.fromkeys((*reference.labels, *system.labels)))
    a, b = system.with_labels(labels), reference.with_labels(labels)
    gold = [a.index[column_name(lab, "gold")] for lab in (*labels, ALL)]
    differs = np.flatnonzero((a.values[:, gold] != b.values[:, gold]).any(axis=1))
    if differs.size:
        first = [system.note_ids[k] for k in differs[:5]]
        raise ValueError(
            f"the two systems were scored against different gold spans (notes {first}); "
            "score both against the same gold notes"
        )


def paired_bootstrap_test(
    system: CountTable,
    reference: CountTable,
    *,
    metric: str = "overlap_recall",
    n_resamples: int = N_RESAMPLES,
    seed: int = SEED,
    weights: np.ndarray | None = None,
    alpha: float = ALPHA,
) -> PairedTestResult:
    """Paired bootstrap test of ``system - reference`` per label with support, and ALL.

    Both tables must score the same documents in the same order (ValueError
    otherwise). ``metric`` is one of :data:`LABEL_RATIOS`.
    """
    if metric not in LABEL_RATIOS:
        raise ValueError(f"unknown metric {metric!r}; choose from {', '.join(LABEL_RATIOS)}")
    check_same_documents(system, reference)
    labels = tuple(dict.fromkeys((*reference.labels, *system.labels)))
    system, reference = system.with_labels(labels), reference.with_labels(labels)
    w = get_weights(len(system.note_ids), n_resamples, seed, weights)
    sums_s, sums_r = resampled_sums(system, w), resampled_sums(reference, w)
    totals_s, totals_r = system.totals(), reference.totals()
    tested = [lab for lab in labels if totals_r[reference.index[column_name(lab, "gold")]] > 0]
    m = len(tested)
    rows = []
    for label in (*tested, ALL):
        obs_s = float(label_ratios(totals_s, system.index, label, system.missing)[metric])
        obs_r = float(label_ratios(totals_r, reference.index, label, reference.missing)[metric])
        diffs = (
            label_ratios(sums_s, system.index, label, system.missing)[metric]
            - label_ratios(sums_r, reference.index, label, reference.missing)[metric]
        )
        rows.append(
            PairedTest(
                label=label,
                support=int(totals_r[reference.index[column_name(label, "gold")]]),
                system=obs_s,
                reference=obs_r,
                **difference_test(obs_s - obs_r, diffs, m=m, alpha=alpha),
            )
        )
    return PairedTestResult(
        metric=metric,
        m=m,
        alpha=alpha,
        alpha_bonferroni=alpha / max(m, 1),
        n_resamples=int(w.shape[0]),
        seed=seed,
        rows=rows,
    )
