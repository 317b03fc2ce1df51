"""Tests for span matching and per-document metrics: every figure pinned by hand.

The six notes of :func:`cases` cover the situations that decide a score:
a boundary off by one, a label mismatch, a gold span split into two
predictions, a note with one of two spans missed, and notes without PHI with
and without a false positive. All text is made up.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from seqeval.metrics import f1_score, precision_score, recall_score
from seqeval.metrics.sequence_labeling import get_entities

from synthdeid.notes import Note, Span
from synthdeid.scoring.matching import (
    bio_tags,
    coverage_found,
    detection_match,
    document_entities,
    exact_match,
    overlap_match,
    overlap_pairs,
    token_entities,
    tokenize,
)
from synthdeid.scoring.metrics import (
    ALL,
    HEADLINE_COUNTS,
    HEADLINE_RATIOS,
    column_name,
    count_table,
    f1,
    headline_metrics,
    per_label_metrics,
    precision,
    recall,
)


def at(text: str, surface: str, label: str, cut: int = 0) -> Span:
    """The span of ``surface`` in ``text``, its end moved left by ``cut``."""
    start = text.index(surface)
    return Span(start, start + len(surface) - cut, label)


def note(note_id: str, text: str, spans: list[Span]) -> Note:
    return Note(note_id, f"p-{note_id}", text, tuple(spans), "unit", "holdout")


TEXT_A = "Seen by Dr Quill today."
TEXT_B = "Patient Vera Moss came in."
TEXT_C = "Lives near North Fork Bay now."
TEXT_D = "Visit 3/14, call 555-0100."
TEXT_E = "No identifiers in this note."
TEXT_F = "Follow up in clinic."


def cases() -> tuple[list[Note], dict[str, list[Span]]]:
    gold = [
        note("a", TEXT_A, [at(TEXT_A, "Quill", "DOCTOR")]),
        note("b", TEXT_B, [at(TEXT_B, "Moss", "PATIENT")]),
        note("c", TEXT_C, [at(TEXT_C, "North Fork Bay", "LOCATION")]),
        note("d", TEXT_D, [at(TEXT_D, "3/14", "DATE"), at(TEXT_D, "555-0100", "PHONE")]),
        note("e", TEXT_E, []),
        note("f", TEXT_F, []),
    ]
    predicted = {
        "a": [at(TEXT_A, "Quill", "DOCTOR", cut=1)],  # boundary off by one
        "b": [at(TEXT_B, "Moss", "DOCTOR")],  # wrong label
        "c": [at(TEXT_C, "North Fork", "LOCATION"), at(TEXT_C, "Bay", "LOCATION")],  # split
        "d": [at(TEXT_D, "3/14", "DATE")],  # PHONE missed
        # "e": absent = no predictions, and none needed
        "f": [at(TEXT_F, "clinic", "OTHER")],  # false positive in a note without PHI
    }
    return gold, predicted


def counts_of(gold: Note, pred: list[Span]) -> dict[str, int]:
    table = count_table([gold], {gold.note_id: pred})
    return {name: int(v) for name, v in zip(table.columns, table.values[0], strict=True)}


# -- matching schemes, one note at a time ---------------------------------------------


def test_boundary_off_by_one_is_an_exact_miss_and_an_overlap_hit() -> None:
    gold, pred = [at(TEXT_A, "Quill", "DOCTOR")], [at(TEXT_A, "Quill", "DOCTOR", cut=1)]
    assert exact_match(gold, pred).gold_hit == (False,)
    assert exact_match(gold, pred).pred_hit == (False,)
    assert overlap_match(gold, pred).gold_hit == (True,)
    assert overlap_match(gold, pred).pred_hit == (True,)
    c = counts_of(note("a", TEXT_A, gold), pred)
    assert (c["ALL.exact_tp"], c["ALL.exact_fp"], c["ALL.exact_fn"]) == (0, 1, 1)
    assert (c["ALL.overlap_tp"], c["ALL.overlap_fp"], c["ALL.overlap_fn"]) == (1, 0, 0)
    assert c["ALL.leak_overlap"] == 0


def test_identical_spans_match_exactly() -> None:
    gold = [at(TEXT_D, "3/14", "DATE")]
    assert exact_match(gold, list(gold)).gold_hit == (True,)
    # a duplicated prediction is one true positive and one false positive
    outcome = exact_match(gold, [gold[0], gold[0]])
    assert outcome.gold_hit == (True,)
    assert outcome.pred_hit == (True, False)


def test_label_mismatch_is_an_overlap_miss_but_a_detection_hit() -> None:
    gold, pred = [at(TEXT_B, "Moss", "PATIENT")], [at(TEXT_B, "Moss", "DOCTOR")]
    assert overlap_match(gold, pred).gold_hit == (False,)
    assert detection_match(gold, pred).gold_hit == (True,)
    assert detection_match(gold, pred).pred_hit == (True,)
    c = counts_of(note("b", TEXT_B, gold), pred)
    assert (c["ALL.overlap_tp"], c["ALL.overlap_fp"], c["ALL.overlap_fn"]) == (0, 1, 1)
    assert (c["PATIENT.overlap_fn"], c["DOCTOR.overlap_fp"]) == (1, 1)
    assert (c["ALL.detection_tp_gold"], c["ALL.detection_fn"]) == (1, 0)
    assert (c["ALL.detection_tp_pred"], c["ALL.detection_fp"]) == (1, 0)
    # detection per label: the PATIENT span is detected, the DOCTOR prediction correct
    assert (c["PATIENT.detection_tp_gold"], c["DOCTOR.detection_tp_pred"]) == (1, 1)
    assert (c["ALL.leak_overlap"], c["ALL.leak_detection"]) == (1, 0)
    # coverage80: any label for ALL, the same label per label
    assert (c["ALL.coverage80_found"], c["PATIENT.coverage80_found"]) == (1, 0)


def test_gold_split_into_two_predictions() -> None:
    gold = [at(TEXT_C, "North Fork Bay", "LOCATION")]
    pred = [at(TEXT_C, "North Fork", "LOCATION"), at(TEXT_C, "Bay", "LOCATION")]
    # overlap is one-to-one: the larger piece matches, the other is a false positive
    assert overlap_match(gold, pred).pred_hit == (True, False)  # sorted: "North Fork", "Bay"
    # detection is not: both pieces are correct, the gold span is detected once
    detected = detection_match(gold, pred)
    assert detected.gold_hit == (True,)
    assert detected.pred_hit == (True, True)
    c = counts_of(note("c", TEXT_C, gold), pred)
    assert (c["ALL.overlap_tp"], c["ALL.overlap_fp"], c["ALL.overlap_fn"]) == (1, 1, 0)
    assert (c["ALL.exact_tp"], c["ALL.exact_fp"], c["ALL.exact_fn"]) == (0, 2, 1)
    assert (c["ALL.detection_tp_gold"], c["ALL.detection_tp_pred"], c["ALL.detection_fp"]) == (
        1,
        2,
        0,
    )
    assert c["ALL.coverage80_found"] == 1  # 13 of 14 characters (the space is not covered)
    assert c["ALL.leak_overlap"] == 0


def test_one_of_two_spans_missed_makes_the_note_leak() -> None:
    gold = [at(TEXT_D, "3/14", "DATE"), at(TEXT_D, "555-0100", "PHONE")]
    c = counts_of(note("d", TEXT_D, gold), [at(TEXT_D, "3/14", "DATE")])
    assert (c["ALL.overlap_tp"], c["ALL.overlap_fn"], c["PHONE.overlap_fn"]) == (1, 1, 1)
    assert (c["ALL.has_gold"], c["ALL.leak_overlap"], c["ALL.leak_detection"]) == (1, 1, 1)


def test_notes_without_phi() -> None:
    clean = counts_of(note("e", TEXT_E, []), [])
    assert clean["ALL.documents"] == 1
    assert sum(v for k, v in clean.items() if k != "ALL.documents") == 0
    noisy = counts_of(note("f", TEXT_F, []), [at(TEXT_F, "clinic", "OTHER")])
    assert (noisy["ALL.exact_fp"], noisy["ALL.overlap_fp"], noisy["ALL.detection_fp"]) == (1, 1, 1)
    assert (noisy["ALL.has_gold"], noisy["ALL.leak_overlap"], noisy["ALL.leak_detection"]) == (
        0,
        0,
        0,
    )


def test_greedy_matching_takes_the_maximum_intersection_first() -> None:
    g1, g2 = Span(0, 4, "ID"), Span(6, 16, "ID")
    # the prediction shares 2 characters with g1 and 6 with g2: it goes to g2, g1 is missed
    assert overlap_pairs([g1, g2], [Span(2, 12, "ID")]) == [(1, 0)]
    # with a second prediction for g1 both gold spans are matched, largest first
    assert overlap_pairs([g2, g1], [Span(2, 12, "ID"), Span(0, 3, "ID")]) == [(1, 1), (0, 0)]
    # ties go to the earlier gold span
    assert overlap_pairs([Span(0, 5, "ID"), Span(5, 9, "ID")], [Span(3, 7, "ID")]) == [(0, 0)]
    # label-consistent: a larger intersection with another label does not count
    assert overlap_pairs([Span(0, 10, "DATE"), Span(10, 12, "ID")], [Span(0, 12, "ID")]) == [(1, 0)]


def test_coverage_at_79_and_80_percent() -> None:
    gold = [Span(0, 100, "ID")]
    assert coverage_found(gold, [Span(0, 79, "ID")]) == (False,)
    assert coverage_found(gold, [Span(0, 80, "ID")]) == (True,)
    assert coverage_found([Span(0, 10, "ID")], [Span(2, 10, "ID")]) == (True,)  # 8 of 10
    # the union of predictions counts, overlapping ones only once
    assert coverage_found(gold, [Span(0, 50, "ID"), Span(40, 80, "ID")]) == (True,)
    assert coverage_found(gold, [Span(0, 50, "ID"), Span(40, 79, "ID")]) == (False,)
    # label-agnostic by default, same label on request
    assert coverage_found(gold, [Span(0, 80, "DATE")]) == (True,)
    assert coverage_found(gold, [Span(0, 80, "DATE")], same_label=True) == (False,)
    assert coverage_found(gold, [Span(0, 50, "ID")], threshold=Fraction(1, 2)) == (True,)


def test_tokens_and_bio_tags() -> None:
    text = "Dr. Quill-Moss, 3/14"
    tokens = tokenize(text)
    assert [text[s:e] for s, e in tokens] == ["Dr", ".", "Quill", "-", "Moss", ",", "3", "/", "14"]
    spans = [Span(4, 14, "DOCTOR"), Span(16, 20, "DATE")]
    assert bio_tags(tokens, spans) == [
        "O",
        "O",
        "B-DOCTOR",
        "I-DOCTOR",
        "I-DOCTOR",
        "O",
        "B-DATE",
        "I-DATE",
        "I-DATE",
    ]
    # a span cutting a token tags the whole token; adjacent spans stay two entities
    assert bio_tags(tokens, [Span(5, 8, "DOCTOR"), Span(10, 14, "DOCTOR")]) == [
        "O",
        "O",
        "B-DOCTOR",
        "O",
        "B-DOCTOR",
        "O",
        "O",
        "O",
        "O",
    ]
    # a token already claimed by an earlier span is not re-tagged
    assert bio_tags(tokens, [Span(4, 6, "DOCTOR"), Span(5, 14, "PATIENT")])[2:5] == [
        "B-DOCTOR",
        "B-PATIENT",
        "I-PATIENT",
    ]
    gold_entities, pred_entities = document_entities(text, spans, [Span(4, 9, "DOCTOR")])
    assert gold_entities == {("DOCTOR", 2, 4), ("DATE", 6, 8)}
    assert pred_entities == {("DOCTOR", 2, 2)}


# -- aggregated figures -----------------------------------------------------------------


def test_headline_metrics_by_hand() -> None:
    gold, predicted = cases()
    h = headline_metrics(gold, predicted)
    assert set(h) == set(HEADLINE_RATIOS) | set(HEADLINE_COUNTS)
    assert all(isinstance(v, float) for v in h.values())
    expected = {
        # 6 notes, 4 with PHI, 5 gold spans, 6 predictions
        "n_notes": 6,
        "n_notes_with_phi": 4,
        "n_gold_spans": 5,
        "n_predicted_spans": 6,
        # exact: only the DATE in d
        "span_exact_precision": 1 / 6,
        "span_exact_recall": 1 / 5,
        "span_exact_f1": 2 / 11,
        # overlap: a, the larger piece of c, the DATE of d
        "span_overlap_precision": 3 / 6,
        "span_overlap_recall": 3 / 5,
        "span_overlap_f1": 6 / 11,
        # detection: every gold span but the PHONE; every prediction but the one in f
        "detection_precision": 5 / 6,
        "detection_recall": 4 / 5,
        "detection_f1": 40 / 49,
        # coverage80: a (4 of 5), b (any label), c (13 of 14), the DATE of d
        "coverage80_recall": 4 / 5,
        # tokens: a and the DATE of d are the only entities predicted exactly
        "token_precision": 2 / 6,
        "token_recall": 2 / 5,
        "token_f1": 4 / 11,
        # leakage: b and d miss a span under overlap matching, only d under detection
        "leakage_overlap_all": 2 / 6,
        "leakage_overlap_phi": 2 / 4,
        "leakage_detection_all": 1 / 6,
        "leakage_detection_phi": 1 / 4,
    }
    assert h == pytest.approx(expected)


def test_per_label_metrics_by_hand() -> None:
    gold, predicted = cases()
    per_label = per_label_metrics(gold, predicted)
    assert list(per_label) == ["DOCTOR", "PATIENT", "DATE", "LOCATION", "PHONE", "OTHER", ALL]
    doctor = per_label["DOCTOR"]  # gold in a; predictions in a (off by one) and b (wrong label)
    assert (doctor["support"], doctor["n_predicted"]) == (1, 2)
    assert (doctor["overlap_precision"], doctor["overlap_recall"]) == (0.5, 1.0)
    assert doctor["overlap_f1"] == pytest.approx(2 / 3)
    assert (doctor["exact_precision"], doctor["exact_recall"], doctor["exact_f1"]) == (0, 0, 0)
    # no predictions on a label with gold: precision undefined, recall 0, F1 0
    patient = per_label["PATIENT"]
    assert math.isnan(patient["overlap_precision"]) and patient["overlap_recall"] == 0.0
    assert patient["overlap_f1"] == 0.0
    assert (patient["detection_recall"], patient["coverage80_recall"]) == (1.0, 0.0)
    assert per_label["LOCATION"]["overlap_precision"] == 0.5
    assert per_label["LOCATION"]["detection_precision"] == 1.0
    assert per_label["DATE"]["exact_f1"] == 1.0
    assert per_label["PHONE"]["overlap_recall"] == 0.0
    # predictions on a label without gold: recall undefined, precision 0, F1 0
    other = per_label["OTHER"]
    assert (other["support"], other["overlap_precision"]) == (0, 0)
    assert math.isnan(other["overlap_recall"])
    assert other["overlap_f1"] == 0.0
    assert per_label[ALL]["overlap_recall"] == pytest.approx(3 / 5)


def test_empty_denominators_are_undefined_never_zero() -> None:
    clean = note("e", TEXT_E, [])
    nothing = headline_metrics([clean], {})
    for scheme in ("span_exact", "span_overlap", "detection", "token"):
        # no gold and no predictions: precision, recall and F1 are all undefined
        assert math.isnan(nothing[f"{scheme}_precision"])
        assert math.isnan(nothing[f"{scheme}_recall"])
        assert math.isnan(nothing[f"{scheme}_f1"])
    assert nothing["leakage_overlap_all"] == 0.0  # one note, and it leaks nothing
    assert math.isnan(nothing["leakage_overlap_phi"])  # no note with PHI
    noisy = headline_metrics([note("f", TEXT_F, [])], {"f": [at(TEXT_F, "clinic", "OTHER")]})
    assert noisy["span_overlap_precision"] == 0.0 and math.isnan(noisy["span_overlap_recall"])
    assert noisy["span_overlap_f1"] == 0.0  # 2TP / (2TP + FP + FN) = 0 / 1
    silent = headline_metrics([note("a", TEXT_A, [at(TEXT_A, "Quill", "DOCTOR")])], {})
    assert math.isnan(silent["span_overlap_precision"]) and silent["span_overlap_recall"] == 0.0
    assert silent["span_overlap_f1"] == 0.0  # 0 / (0 + 0 + 1)
    assert silent["leakage_overlap_all"] == silent["leakage_overlap_phi"] == 1.0
    empty = headline_metrics([], {})
    assert empty["n_notes"] == 0.0
    assert math.isnan(empty["leakage_overlap_all"])


def test_f1_conventions_by_hand() -> None:
    nan = math.nan
    p = np.array([0.5, 0.0, nan, nan, 0.0, nan, 0.6])
    r = np.array([1.0, 0.0, 0.0, nan, nan, 0.4, nan])
    got = f1(p, r)
    assert got[0] == pytest.approx(2 / 3)  # 2 * 0.5 * 1 / 1.5
    assert got[1] == 0.0  # P + R = 0
    assert got[2] == 0.0 and got[4] == 0.0  # one undefined, the other 0
    assert np.isnan(got[3])  # both undefined
    # one undefined, the other positive (label-agnostic detection only): undefined
    assert np.isnan(got[5]) and np.isnan(got[6])
    assert np.isnan(precision(np.array([0.0]), np.array([0.0])))[0]
    assert np.isnan(recall(np.array([0.0]), np.array([0.0])))[0]
    assert precision(np.array([3.0]), np.array([4.0]))[0] == 0.75


def test_token_counts_sum_to_seqeval_micro_scores() -> None:
    gold, predicted = cases()
    extra_text = "Dr. Quill-Moss saw Vera Moss on 3/14 at North Fork."
    gold.append(
        note(
            "g",
            extra_text,
            [
                Span(4, 14, "DOCTOR"),
                at(extra_text, "Vera Moss", "PATIENT"),
                at(extra_text, "3/14", "DATE"),
                at(extra_text, "North Fork", "LOCATION"),
            ],
        )
    )
    predicted["g"] = [
        Span(4, 9, "DOCTOR"),
        Span(10, 14, "DOCTOR"),
        at(extra_text, "Vera Moss", "PATIENT"),
        at(extra_text, "3/14", "DATE"),
        at(extra_text, "North", "LOCATION"),
    ]
    y_true = [bio_tags(tokenize(n.text), n.spans) for n in gold]
    y_pred = [bio_tags(tokenize(n.text), predicted.get(n.note_id, [])) for n in gold]
    table = count_table(gold, predicted)
    tp, n_pred, n_true = (
        table.column(column_name(ALL, c)).sum() for c in ("token_tp", "token_pred", "token_true")
    )
    assert (tp, n_pred, n_true) == (4, 11, 9)
    h = headline_metrics(gold, predicted)
    assert h["token_precision"] == pytest.approx(precision_score(y_true, y_pred))
    assert h["token_recall"] == pytest.approx(recall_score(y_true, y_pred))
    assert h["token_f1"] == pytest.approx(f1_score(y_true, y_pred))
    # per-label token counts sum to ALL
    per_label = sum(table.column(column_name(label, "token_tp")) for label in table.labels)
    assert np.array_equal(per_label, table.column(column_name(ALL, "token_tp")))


def test_order_of_spans_does_not_matter() -> None:
    gold, predicted = cases()
    reversed_predictions = {k: list(reversed(v)) for k, v in predicted.items()}
    assert headline_metrics(gold, reversed_predictions) == headline_metrics(gold, predicted)


def test_per_label_counts_add_up_to_all() -> None:
    gold, predicted = cases()
    table = count_table(gold, predicted)
    for counter in ("gold", "pred", "exact_tp", "overlap_tp", "overlap_fp", "detection_tp_pred"):
        total = sum(table.column(column_name(label, counter)) for label in table.labels)
        assert np.array_equal(total, table.column(column_name(ALL, counter)))


def test_token_entities_read_runs_like_seqeval() -> None:
    tags = ["O", "I-DATE", "I-DATE", "B-ID", "O", "O", "B-ID", "I-DATE", "I-ID", "O", "B-X", "I-X"]
    assert token_entities(tags) == set(get_entities(tags))
    assert token_entities([]) == set()
    assert token_entities(["O", "O"]) == set()
    rng = np.random.default_rng(0)
    alphabet = ["O", "O", "B-ID", "I-ID", "B-DATE", "I-DATE"]
    for _ in range(200):
        random_tags = [str(t) for t in rng.choice(alphabet, size=int(rng.integers(0, 25)))]
        assert token_entities(random_tags) == set(get_entities(random_tags))


def test_per_label_metrics_for_chosen_labels() -> None:
    gold, predicted = cases()
    per_label = per_label_metrics(gold, predicted, labels=["HOSPITAL", "PHONE"])
    assert list(per_label) == ["HOSPITAL", "PHONE", ALL]
    hospital = per_label["HOSPITAL"]  # no gold, no predictions: every ratio undefined
    assert hospital["support"] == 0
    assert all(math.isnan(hospital[name]) for name in ("overlap_precision", "overlap_recall"))
    assert math.isnan(hospital["overlap_f1"])
    assert per_label[ALL]["n_predicted"] == 6  # predictions of unlisted labels still count
