"""Text quality: distinct-n, length summaries, KS statistic."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.stats import ks_2samp

from synthdeid.dplm.text_quality import (
    distinct_n,
    ks_statistic,
    length_comparison,
    length_summary,
)


def test_distinct_n_by_hand() -> None:
    corpus = ["the cat sat", "The cat ran", "a"]
    # unigrams: the cat sat the cat ran a -> 7 total, {the, cat, sat, ran, a} = 5 unique
    assert distinct_n(corpus, 1) == 5 / 7
    # bigrams (within texts only): (the cat) (cat sat) (the cat) (cat ran) -> 3 / 4
    assert distinct_n(corpus, 2) == 3 / 4
    # trigrams: (the cat sat) (the cat ran) -> 2 / 2
    assert distinct_n(corpus, 3) == 1.0
    # no 4-grams anywhere, and no n-gram spans two texts
    assert distinct_n(corpus, 4) == 0.0
    assert distinct_n(["a b", "c d"], 3) == 0.0
    assert distinct_n([], 1) == 0.0
    assert distinct_n(["x x x x"], 1) == 0.25
    with pytest.raises(ValueError):
        distinct_n(corpus, 0)


def test_length_summary() -> None:
    summary = length_summary(["one", "one two", "one two three", "a b c d e f g h"])
    assert summary == {
        "n": 4,
        "mean": 3.5,
        "median": 2.5,
        "q1": 1.75,
        "q3": 4.25,
        "min": 1,
        "max": 8,
    }
    empty = length_summary([])
    assert empty["n"] == 0 and empty["mean"] is None and empty["max"] is None


def test_ks_statistic_matches_scipy() -> None:
    rng = np.random.default_rng(1)
    for _ in range(20):
        a = rng.integers(0, 30, size=rng.integers(1, 40))
        b = rng.integers(5, 40, size=rng.integers(1, 40))
        assert ks_statistic(a, b) == pytest.approx(ks_2samp(a, b).statistic, abs=1e-12)
    assert ks_statistic([1, 2, 3], [1, 2, 3]) == 0.0
    assert ks_statistic([1, 2], [5, 6, 7]) == 1.0
    with pytest.raises(ValueError):
        ks_statistic([], [1])


def test_length_comparison() -> None:
    synthetic = ["a b", "a b c", "a b c d"]
    real = ["a b c d e f g h i j", "a b c d e f g h i j k"]
    result = json.loads(json.dumps(length_comparison(synthetic, real), allow_nan=False))
    assert result["synthetic"]["mean"] == 3.0
    assert result["real"]["median"] == 10.5
    assert result["ks_statistic"] == 1.0
    assert 0.0 < result["ks_pvalue"] <= 1.0
    same = length_comparison(synthetic, synthetic)
    assert same["ks_statistic"] == 0.0
    assert same["ks_pvalue"] == pytest.approx(1.0)
    half = length_comparison([], real)
    assert half["ks_statistic"] is None and half["ks_pvalue"] is None
