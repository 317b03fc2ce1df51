"""Arms: one configuration trained with several seeds, summarized and tested as one.

An arm's runs (one per training seed, :mod:`synthdeid.ner.sweeps`) are scored
on the same documents. For each headline metric in :data:`ARM_METRICS` an arm
reports:

* the mean over its seeds of the metric on all documents, the sample SD over
  seeds, and the t-interval ``mean +- t(0.975, k-1) * SD / sqrt(k)`` (training
  noise only; n/a with one seed);
* a percentile bootstrap interval of that mean over documents, from the same
  resample matrix as every other run (sampling noise of the test notes only).

The test of an arm against the reference arm is a **two-level paired
bootstrap**: each resample draws the documents (shared by every run, so both
arms are scored on the same draw) and, independently, the training seeds of
each arm with replacement; the statistic is the difference of the two
seed means. When both arms have the same seeds, one seed draw serves both
(seed s of one arm is paired with seed s of the other). Its interval and its
two-sided p (from sign changes, :func:`synthdeid.stats.p_value`)
therefore carry both sources of variance. A t-test over 3 seeds would ignore
the test notes' sampling and have 2 degrees of freedom; the document bootstrap
alone would ignore training noise (Bouthillier et al. 2021 resample both).
With one seed per arm it is the document-level paired bootstrap of
``compare_ner`` on the headline metric. p is Bonferroni-adjusted across the
arms tested against the reference in the same metric.

Each test also gives ``se``, the SD of its bootstrap differences (the standard
error of the difference), and the *minimum detectable effect*
``mde = (z(0.975) + z(0.8)) * se`` (:func:`synthdeid.stats.minimum_detectable_effect`):
the smallest true difference from the reference that this design (these seeds
and these documents, resampled in pairs) would detect 80% of the time
(:data:`~synthdeid.stats.MDE_POWER`) by a two-sided test at 95%;
``mde_bonferroni`` tests at alpha / m, as ``significant`` does. A difference
that is not significant reads "cannot tell": a true effect below the MDE may
well go unseen, so it is no evidence of no effect.
:data:`LOWER_IS_BETTER` names the metrics where lower is better (document
leakage); :func:`reading` turns a test into "helps", "hurts" or "cannot tell".

A metric undefined for one seed (precision of a run that predicted nothing)
leaves the arm's mean and spread undefined (None in outputs, n/a in tables);
resamples on which it is undefined are skipped, as in
:mod:`~synthdeid.evaluation.bootstrap`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np

from synthdeid.evaluation.bootstrap import resampled_sums
from synthdeid.reporting import NOT_AVAILABLE
from synthdeid.scoring.metrics import CountTable, headline_ratios, table_headline
from synthdeid.scoring.vocabulary import METRICS, select
from synthdeid.stats import (
    ALPHA,
    CI_LEVEL,
    MDE_POWER,
    bootstrap_se,
    defined_or_none,
    difference_test,
    minimum_detectable_effect,
    percentile_interval,
    resample_indices,
    sample_sd,
    t_interval,
)

ARM_METRICS: tuple[str, ...] = select(
    "span_overlap_f1",
    "span_overlap_recall",
    "span_overlap_precision",
    "leakage_overlap_all",
    # label-agnostic: what a de-identifier is judged on where the label does not matter
    # (any label protects a span), and what anchors that name no label are compared on
    "detection_recall",
    "detection_precision",
    "leakage_detection_all",
)
# the share of notes that leak: an arm helps when it lowers them (higher is better elsewhere)
LOWER_IS_BETTER: frozenset[str] = frozenset(m.key for m in METRICS if m.lower_is_better)
HELPS, HURTS, CANNOT_TELL = "helps", "hurts", "cannot tell"


@dataclass(frozen=True)
class ArmMetric:
    """One metric of one arm: seed mean, its spread over seeds, its document interval.

    ``mean`` and the interval bounds are NaN where the metric is undefined.
    """

    mean: float
    sd: float | None  # sample SD over seeds; None with one seed
    t_lo: float | None  # t-interval over seeds; None with one seed
    t_hi: float | None
    ci_lo: float  # document bootstrap percentile interval of the seed mean
    ci_hi: float

    def as_dict(self) -> dict[str, float | None]:
        """Every figure, None where it is undefined (one seed, or an undefined metric)."""
        return {
            "mean": defined_or_none(self.mean),
            "sd": defined_or_none(self.sd),
            "t_lo": defined_or_none(self.t_lo),
            "t_hi": defined_or_none(self.t_hi),
            "ci_lo": defined_or_none(self.ci_lo),
            "ci_hi": defined_or_none(self.ci_hi),
        }


@dataclass(frozen=True)
class ArmSummary:
    arm: str
    runs: tuple[str, ...]
    metrics: dict[str, ArmMetric]


@dataclass(frozen=True)
class ArmTest:
    """``arm - reference`` in one metric by the two-level paired bootstrap."""

    arm: str
    reference: str
    metric: str
    seeds: int
    reference_seeds: int
    seeds_paired: bool
    diff: float
    diff_lo: float
    diff_hi: float
    p: float
    p_bonferroni: float  # times m, the arms tested against the reference in this metric
    m: int
    significant: bool  # p_bonferroni < alpha
    se: float  # SD of the bootstrap differences: the standard error of diff
    mde: float  # minimum detectable effect at alpha, power MDE_POWER (module docstring)
    mde_bonferroni: float  # the same at alpha / m, the level that decides significant


def reading(metric: str, diff: float | None, significant: bool | None) -> str:
    """What a test of ``arm - reference`` in ``metric`` says of the arm.

    "helps" or "hurts" when the difference is significant, better or worse for
    the metric (:data:`LOWER_IS_BETTER`); "cannot tell" when it is not; n/a when
    it is undefined.
    """
    if diff is None or math.isnan(diff):
        return NOT_AVAILABLE
    if not significant:
        return CANNOT_TELL
    return HELPS if (diff < 0) == (metric in LOWER_IS_BETTER) else HURTS


def seed_statistics(
    values: Sequence[float], level: float = CI_LEVEL
) -> tuple[float, float | None, float | None, float | None]:
    """Mean, sample SD and t-interval of per-seed values.

    SD and interval are None for one seed; all four are undefined (NaN mean,
    None spread) when the value of any seed is.
    """
    array = np.asarray(values, dtype=float)
    if array.size == 0:
        raise ValueError("an arm needs at least one run")
    mean = float(array.mean())
    if array.size < 2 or np.isnan(mean):
        return mean, None, None, None
    interval = t_interval(array, level)
    return mean, sample_sd(array), interval.lo, interval.hi


@dataclass(frozen=True)
class RunScores:
    """One run's headline metrics on all documents and on every document resample."""

    point: dict[str, float]
    resampled: dict[str, np.ndarray]  # metric -> one value per resample

    @classmethod
    def of(cls, table: CountTable, weights: np.ndarray) -> RunScores:
        sums = resampled_sums(table, weights)
        return cls(table_headline(table), headline_ratios(sums, table.index, table.missing))


def per_resample(runs: Sequence[RunScores], metric: str) -> np.ndarray:
    """The metric of each run on each document resample (runs x resamples)."""
    return np.stack([run.resampled[metric] for run in runs])


def summarize_arm(
    arm: str, runs: Mapping[str, RunScores], metrics: Sequence[str] = ARM_METRICS
) -> ArmSummary:
    """Seed statistics and the document interval of the seed mean, per metric."""
    scores = list(runs.values())
    out = {}
    for metric in metrics:
        mean, sd, t_lo, t_hi = seed_statistics([run.point[metric] for run in scores])
        ci_lo, ci_hi = percentile_interval(per_resample(scores, metric).mean(axis=0))
        out[metric] = ArmMetric(mean, sd, t_lo, t_hi, ci_lo, ci_hi)
    return ArmSummary(arm, tuple(runs), out)


def drawn_mean(values: np.ndarray, draws: np.ndarray) -> np.ndarray:
    """Per resample, the mean of the drawn seeds' values (``values``: seeds x resamples)."""
    columns = np.arange(values.shape[1])[:, None]
    return cast(np.ndarray, values.T[columns, draws].mean(axis=1))


def arm_paired_test(
    arm: str,
    runs: Mapping[str, RunScores],
    reference: str,
    reference_runs: Mapping[str, RunScores],
    *,
    metric: str,
    seeds: Sequence[int | None] | None = None,
    reference_seeds: Sequence[int | None] | None = None,
    rng_seed: int = 0,
    alpha: float = ALPHA,
    m: int = 1,
) -> ArmTest:
    """Two-level paired bootstrap of the seed-mean difference (module docstring).

    ``seeds`` / ``reference_seeds`` are the training seeds of the runs, in order;
    seeds are paired when both lists are equal and known. ``m`` arms are tested
    in this metric: p is Bonferroni-adjusted by it.
    """
    a, r = list(runs.values()), list(reference_runs.values())
    observed = float(
        np.mean([run.point[metric] for run in a]) - np.mean([run.point[metric] for run in r])
    )
    values_a, values_r = per_resample(a, metric), per_resample(r, metric)
    rng = np.random.default_rng(rng_seed)
    n = values_a.shape[1]
    paired = seeds is not None and list(seeds) == list(reference_seeds or []) and None not in seeds
    draws_a = resample_indices(rng, len(a), n)
    draws_r = draws_a if paired else resample_indices(rng, len(r), n)
    diffs = drawn_mean(values_a, draws_a) - drawn_mean(values_r, draws_r)
    se = bootstrap_se(diffs)
    return ArmTest(
        arm=arm,
        reference=reference,
        metric=metric,
        seeds=len(a),
        reference_seeds=len(r),
        seeds_paired=paired,
        m=m,
        **difference_test(observed, diffs, m=m, alpha=alpha),
        se=se,
        mde=minimum_detectable_effect(se, alpha, MDE_POWER),
        mde_bonferroni=minimum_detectable_effect(se, alpha / max(m, 1), MDE_POWER),
    )
