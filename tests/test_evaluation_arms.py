"""Tests for arms: seed statistics, document intervals and the two-level paired bootstrap."""

from __future__ import annotations

import math

import numpy as np
import pytest

from synthdeid.evaluation.arms import (
    LOWER_IS_BETTER,
    ArmTest,
    RunScores,
    arm_paired_test,
    drawn_mean,
    reading,
    seed_statistics,
    summarize_arm,
)
from synthdeid.evaluation.bootstrap import paired_bootstrap_test
from synthdeid.notes import Note, Span
from synthdeid.scoring.metrics import count_table, table_headline
from synthdeid.stats import minimum_detectable_effect, resample_weights, sample_sd

TEXT = "Dr Quill saw Vera Moss on 3/14 in Oakvale."
SPANS = (Span(3, 8, "DOCTOR"), Span(13, 22, "PATIENT"), Span(26, 30, "DATE"))


def gold(n: int = 30) -> list[Note]:
    return [Note(f"n{k:02d}", f"p{k}", TEXT, SPANS, "unit", "holdout") for k in range(n)]


def run(notes: list[Note], found: float, seed: int):
    """A run that finds each gold span with probability ``found``."""
    rng = np.random.default_rng(seed)
    predicted = {n.note_id: [s for s in n.spans if rng.random() < found] for n in notes}
    return count_table(notes, predicted)


def scored(tables: dict, weights: np.ndarray) -> dict[str, RunScores]:
    return {name: RunScores.of(table, weights) for name, table in tables.items()}


def test_seed_statistics_by_hand() -> None:
    mean, sd, lo, hi = seed_statistics([0.5, 0.7, 0.9])
    assert mean == pytest.approx(0.7)
    assert sd == pytest.approx(0.2)
    half = 4.302652729911275 * 0.2 / math.sqrt(3)  # t(0.975, 2)
    assert (lo, hi) == (pytest.approx(0.7 - half), pytest.approx(0.7 + half))
    assert seed_statistics([0.4]) == (0.4, None, None, None)
    with pytest.raises(ValueError, match="at least one run"):
        seed_statistics([])


def test_drawn_mean_by_hand() -> None:
    values = np.array([[0.1, 0.2, 0.3], [0.5, 0.6, 0.7]])  # seeds x resamples
    draws = np.array([[0, 0], [1, 1], [0, 1]])  # per resample, the seeds drawn
    assert drawn_mean(values, draws) == pytest.approx([0.1, 0.6, 0.5])


def test_arm_summary_mean_over_seeds_and_its_document_interval() -> None:
    notes = gold()
    tables = {f"a-seed{s}": run(notes, 0.6 + 0.1 * s, s) for s in (1, 2, 3)}
    weights = resample_weights(len(notes), 300, seed=5)
    summary = summarize_arm("a", scored(tables, weights))
    recalls = [table_headline(t)["span_overlap_recall"] for t in tables.values()]
    metric = summary.metrics["span_overlap_recall"]
    assert metric.mean == pytest.approx(np.mean(recalls))
    assert metric.sd == pytest.approx(np.std(recalls, ddof=1))
    assert metric.t_lo < metric.mean < metric.t_hi
    # the identity resample (every document once) scores each run as on the whole set
    identity = np.ones((1, len(notes)), dtype=np.int32)
    point = summarize_arm("a", scored(tables, identity)).metrics["span_overlap_recall"]
    assert point.ci_lo == point.ci_hi == pytest.approx(np.mean(recalls))
    assert metric.ci_lo <= metric.mean <= metric.ci_hi
    assert summary.runs == tuple(tables)


def test_one_seed_each_is_the_document_paired_bootstrap() -> None:
    notes = gold()
    better, worse = run(notes, 0.9, 1), run(notes, 0.6, 2)
    weights = resample_weights(len(notes), 500, seed=3)
    test = arm_paired_test(
        "better",
        scored({"better": better}, weights),
        "worse",
        scored({"worse": worse}, weights),
        metric="span_overlap_recall",
    )
    reference = paired_bootstrap_test(better, worse, metric="overlap_recall", weights=weights)
    all_row = reference.rows[-1]
    assert test.diff == pytest.approx(all_row.diff)
    assert (test.diff_lo, test.diff_hi) == (
        pytest.approx(all_row.diff_lo),
        pytest.approx(all_row.diff_hi),
    )
    assert test.p == pytest.approx(all_row.p)
    assert test.seeds == test.reference_seeds == 1


def test_seed_noise_widens_the_interval_and_same_seeds_pair() -> None:
    notes = gold(40)
    weights = resample_weights(len(notes), 1000, seed=3)
    # arm "noisy": three seeds far apart; its seed mean equals a steady arm's
    noisy = scored(
        {f"noisy-seed{s}": run(notes, f, s) for s, f in ((1, 0.5), (2, 0.75), (3, 1.0))}, weights
    )
    steady = scored({f"steady-seed{s}": run(notes, 0.75, 10 + s) for s in (1, 2, 3)}, weights)
    reference = scored({f"ref-seed{s}": run(notes, 0.6, 20 + s) for s in (1, 2, 3)}, weights)
    kwargs = {"metric": "span_overlap_recall", "seeds": [1, 2, 3], "reference_seeds": [1, 2, 3]}
    noisy_test = arm_paired_test("noisy", noisy, "ref", reference, **kwargs)
    steady_test = arm_paired_test("steady", steady, "ref", reference, **kwargs)
    assert noisy_test.seeds_paired and steady_test.seeds_paired
    assert (noisy_test.diff_hi - noisy_test.diff_lo) > 2 * (
        steady_test.diff_hi - steady_test.diff_lo
    )
    unpaired = arm_paired_test(
        "noisy",
        noisy,
        "ref",
        reference,
        metric="span_overlap_recall",
        seeds=[1, 2, 3],
        reference_seeds=[4, 5, 6],
    )
    assert not unpaired.seeds_paired
    assert unpaired.diff == pytest.approx(noisy_test.diff)


def test_bonferroni_across_arms() -> None:
    notes = gold()
    a, b = run(notes, 0.9, 1), run(notes, 0.88, 2)
    weights = resample_weights(len(notes), 400, seed=1)
    a_scores, b_scores = scored({"a": a}, weights), scored({"b": b}, weights)
    one = arm_paired_test("a", a_scores, "b", b_scores, metric="span_overlap_f1")
    four = arm_paired_test("a", a_scores, "b", b_scores, metric="span_overlap_f1", m=4)
    assert four.p == one.p
    assert four.p_bonferroni == pytest.approx(min(1.0, 4 * one.p))
    assert four.m == 4


def test_standard_error_and_minimum_detectable_effect() -> None:
    notes = gold()
    a, b = run(notes, 0.9, 1), run(notes, 0.7, 2)
    weights = resample_weights(len(notes), 400, seed=1)
    a_scores, b_scores = scored({"a": a}, weights), scored({"b": b}, weights)
    one = arm_paired_test("a", a_scores, "b", b_scores, metric="span_overlap_f1")
    four = arm_paired_test("a", a_scores, "b", b_scores, metric="span_overlap_f1", m=4)
    # one seed each: the bootstrap differences are the runs' differences on each resample
    diffs = a_scores["a"].resampled["span_overlap_f1"] - b_scores["b"].resampled["span_overlap_f1"]
    assert one.se == four.se == pytest.approx(sample_sd(diffs[~np.isnan(diffs)]))
    assert one.se > 0
    assert one.mde == pytest.approx((1.959964 + 0.841621) * one.se, rel=1e-6)
    assert one.mde_bonferroni == one.mde == four.mde
    assert four.mde_bonferroni == pytest.approx(minimum_detectable_effect(one.se, alpha=0.05 / 4))
    assert four.mde_bonferroni > four.mde


def made_up(metric: str, diff: float, significant: bool) -> ArmTest:
    nan, p = float("nan"), 0.0 if significant else 0.5
    return ArmTest(
        "arm", "ref", metric, 3, 3, True, diff, nan, nan, p, 2 * p, 2, significant, nan, nan, nan
    )


def test_reading_follows_the_direction_of_each_metric() -> None:
    assert sorted(LOWER_IS_BETTER) == [
        "leakage_detection_all",
        "leakage_detection_phi",
        "leakage_overlap_all",
        "leakage_overlap_phi",
    ]
    cases = [
        ("span_overlap_f1", 0.03, True, "helps"),
        ("span_overlap_f1", -0.03, True, "hurts"),
        ("span_overlap_f1", 0.03, False, "cannot tell"),
        ("leakage_overlap_all", -0.05, True, "helps"),  # fewer notes leak
        ("leakage_detection_all", 0.05, True, "hurts"),
        ("leakage_overlap_all", -0.05, False, "cannot tell"),
        ("span_overlap_f1", float("nan"), False, "n/a"),
    ]
    for metric, diff, significant, expected in cases:
        test = made_up(metric, diff, significant)
        assert reading(test.metric, test.diff, test.significant) == expected, (metric, diff)
    assert reading("detection_recall", None, None) == "n/a"
