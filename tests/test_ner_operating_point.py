"""Choosing the O threshold: rule parsing, the three selection modes and the sweep."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from synthdeid.errors import ConfigError
from synthdeid.ner.operating_point import (
    DEFAULT_GRID,
    OperatingPointRule,
    choose,
    select_operating_point,
    set_operating_point,
    sweep,
)
from synthdeid.notes import Note, Span
from synthdeid.scoring.metrics import HEADLINE_COUNTS, HEADLINE_RATIOS, headline_metrics


def row(
    threshold: float,
    *,
    recall: float = 0.5,
    precision: float = 0.5,
    leakage: float = 0.5,
    f1: float = 0.5,
) -> dict[str, float]:
    """A hand-made sweep row with the four figures the rules look at."""
    return {
        "o_threshold": threshold,
        "detection_recall": recall,
        "detection_precision": precision,
        "leakage_overlap_all": leakage,
        "span_overlap_f1": f1,
    }


# ---------------------------------------------------------------- from_mapping


def test_from_mapping_defaults_and_conversion() -> None:
    assert OperatingPointRule.from_mapping({}) == OperatingPointRule()
    rule = OperatingPointRule.from_mapping(
        {"mode": "leakage", "target_recall": "0.9", "precision_floor": 0.6, "grid": [0.9, "0.7"]}
    )
    assert rule.mode == "leakage"
    assert rule.target_recall == 0.9
    assert rule.precision_floor == 0.6
    assert rule.grid == (0.9, 0.7)
    assert OperatingPointRule().grid == DEFAULT_GRID


def test_from_mapping_rejects_an_unknown_mode() -> None:
    with pytest.raises(ConfigError, match=r"mode: 'f1'"):
        OperatingPointRule.from_mapping({"mode": "f1"})


@pytest.mark.parametrize("grid", [[0.0, 0.5], [0.5, 1.0], [1.5], [-0.2, 0.9], []])
def test_from_mapping_rejects_a_grid_outside_the_open_unit_interval(grid: list[float]) -> None:
    with pytest.raises(ConfigError, match=r"grid"):
        OperatingPointRule.from_mapping({"grid": grid})


# ---------------------------------------------------------------- choose: recall


def test_recall_takes_the_smallest_threshold_reaching_the_target() -> None:
    rows = [
        row(0.99, recall=0.99),
        row(0.5, recall=0.80),
        row(0.9, recall=0.97),  # exactly the target counts as reaching it
        row(0.95, recall=0.98),
        row(0.7, recall=0.96),
    ]
    chosen = choose(rows, OperatingPointRule(mode="recall", target_recall=0.97, precision_floor=0))
    assert chosen["o_threshold"] == 0.9


def test_recall_falls_back_to_the_highest_recall_then_the_lower_threshold() -> None:
    rows = [
        row(0.5, recall=0.6),
        row(0.9, recall=0.85),
        row(0.8, recall=0.85),
        row(0.7, recall=0.7),
    ]
    chosen = choose(rows, OperatingPointRule(mode="recall", target_recall=0.97, precision_floor=0))
    assert chosen["o_threshold"] == 0.8


def test_recall_only_considers_thresholds_meeting_the_precision_floor() -> None:
    rows = [
        row(0.5, recall=0.90, precision=0.85),
        row(0.9, recall=0.95, precision=0.81),
        row(0.99, recall=1.00, precision=0.05),  # reaches the target by tagging everything
    ]
    rule = OperatingPointRule(mode="recall", target_recall=0.97, precision_floor=0.8)
    assert choose(rows, rule)["o_threshold"] == 0.9
    # nothing meets the floor: argmax
    strict = OperatingPointRule(mode="recall", target_recall=0.97, precision_floor=0.9)
    assert choose(rows, strict)["o_threshold"] == 0.5


# ---------------------------------------------------------------- choose: leakage


def test_leakage_takes_the_lowest_leakage_above_the_precision_floor() -> None:
    rows = [
        row(0.5, precision=0.95, leakage=0.30),
        row(0.7, precision=0.85, leakage=0.20),
        row(0.9, precision=0.80, leakage=0.10),  # exactly at the floor counts
        row(0.99, precision=0.60, leakage=0.00),  # leaks least but is too imprecise
    ]
    chosen = choose(rows, OperatingPointRule(mode="leakage", precision_floor=0.8))
    assert chosen["o_threshold"] == 0.9


def test_leakage_ties_go_to_the_higher_span_overlap_f1() -> None:
    rows = [
        row(0.6, precision=0.9, leakage=0.1, f1=0.70),
        row(0.8, precision=0.9, leakage=0.1, f1=0.75),
        row(0.9, precision=0.9, leakage=0.1, f1=0.72),
        row(0.5, precision=0.9, leakage=0.2, f1=0.90),
    ]
    chosen = choose(rows, OperatingPointRule(mode="leakage", precision_floor=0.8))
    assert chosen["o_threshold"] == 0.8


def test_leakage_without_a_row_meeting_the_floor_takes_the_most_precise() -> None:
    rows = [
        row(0.5, precision=0.70, leakage=0.3),
        row(0.7, precision=0.75, leakage=0.2),
        row(0.9, precision=0.60, leakage=0.0),
    ]
    chosen = choose(rows, OperatingPointRule(mode="leakage", precision_floor=0.8))
    assert chosen["o_threshold"] == 0.7


# ---------------------------------------------------------------- choose: argmax


def test_argmax_takes_the_half_row_whatever_the_metrics() -> None:
    rows = [
        row(0.9, recall=1.0, precision=1.0, leakage=0.0, f1=1.0),
        row(0.5, recall=0.1, precision=0.1, leakage=0.9, f1=0.1),
        row(0.7, recall=0.9, precision=0.9, leakage=0.1, f1=0.9),
    ]
    assert choose(rows, OperatingPointRule(mode="argmax"))["o_threshold"] == 0.5


def test_argmax_without_a_half_row_takes_the_nearest_threshold() -> None:
    rows = [row(0.9), row(0.6), row(0.8)]
    assert choose(rows, OperatingPointRule(mode="argmax"))["o_threshold"] == 0.6


# ---------------------------------------------------------------- sweep


def test_sweep_is_sorted_by_threshold_and_carries_the_headline_metrics() -> None:
    text_a = "Seen by Dr. Marlowe on 4/12."
    text_b = "Call Dr. Tsang about the 9/3 visit."
    gold = [
        Note(
            "a",
            "p1",
            text_a,
            (Span(12, 19, "DOCTOR"), Span(23, 27, "DATE")),
            "made-up",
        ),
        Note("b", "p2", text_b, (Span(9, 14, "DOCTOR"), Span(25, 28, "DATE")), "made-up"),
    ]
    assert gold[0].spans[0].surface(text_a) == "Marlowe"
    assert gold[1].spans[1].surface(text_b) == "9/3"
    calls: list[float] = []

    def decode(threshold: float) -> dict[str, list[Span]]:
        # a higher threshold finds more: the names from 0.7, the dates from 0.9
        calls.append(threshold)
        found: dict[str, list[Span]] = {"a": [], "b": []}
        for note in gold:
            for span in note.spans:
                if (span.label == "DOCTOR" and threshold >= 0.7) or threshold >= 0.9:
                    found[note.note_id].append(span)
        return found

    rows = sweep(gold, decode, [0.9, 0.5, 0.7, 0.9, 0.99])
    assert [r["o_threshold"] for r in rows] == [0.5, 0.7, 0.9, 0.99]
    assert sorted(calls) == [0.5, 0.7, 0.9, 0.99]  # each threshold decoded once
    for r in rows:
        assert set(r) == {"o_threshold", *HEADLINE_RATIOS, *HEADLINE_COUNTS}
        expected = headline_metrics(gold, decode(r["o_threshold"]))
        # nan_ok: at 0.5 nothing is predicted, so every precision is undefined (NaN)
        assert {k: v for k, v in r.items() if k != "o_threshold"} == pytest.approx(
            expected, nan_ok=True
        )
    assert [r["detection_recall"] for r in rows] == [0.0, 0.5, 1.0, 1.0]
    assert [r["leakage_overlap_all"] for r in rows] == [1.0, 1.0, 0.0, 0.0]
    assert rows[0]["n_notes"] == 2.0
    assert rows[2]["n_predicted_spans"] == 4.0
    # the recall rule on this sweep picks the first threshold that finds everything
    assert choose(rows, OperatingPointRule(target_recall=0.97))["o_threshold"] == 0.9


def test_leakage_fallback_ranks_a_threshold_without_predictions_last() -> None:
    # the first row predicts nothing: its precision is undefined (NaN), not the best
    rows = [row(0.5, precision=float("nan")), row(0.9, precision=0.3), row(0.99, precision=0.1)]
    chosen = choose(rows, OperatingPointRule(mode="leakage", precision_floor=0.8))
    assert chosen["o_threshold"] == 0.9


class ThresholdTagger:
    """A stand-in tagger: a note's "probabilities" are, per gold span, the P(O) at which
    it is found (a span is PHI below its threshold), in the note's "encoding"."""

    def __init__(self) -> None:
        self.settings = SimpleNamespace(o_threshold=0.5, operating_point={})
        self.seen: list[tuple[Any, Any]] = []

    def decode(self, probs: Any, encoded: Any, text: str, *, o_threshold: float) -> list[Span]:
        self.seen.append((probs, encoded))
        return [span for span, p in zip(encoded, probs, strict=True) if p < o_threshold]


def test_set_operating_point_sets_the_chosen_threshold_and_its_record() -> None:
    notes = [
        Note("a", "p1", "Dr. Marlowe", (Span(4, 11, "DOCTOR"),), "made-up"),
        Note("b", "p2", "on 4/12", (Span(3, 7, "DATE"),), "made-up"),
    ]
    encoded = [note.spans for note in notes]
    probabilities = [[0.6], [0.8]]  # found from 0.7 and from 0.85 on
    rule = OperatingPointRule(target_recall=0.97)
    tagger = ThresholdTagger()
    point = set_operating_point(tagger, notes, encoded, probabilities, rule)  # type: ignore[arg-type]

    def decode_at(threshold: float) -> dict[str, list[Span]]:
        return {
            note.note_id: [s for s, p in zip(enc, probs, strict=True) if p < threshold]
            for note, enc, probs in zip(notes, encoded, probabilities, strict=True)
        }

    expected = select_operating_point(notes, decode_at, rule)
    assert point.chosen == expected.chosen
    for row_, expected_row in zip(point.sweep, expected.sweep, strict=True):
        assert row_ == pytest.approx(expected_row, nan_ok=True)  # no prediction: NaN precision
    assert point.o_threshold == 0.85
    assert tagger.settings.o_threshold == 0.85
    assert tagger.settings.operating_point == point.record()
    # every threshold of the grid decoded each note with its own encoding and probabilities
    assert len(tagger.seen) == len(DEFAULT_GRID) * len(notes)
    assert {(tuple(p), e) for p, e in tagger.seen} == {
        (tuple(p), e) for p, e in zip(probabilities, encoded, strict=True)
    }
