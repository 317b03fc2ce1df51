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


def test_the_audit_quality_table_is_written_exactly() -> None:
    from synthdeid.dplm.audit_report import quality_markdown

    def interval(estimate: float, lo: float, hi: float) -> dict[str, float]:
        return {"estimate": estimate, "ci_lo": lo, "ci_hi": hi}

    lengths = {"median": 41.5, "q1": 30.0, "q3": 52.25}
    dp = {
        "privacy": {
            "dp": True,
            "epsilon": 3.987,
            "delta": 1e-4,
            "noise_multiplier": 1.2345,
            "steps": 40,
        },
        "perplexity": {"perplexity": 12.345},
        "outcomes": {
            "samples": 10,
            "ended": 7,
            "ended_share": interval(0.7, 0.3968, 0.8922),
            "accepted": 10,
            "accepted_share": interval(1.0, 0.7225, 1.0),
        },
        "distinct": {"distinct_1": 0.5, "distinct_2": 0.75, "distinct_3": 0.875},
        "lengths": {"synthetic": lengths, "real": lengths | {"median": 40.0}, "ks_statistic": 0.25},
        "exposure": {
            "references": 20,
            "exposures": [1.0, 4.5, 0.2],
            "mean": interval(1.9, 0.2, 4.5),
            "maximum": 4.5,
            "chance": 1.44,
            "ceiling": 4.39,
        },
    }
    no_dp = dp | {
        "privacy": {
            "dp": False,
            "epsilon": None,
            "delta": None,
            "noise_multiplier": None,
            "steps": 40,
        },
        "outcomes": None,
        "exposure": None,
    }
    real = {"distinct_1": 0.625, "distinct_2": 0.8, "distinct_3": 0.9}
    lines = quality_markdown({"dp": dp, "non_dp": no_dp}, real).splitlines()
    assert lines[:7] == [
        "## Privacy and text quality",
        "",
        "| model | DP | epsilon | delta | noise multiplier | steps | held-out perplexity "
        "| ended (EOS) | passed the validator | distinct-1 | distinct-2 | distinct-3 "
        "| words, median [IQR] | KS vs real |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        "| dp | yes | 3.99 | 1.00e-04 | 1.234 | 40 | 12.3 | 7 / 10 [0.40, 0.89] "
        "| 10 / 10 [0.72, 1.00] | 0.500 | 0.750 | 0.875 | 42 [30, 52] | 0.250 |",
        "| non_dp | no | n/a | n/a | n/a | 40 | 12.3 | n/a | n/a | 0.500 | 0.750 | 0.875 "
        "| 42 [30, 52] | 0.250 |",
        "| real held-out | | | | | | | | | 0.625 | 0.800 | 0.900 | 40 [30, 52] | |",
    ]
    assert lines[-3:] == [
        "| model | mean exposure, bits [95% CI] | max | canaries above chance |",
        "|---|---|---|---|",
        "| dp | 1.90 [0.20, 4.50] | 4.50 | 1 / 3 |",
    ]
