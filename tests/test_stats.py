"""Tests for the shared statistics: intervals against hand computations and scipy."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest
from scipy import stats as scipy_stats

from synthdeid import stats
from synthdeid.stats import (
    MDE_POWER,
    Interval,
    bonferroni,
    bootstrap_mean_interval,
    bootstrap_se,
    cohen_kappa,
    defined_or_none,
    difference_test,
    is_significant,
    is_undefined,
    minimum_detectable_effect,
    p_value,
    percentile_interval,
    quartiles,
    resample_indices,
    resample_weights,
    sample_sd,
    t_interval,
    wilson_interval,
    z_for_level,
)

NAN = float("nan")


def test_undefined_is_none_or_nan_and_becomes_null() -> None:
    assert is_undefined(None) and is_undefined(NAN) and is_undefined(np.float64("nan"))
    assert not is_undefined(0.0) and not is_undefined(0)
    assert defined_or_none(NAN) is None and defined_or_none(None) is None
    assert defined_or_none(np.float32(0.5)) == 0.5 and type(defined_or_none(1)) is float
    assert Interval(NAN, NAN, NAN).as_dict() == {"estimate": None, "ci_lo": None, "ci_hi": None}
    assert Interval(0.5, 0.25, 0.75).as_dict() == {"estimate": 0.5, "ci_lo": 0.25, "ci_hi": 0.75}
    assert Interval(0.5, NAN, NAN).defined and not Interval(NAN, 0.0, 1.0).defined


def test_resample_indices_draw_with_replacement_from_the_seeded_generator() -> None:
    drawn = resample_indices(np.random.default_rng(7), 5, 40)
    assert drawn.shape == (40, 5) and drawn.dtype == np.int64
    assert drawn.min() >= 0 and drawn.max() <= 4
    again = np.random.default_rng(7).integers(0, 5, size=(40, 5))
    assert np.array_equal(drawn, again)


def test_resample_weights_are_counts_of_a_draw() -> None:
    w = resample_weights(7, 50, seed=42)
    assert w.shape == (50, 7)
    assert (w.sum(axis=1) == 7).all()
    assert (w >= 0).all()
    assert np.array_equal(w, resample_weights(7, 50, seed=42))
    assert not np.array_equal(w, resample_weights(7, 50, seed=43))
    drawn = resample_indices(np.random.default_rng(42), 7, 50)
    for r in range(50):
        assert np.array_equal(w[r], np.bincount(drawn[r], minlength=7))
    with pytest.raises(ValueError, match="at least one document"):
        resample_weights(0, 10)
    with pytest.raises(ValueError, match="n_resamples must be positive"):
        resample_weights(3, 0)


def test_percentile_interval_over_the_defined_resamples_by_hand() -> None:
    samples = np.array([NAN, 0.2, 0.4, NAN, 0.6])
    assert percentile_interval(samples, level=0.0) == pytest.approx((0.4, 0.4))  # the median
    assert percentile_interval(samples, level=1.0) == pytest.approx((0.2, 0.6))
    assert percentile_interval(samples, level=0.5) == pytest.approx((0.3, 0.5))  # 25th, 75th
    assert all(np.isnan(percentile_interval(np.array([NAN, NAN]))))
    values = np.random.default_rng(0).normal(size=1001)
    assert percentile_interval(values) == pytest.approx(tuple(np.percentile(values, [2.5, 97.5])))


def test_bootstrap_mean_interval() -> None:
    constant = bootstrap_mean_interval([0.4] * 7, resamples=100)
    assert (constant.estimate, constant.lo, constant.hi) == pytest.approx((0.4, 0.4, 0.4))
    values = np.linspace(0, 1, 50)
    interval = bootstrap_mean_interval(values, resamples=500, seed=3)
    assert interval.estimate == pytest.approx(0.5)
    assert 0.38 < interval.lo < 0.5 < interval.hi < 0.62
    assert interval == bootstrap_mean_interval(values, resamples=500, seed=3)
    with pytest.raises(ValueError):
        bootstrap_mean_interval([], resamples=10)
    with pytest.raises(ValueError, match="resamples must be positive"):
        bootstrap_mean_interval([1.0], resamples=0)


def test_bootstrap_mean_interval_is_the_percentile_interval_of_resampled_means(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    values = np.array([0.1, 0.9, 0.3, 0.7, 0.5, 0.2])
    drawn = resample_indices(np.random.default_rng(11), values.size, 300)
    expected = np.percentile(values[drawn].mean(axis=1), [2.5, 97.5])
    interval = bootstrap_mean_interval(values, resamples=300, seed=11)
    assert (interval.lo, interval.hi) == pytest.approx(tuple(expected))
    # drawn in chunks or at once, the resamples are the same
    monkeypatch.setattr(stats, "_BOOTSTRAP_CHUNK_CELLS", 5 * values.size)
    assert bootstrap_mean_interval(values, resamples=300, seed=11) == interval


def test_p_value_and_bonferroni_arithmetic() -> None:
    samples = np.array([0.3, 0.2, -0.1, 0.5, 0.0, 0.4, 0.1, 0.2, 0.6, 0.3])
    assert p_value(0.2, samples) == pytest.approx(2 * 2 / 10)  # two samples <= 0
    assert p_value(-0.2, -samples) == pytest.approx(0.4)
    assert p_value(0.0, samples) == 1.0
    assert p_value(0.2, np.array([-1.0, -1.0, 1.0])) == 1.0  # capped at 1
    # one of the three defined differences changes sign: p = 2 * 1/3
    assert p_value(0.3, np.array([NAN, 0.1, -0.1, 0.2])) == pytest.approx(2 / 3)
    assert np.isnan(p_value(NAN, np.array([0.1, 0.2])))
    assert np.isnan(p_value(0.3, np.array([NAN, NAN])))
    assert bonferroni(0.004, 9) == pytest.approx(0.036)
    assert bonferroni(0.2, 9) == 1.0
    assert bonferroni(0.2, 0) == 0.2  # no label tested: no correction
    assert np.isnan(bonferroni(NAN, 4))
    assert not is_significant(NAN, 0.05)
    assert is_significant(0.01, 0.05) and not is_significant(0.05, 0.05)


def test_difference_test_by_hand() -> None:
    resampled = np.array([0.3, 0.2, -0.1, 0.5, 0.0, 0.4, 0.1, 0.2, 0.6, 0.3])
    test = difference_test(0.2, resampled, m=2, alpha=0.05)
    lo, hi = np.percentile(resampled, [2.5, 97.5])
    assert test == {
        "diff": 0.2,
        "diff_lo": pytest.approx(lo),
        "diff_hi": pytest.approx(hi),
        "p": pytest.approx(0.4),
        "p_bonferroni": pytest.approx(0.8),
        "significant": False,
    }
    clear = difference_test(1.0, np.full(50, 1.0), m=4, alpha=0.05)
    assert (clear["p"], clear["p_bonferroni"], clear["significant"]) == (0.0, 0.0, True)
    undefined = difference_test(NAN, resampled)
    assert np.isnan(undefined["p"]) and not undefined["significant"]


def test_minimum_detectable_effect_known_values() -> None:
    # (z(0.975) + z(0.8)) * se = (1.959964 + 0.841621) * 0.01
    assert MDE_POWER == 0.8
    assert minimum_detectable_effect(0.01) == pytest.approx(0.028016, abs=1e-6)
    assert minimum_detectable_effect(0.01, alpha=0.05 / 4) == pytest.approx(
        (scipy_stats.norm.ppf(1 - 0.05 / 8) + scipy_stats.norm.ppf(0.8)) * 0.01
    )
    assert minimum_detectable_effect(0.01, power=0.9) == pytest.approx(
        (1.959964 + 1.281552) * 0.01, abs=1e-6
    )
    assert minimum_detectable_effect(0.0) == 0.0
    assert np.isnan(minimum_detectable_effect(NAN)) and np.isnan(minimum_detectable_effect(None))
    with pytest.raises(ValueError, match="power"):
        minimum_detectable_effect(0.01, power=1.0)
    with pytest.raises(ValueError, match="level"):
        minimum_detectable_effect(0.01, alpha=0.0)


def test_bootstrap_se_is_the_sd_of_the_defined_resamples() -> None:
    assert bootstrap_se(np.array([0.1, NAN, 0.3, 0.2])) == pytest.approx(0.1)
    assert np.isnan(bootstrap_se(np.array([0.1, NAN]))) and np.isnan(bootstrap_se(np.array([])))


def test_wilson_known_values() -> None:
    assert z_for_level(0.95) == pytest.approx(1.959963984540054)
    assert z_for_level(0.9) == pytest.approx(scipy_stats.norm.ppf(0.95))
    with pytest.raises(ValueError, match="confidence level"):
        z_for_level(1.0)
    five = wilson_interval(5, 10)
    assert five.estimate == 0.5
    assert (five.lo, five.hi) == pytest.approx((0.236593, 0.763407), abs=1e-6)
    zero = wilson_interval(0, 10)
    assert (zero.estimate, zero.lo) == (0.0, 0.0)
    assert zero.hi == pytest.approx(0.277533, abs=1e-6)
    full = wilson_interval(20, 20)
    assert full.hi == 1.0
    assert full.lo == pytest.approx(0.838875, abs=1e-6)
    with pytest.raises(ValueError):
        wilson_interval(1, 0)
    with pytest.raises(ValueError):
        wilson_interval(3, 2)


@pytest.mark.parametrize(("successes", "n", "level"), [(3, 17, 0.95), (40, 41, 0.9), (1, 2, 0.99)])
def test_wilson_agrees_with_scipy(successes: int, n: int, level: float) -> None:
    expected = scipy_stats.binomtest(successes, n).proportion_ci(level, method="wilson")
    interval = wilson_interval(successes, n, level)
    assert interval.estimate == successes / n
    assert (interval.lo, interval.hi) == pytest.approx((expected.low, expected.high))


def test_sample_sd_and_t_interval_by_hand_and_against_scipy() -> None:
    assert sample_sd([0.5, 0.7, 0.9]) == pytest.approx(0.2)
    assert sample_sd([2.0, 4.0, 4.0, 5.0]) == pytest.approx(statistics.stdev([2, 4, 4, 5]))
    assert math.isnan(sample_sd([1.0]))
    interval = t_interval([0.5, 0.7, 0.9])
    half = 4.302652729911275 * 0.2 / math.sqrt(3)  # t(0.975, 2)
    assert (interval.estimate, interval.lo, interval.hi) == pytest.approx(
        (0.7, 0.7 - half, 0.7 + half)
    )
    values = [0.61, 0.64, 0.58, 0.66, 0.6]
    lo, hi = scipy_stats.t.interval(
        0.9, len(values) - 1, loc=np.mean(values), scale=scipy_stats.sem(values)
    )
    assert (t_interval(values, 0.9).lo, t_interval(values, 0.9).hi) == pytest.approx((lo, hi))
    one = t_interval([0.4])
    assert one.estimate == 0.4 and math.isnan(one.lo) and math.isnan(one.hi)
    with pytest.raises(ValueError, match="at least one value"):
        t_interval([])


def test_quartiles_are_numpy_linear_percentiles() -> None:
    assert quartiles([1, 2, 3, 4, 10]) == (2.0, 3.0, 4.0)
    assert quartiles([1.0, 2.0]) == (1.25, 1.5, 1.75)
    values = [3.5, 0.25, 7.0, 1.0, 2.0, 9.5]
    assert quartiles(values) == pytest.approx(
        tuple(statistics.quantiles(values, n=4, method="inclusive"))
    )
    assert all(type(q) is float for q in quartiles(np.array([1, 2, 3])))
    with pytest.raises(ValueError, match="at least one value"):
        quartiles([])


def test_cohen_kappa_perfect_chance_undefined_and_by_hand() -> None:
    assert cohen_kappa([True, False, True, False], [True, False, True, False]) == 1.0
    # observed 1/2, chance 1/2 * 1/2 + 1/2 * 1/2 = 1/2: no better than chance
    assert cohen_kappa([True, True, False, False], [True, False, True, False]) == 0.0
    assert cohen_kappa([], []) is None
    # both raters always say yes: chance agreement 1, kappa undefined (not 1, not 0)
    assert cohen_kappa([True] * 5, [True] * 5) is None
    # 24 pairs, 22 agree; 3 and 1 yes: chance (3 * 1 + 21 * 23) / 24^2 = 486 / 576
    first = [True, True, True] + [False] * 21
    second = [False, False, True] + [False] * 21
    assert cohen_kappa(first, second) == pytest.approx((22 / 24 - 486 / 576) / (1 - 486 / 576))
    # any categories: agreement below chance is negative
    assert cohen_kappa(["a", "b", "c"], ["b", "c", "a"]) == pytest.approx(-0.5)
    with pytest.raises(ValueError, match="not the same"):
        cohen_kappa([True], [True, False])
