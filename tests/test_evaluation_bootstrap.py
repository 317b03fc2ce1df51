"""Tests for the document-level bootstrap: resampling, intervals, paired tests."""

from __future__ import annotations

import numpy as np
import pytest

from synthdeid.evaluation.bootstrap import bootstrap_metrics, paired_bootstrap_test, resampled_sums
from synthdeid.notes import Note, Span
from synthdeid.scoring.metrics import (
    ALL,
    HEADLINE_RATIOS,
    CountTable,
    column_name,
    count_table,
    headline_ratios,
)
from synthdeid.stats import resample_weights

TEXT = "Dr Quill saw Vera Moss on 3/14 in Oakvale."
DOCTOR = Span(3, 8, "DOCTOR")
PATIENT = Span(13, 22, "PATIENT")
DATE = Span(26, 30, "DATE")
LOCATION = Span(34, 41, "LOCATION")


def notes(n: int) -> list[Note]:
    """``n`` made-up notes; every third one without PHI."""
    spans = (DOCTOR, PATIENT, DATE, LOCATION)
    return [
        Note(f"n{k:03d}", f"p{k}", TEXT, () if k % 3 == 2 else spans, "unit", "holdout")
        for k in range(n)
    ]


def noisy_predictions(gold: list[Note], seed: int = 0) -> dict[str, list[Span]]:
    """Each gold span found with probability 0.8, plus a false positive now and then."""
    rng = np.random.default_rng(seed)
    predicted: dict[str, list[Span]] = {}
    for note in gold:
        spans = [s for s in note.spans if rng.random() < 0.8]
        if rng.random() < 0.2:
            spans.append(Span(0, 2, "OTHER"))
        predicted[note.note_id] = spans
    return predicted


def test_resampled_sums_are_weighted_document_sums() -> None:
    gold = notes(12)
    table = count_table(gold, noisy_predictions(gold))
    w = resample_weights(12, 5, seed=1)
    sums = resampled_sums(table, w)
    for r in range(5):
        expected = sum(w[r, d] * table.values[d] for d in range(12))
        assert np.array_equal(sums[r], expected)


def test_intervals_contain_the_point_estimate_and_are_deterministic() -> None:
    gold = notes(60)
    table = count_table(gold, noisy_predictions(gold))
    result = bootstrap_metrics(table, n_resamples=400, seed=42)
    assert result.n_resamples == 400
    assert result.seed == 42
    point = headline_ratios(table.totals(), table.index)
    for name in HEADLINE_RATIOS:
        interval = result.headline[name]
        assert interval.estimate == pytest.approx(float(point[name]))
        assert interval.lo <= interval.estimate <= interval.hi, name
    for label in ("DOCTOR", "DATE", ALL):
        interval = result.per_label[label]["overlap_recall"]
        assert interval.lo <= interval.estimate <= interval.hi
        assert interval.lo < interval.hi  # 60 noisy notes: the interval has width
    assert result.support[ALL] == 40 * 4
    again = bootstrap_metrics(table, n_resamples=400, seed=42)
    # as dicts: labels without gold or predictions hold undefined (NaN) figures
    assert {k: v.as_dict() for k, v in again.headline.items()} == {
        k: v.as_dict() for k, v in result.headline.items()
    }
    assert {
        label: {m: i.as_dict() for m, i in ratios.items()}
        for label, ratios in again.per_label.items()
    } == {
        label: {m: i.as_dict() for m, i in ratios.items()}
        for label, ratios in result.per_label.items()
    }
    other = bootstrap_metrics(table, n_resamples=400, seed=7)
    assert other.headline["span_overlap_recall"] != result.headline["span_overlap_recall"]


def test_identical_systems_differ_by_nothing() -> None:
    gold = notes(30)
    table = count_table(gold, noisy_predictions(gold))
    result = paired_bootstrap_test(table, table, n_resamples=300, seed=42)
    assert result.metric == "overlap_recall"
    assert [row.label for row in result.rows] == ["DOCTOR", "PATIENT", "DATE", "LOCATION", ALL]
    for row in result.rows:
        assert row.diff == 0.0
        assert (row.diff_lo, row.diff_hi) == (0.0, 0.0)
        assert row.p == row.p_bonferroni == 1.0
        assert not row.significant


def test_a_clearly_better_system_gets_a_small_p() -> None:
    gold = notes(60)
    perfect = {note.note_id: list(note.spans) for note in gold}
    # the reference always misses the patient and, in every other note, the doctor
    weaker = {
        note.note_id: [s for s in note.spans if s.label != "PATIENT"]
        if k % 2
        else [s for s in note.spans if s.label in ("DATE", "LOCATION")]
        for k, note in enumerate(gold)
    }
    system, reference = count_table(gold, perfect), count_table(gold, weaker)
    result = paired_bootstrap_test(system, reference, n_resamples=500, seed=42)
    rows = {row.label: row for row in result.rows}
    assert result.m == 4  # DOCTOR, PATIENT, DATE, LOCATION have gold support
    assert result.alpha_bonferroni == pytest.approx(0.05 / 4)
    assert rows["PATIENT"].diff == 1.0
    assert rows["PATIENT"].p == 0.0
    assert rows["PATIENT"].significant
    assert rows["DOCTOR"].diff == pytest.approx(0.5)
    assert rows["DOCTOR"].p < 0.01
    assert rows["DOCTOR"].significant
    assert rows["DATE"].diff == 0.0
    assert rows["DATE"].p == 1.0
    assert not rows["DATE"].significant
    assert rows[ALL].diff == pytest.approx(0.375)
    assert rows[ALL].significant
    # the other direction: a negative difference, tested the same way
    backwards = paired_bootstrap_test(reference, system, n_resamples=500, seed=42)
    assert {row.label: row.p for row in backwards.rows}["PATIENT"] == 0.0
    assert {row.label: row.diff for row in backwards.rows}["PATIENT"] == -1.0


def test_paired_test_rows_are_bonferroni_adjusted() -> None:
    gold = notes(30)
    system = count_table(gold, noisy_predictions(gold, seed=1))
    reference = count_table(gold, noisy_predictions(gold, seed=2))
    result = paired_bootstrap_test(system, reference, n_resamples=300, seed=42, alpha=0.05)
    for row in result.rows:
        assert row.p_bonferroni == pytest.approx(min(1.0, row.p * result.m))
        assert row.significant == (row.p_bonferroni < 0.05)


def test_paired_test_on_another_metric() -> None:
    gold = notes(20)
    table = count_table(gold, noisy_predictions(gold))
    result = paired_bootstrap_test(table, table, metric="exact_f1", n_resamples=50)
    assert result.metric == "exact_f1"
    with pytest.raises(ValueError, match="unknown metric"):
        paired_bootstrap_test(table, table, metric="accuracy", n_resamples=50)


def test_paired_test_refuses_different_documents_or_gold() -> None:
    gold = notes(10)
    table = count_table(gold, noisy_predictions(gold))
    fewer = count_table(gold[:9], noisy_predictions(gold[:9]))
    with pytest.raises(ValueError, match="same documents"):
        paired_bootstrap_test(table, fewer, n_resamples=20)
    shuffled = CountTable(table.note_ids[::-1], table.labels, table.values[::-1])
    with pytest.raises(ValueError, match="different order"):
        paired_bootstrap_test(table, shuffled, n_resamples=20)
    other_gold = [
        n if k else Note(n.note_id, n.patient_id, TEXT, (DATE,), "unit") for k, n in enumerate(gold)
    ]
    with pytest.raises(ValueError, match="different gold"):
        paired_bootstrap_test(table, count_table(other_gold, {}), n_resamples=20)


def test_labels_are_aligned_before_testing() -> None:
    gold = notes(10)
    base = count_table(gold, {})
    # a system with an extra label still lines up with the reference
    extra = count_table(gold, {"n000": [Span(0, 2, "PET")]})
    assert "PET" in extra.labels and "PET" not in base.labels
    result = paired_bootstrap_test(extra, base, n_resamples=20)
    assert [row.label for row in result.rows][-1] == ALL
    assert column_name("PET", "gold") in extra.columns


# -- undefined figures: skipped, never scored 0 -------------------------------------------


def two_notes() -> tuple[list[Note], dict[str, list[Span]]]:
    """Note ``a``: its DOCTOR found, the only prediction. Note ``b``: gold, no prediction.

    DOCTOR precision is 1/1 on both notes, and undefined on a resample that
    draws ``b`` twice (no prediction at all); a 0 there would pull the lower
    bound to 0 (a quarter of all resamples draw ``b`` twice).
    """
    gold = [
        Note("a", "p1", TEXT, (DOCTOR,), "unit", "holdout"),
        Note("b", "p2", TEXT, (DOCTOR,), "unit", "holdout"),
    ]
    return gold, {"a": [DOCTOR]}


def test_resamples_where_precision_is_undefined_are_skipped() -> None:
    gold, predicted = two_notes()
    table = count_table(gold, predicted)
    w = resample_weights(2, 400, seed=3)
    only_b = int((w[:, 0] == 0).sum())
    assert 50 < only_b < 150  # about a quarter of the draws hold no prediction
    result = bootstrap_metrics(table, weights=w)
    precision = result.per_label["DOCTOR"]["overlap_precision"]
    assert (precision.estimate, precision.lo, precision.hi) == (1.0, 1.0, 1.0)
    # recall is defined on every draw: 1/2 on (a, b), 1 on (a, a), 0 on (b, b)
    recall = result.per_label["DOCTOR"]["overlap_recall"]
    assert (recall.estimate, recall.lo, recall.hi) == (0.5, 0.0, 1.0)
    # a label nobody predicted and nobody wrote: every figure n/a, never 0
    date = result.per_label["DATE"]["overlap_precision"]
    assert np.isnan([date.estimate, date.lo, date.hi]).all()
    assert date.as_dict() == {"estimate": None, "ci_lo": None, "ci_hi": None}


def test_a_paired_difference_with_an_undefined_side_is_never_significant() -> None:
    gold, predicted = two_notes()
    system = count_table(gold, {})  # predicts nothing: precision undefined
    reference = count_table(gold, predicted)
    result = paired_bootstrap_test(system, reference, metric="overlap_precision", n_resamples=200)
    doctor = {row.label: row for row in result.rows}["DOCTOR"]
    assert np.isnan(doctor.system) and doctor.reference == 1.0
    assert np.isnan(doctor.diff) and np.isnan(doctor.p) and not doctor.significant
