"""Confidence intervals, resampling and paired tests: every statistic the reports share.

A figure is *undefined* (None or NaN) where its denominator was empty;
:func:`is_undefined` says so and :func:`defined_or_none` turns it into JSON's
null. An :class:`Interval` is an estimate with its bounds, NaN where undefined.

* Bootstrap: :func:`resample_indices` draws items with replacement,
  :func:`resample_weights` turns the draws into a count matrix ``W``
  (resamples x items, ``W[r, i]`` = how often item ``i`` was drawn in resample
  ``r``), both from ``numpy.random.default_rng(seed)``;
  :func:`percentile_interval` is the percentile interval of the replicates
  where they are defined; :func:`bootstrap_mean_interval` resamples values
  and takes the mean.
* Paired tests on resampled differences: :func:`p_value` (two-sided, from
  sign changes), :func:`bonferroni`, :func:`is_significant`, and
  :func:`difference_test`, which gives all of them with the interval;
  :func:`bootstrap_se` (the SD of the resampled differences) and
  :func:`minimum_detectable_effect` (the smallest true difference a test of
  that standard error detects with power :data:`MDE_POWER`).
* Closed forms: :func:`wilson_interval` (a share), :func:`t_interval` (a mean
  over few values, e.g. training seeds), :func:`sample_sd` and
  :func:`quartiles` (numpy linear percentiles 25/50/75).
* Agreement: :func:`cohen_kappa` (two raters' verdicts on the same items).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

N_RESAMPLES = 2000
SEED = 42
CI_LEVEL = 0.95
ALPHA = 0.05
MDE_POWER = 0.8  # the power at which a minimum detectable effect is detected
TOLERANCE = 1e-12  # differences this small count as zero (float noise in F1 etc.)
_BOOTSTRAP_CHUNK_CELLS = 1 << 22  # resample draws held in memory at once


def is_undefined(value: float | None) -> bool:
    """True for None and NaN: a figure whose denominator was empty."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def defined_or_none(value: float | None) -> float | None:
    """``value`` as a float, or None where it is undefined (None or NaN): JSON's null."""
    if value is None:
        return None
    value = float(value)
    return None if np.isnan(value) else value


@dataclass(frozen=True)
class Interval:
    """A point estimate with its interval (NaN where undefined)."""

    estimate: float
    lo: float
    hi: float

    @property
    def defined(self) -> bool:
        return not np.isnan(self.estimate)

    def as_dict(self) -> dict[str, float | None]:
        """Estimate and bounds, None (JSON null, an empty CSV cell) where undefined."""
        return {
            "estimate": defined_or_none(self.estimate),
            "ci_lo": defined_or_none(self.lo),
            "ci_hi": defined_or_none(self.hi),
        }


def resample_indices(rng: np.random.Generator, n: int, n_resamples: int) -> np.ndarray:
    """Indices in ``[0, n)`` drawn with replacement, ``n`` per resample (resamples x n)."""
    return rng.integers(0, n, size=(n_resamples, n), dtype=np.int64)


def resample_weights(n_docs: int, n_resamples: int = N_RESAMPLES, seed: int = SEED) -> np.ndarray:
    """``W``: how often each document is drawn in each resample (resamples x documents)."""
    if n_docs < 1:
        raise ValueError("the bootstrap needs at least one document")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be positive, got {n_resamples}")
    drawn = resample_indices(np.random.default_rng(seed), n_docs, n_resamples)
    offsets = np.arange(n_resamples, dtype=np.int64)[:, None] * n_docs
    counts = np.bincount((drawn + offsets).ravel(), minlength=n_resamples * n_docs)
    return counts.reshape(n_resamples, n_docs).astype(np.int32)


def percentile_interval(samples: np.ndarray, level: float = CI_LEVEL) -> tuple[float, float]:
    """Percentile interval over the defined (non-NaN) samples; NaN bounds when there is none."""
    values = np.asarray(samples, dtype=float)
    values = values[~np.isnan(values)]
    if values.size == 0:
        return float("nan"), float("nan")
    tail = (1 - level) / 2 * 100
    lo, hi = np.percentile(values, [tail, 100 - tail])
    return float(lo), float(hi)


def bootstrap_mean_interval(
    values: Sequence[float] | np.ndarray,
    *,
    resamples: int = N_RESAMPLES,
    seed: int = SEED,
    level: float = CI_LEVEL,
) -> Interval:
    """Mean of ``values`` with a percentile bootstrap interval (resampling the values)."""
    data = np.asarray(values, dtype=np.float64)
    if data.size == 0:
        raise ValueError("the bootstrap needs at least one value")
    if resamples < 1:
        raise ValueError(f"resamples must be positive, got {resamples}")
    rng = np.random.default_rng(seed)
    n = data.size
    chunk = max(1, _BOOTSTRAP_CHUNK_CELLS // n)
    means = np.empty(resamples, dtype=np.float64)
    for start in range(0, resamples, chunk):
        stop = min(resamples, start + chunk)
        means[start:stop] = data[resample_indices(rng, n, stop - start)].mean(axis=1)
    lo, hi = percentile_interval(means, level)
    return Interval(float(data.mean()), lo, hi)


def p_value(observed: float, samples: np.ndarray) -> float:
    """Two-sided p from sign changes of the defined resampled differences.

    ``min(1, 2 * share of resamples whose difference is <= 0)`` when the
    observed difference is positive (``>= 0`` when negative; 1.0 when it is 0,
    within :data:`TOLERANCE`). NaN (no p) when the observed difference is
    undefined, or when no resampled difference is defined.
    """
    values = np.asarray(samples, dtype=float)
    values = values[~np.isnan(values)]
    if np.isnan(observed) or values.size == 0:
        return float("nan")
    if abs(observed) <= TOLERANCE:
        return 1.0
    changed = values <= TOLERANCE if observed > 0 else values >= -TOLERANCE
    return float(min(1.0, 2.0 * float(np.mean(changed))))


def bonferroni(p: float, m: int) -> float:
    """``min(1, p * m)``; NaN stays NaN (a test without a p-value)."""
    if np.isnan(p):
        return float("nan")
    return float(min(1.0, p * max(m, 1)))


def is_significant(p_adjusted: float, alpha: float) -> bool:
    """``p_adjusted < alpha``; never for an undefined p."""
    return bool(not np.isnan(p_adjusted) and p_adjusted < alpha)


def difference_test(
    observed: float,
    resampled: np.ndarray,
    *,
    m: int = 1,
    alpha: float = ALPHA,
    level: float = CI_LEVEL,
) -> dict[str, Any]:
    """A test of the ``observed`` difference from its ``resampled`` values.

    The keyword arguments of a test row: ``diff`` (the observed difference),
    ``diff_lo`` and ``diff_hi`` (its percentile interval), ``p`` (two-sided,
    :func:`p_value`), ``p_bonferroni`` (times ``m``) and ``significant``.
    """
    lo, hi = percentile_interval(resampled, level)
    p = p_value(observed, resampled)
    p_adjusted = bonferroni(p, m)
    return {
        "diff": observed,
        "diff_lo": lo,
        "diff_hi": hi,
        "p": p,
        "p_bonferroni": p_adjusted,
        "significant": is_significant(p_adjusted, alpha),
    }


def bootstrap_se(resampled: np.ndarray) -> float:
    """Standard error from resamples: the sample SD of the defined (non-NaN) values; NaN below 2."""
    values = np.asarray(resampled, dtype=float)
    return sample_sd(values[~np.isnan(values)])


def minimum_detectable_effect(
    se: float | None, alpha: float = ALPHA, power: float = MDE_POWER
) -> float:
    """The smallest true difference a two-sided test at ``alpha`` detects with ``power``.

    ``(z(1 - alpha / 2) + z(power)) * se`` for an estimate of standard error
    ``se``: 0.028016 for ``se`` 0.01 at the defaults. NaN where ``se`` is undefined.
    """
    if not 0 < power < 1:
        raise ValueError(f"power must be in (0, 1), got {power}")
    if se is None or math.isnan(se):
        return math.nan
    from statistics import NormalDist

    return (z_for_level(1 - alpha) + NormalDist().inv_cdf(power)) * float(se)


def z_for_level(level: float = CI_LEVEL) -> float:
    """Two-sided standard normal quantile: 1.959963984540054 for 0.95."""
    if not 0 < level < 1:
        raise ValueError(f"confidence level must be in (0, 1), got {level}")
    from statistics import NormalDist

    return NormalDist().inv_cdf(1 - (1 - level) / 2)


def wilson_interval(successes: int, n: int, level: float = CI_LEVEL) -> Interval:
    """Share ``successes / n`` with its Wilson score interval.

    ``center = (p + z^2 / 2n) / (1 + z^2 / n)``, ``half = z * sqrt(p (1 - p) / n +
    z^2 / 4n^2) / (1 + z^2 / n)``, interval ``center -/+ half`` clipped to [0, 1].
    """
    if n < 1:
        raise ValueError(f"a Wilson interval needs n >= 1, got {n}")
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be in [0, n={n}], got {successes}")
    z = z_for_level(level)
    p = successes / n
    denominator = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    # the bounds are exactly 0 at 0 successes and exactly 1 at n (no float residue)
    lo = 0.0 if successes == 0 else max(0.0, center - half)
    hi = 1.0 if successes == n else min(1.0, center + half)
    return Interval(p, lo, hi)


def sample_sd(values: Sequence[float] | np.ndarray) -> float:
    """Sample standard deviation (ddof=1); NaN for fewer than two values."""
    array = np.asarray(values, dtype=np.float64)
    return float(array.std(ddof=1)) if array.size > 1 else math.nan


def t_interval(values: Sequence[float] | np.ndarray, level: float = CI_LEVEL) -> Interval:
    """Mean with its t-interval ``mean +- t(0.5 + level / 2, n - 1) * SD / sqrt(n)``.

    NaN bounds for one value (no spread to estimate).
    """
    array = np.asarray(values, dtype=np.float64)
    if array.size == 0:
        raise ValueError("a t-interval needs at least one value")
    mean = float(array.mean())
    if array.size < 2:
        return Interval(mean, math.nan, math.nan)
    from scipy import stats

    t = float(stats.t.ppf(0.5 + level / 2, df=array.size - 1))
    half = t * sample_sd(array) / math.sqrt(array.size)
    return Interval(mean, mean - half, mean + half)


def quartiles(values: Sequence[float] | np.ndarray) -> tuple[float, float, float]:
    """First quartile, median and third quartile (numpy linear percentiles 25, 50, 75)."""
    array = np.asarray(values, dtype=np.float64)
    if array.size == 0:
        raise ValueError("quartiles need at least one value")
    q1, median, q3 = np.percentile(array, [25, 50, 75])
    return float(q1), float(median), float(q3)


def cohen_kappa(first: Sequence[Hashable], second: Sequence[Hashable]) -> float | None:
    """Cohen's kappa of two raters' verdicts on the same items (any categories).

    ``(p_o - p_e) / (1 - p_e)``: ``p_o`` the share of items given the same
    verdict, ``p_e = sum_k p1(k) * p2(k)`` the agreement expected by chance from
    each rater's own shares. Computed from counts, ``(n * agree - S) / (n^2 - S)``
    with ``S = sum_k n1(k) * n2(k)``, so 1 and 0 come out exactly. None (undefined)
    when there is no item, or when chance agreement is 1 (both raters gave one
    and the same verdict to every item).
    """
    if len(first) != len(second):
        raise ValueError(f"the raters judged {len(first)} and {len(second)} items, not the same")
    n = len(first)
    agree = sum(a == b for a, b in zip(first, second, strict=True))
    counts_first, counts_second = Counter(first), Counter(second)
    chance = sum(count * counts_second[verdict] for verdict, count in counts_first.items())
    if n == 0 or chance == n * n:
        return None
    return (n * agree - chance) / (n * n - chance)
