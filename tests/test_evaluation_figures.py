"""Tests for the evaluation figures: labelled axes, n, intervals, n/a, colours."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from matplotlib.colors import to_hex

from synthdeid.evaluation.bootstrap import bootstrap_metrics
from synthdeid.evaluation.compare import plot_runs
from synthdeid.evaluation.report import plot_per_label_recall
from synthdeid.evaluation.study_table import plot_forest
from synthdeid.figures import PALETTE, SERIES_COLORS, pyplot
from synthdeid.notes import Note, Span
from synthdeid.scoring.metrics import count_table
from synthdeid.stats import resample_weights

TEXT = "Dr Quill saw Vera Moss on 3/14."
DOCTOR = Span(3, 8, "DOCTOR")
PATIENT = Span(13, 22, "PATIENT")
DATE = Span(26, 30, "DATE")


def holdout(n: int = 12) -> list[Note]:
    return [
        Note(f"n{k:02d}", f"p{k}", TEXT, (DOCTOR, PATIENT, DATE), "unit", "holdout")
        for k in range(n)
    ]


def results() -> dict[str, Any]:
    """Three runs on the same 12 notes: perfect; names as DOCTOR (wrong label); silent."""
    gold = holdout()
    runs = {
        "real_only": {n.note_id: list(n.spans) for n in gold},
        # every span found, the patient given the doctor's label: protected, mislabelled
        "mislabel": {n.note_id: [DOCTOR, Span(13, 22, "DOCTOR"), DATE] for n in gold},
        "silent": {},
    }
    weights = resample_weights(len(gold), 100, seed=1)
    return {
        name: bootstrap_metrics(count_table(gold, predicted), weights=weights)
        for name, predicted in runs.items()
    }


def texts(ax: Any) -> list[str]:
    return [t.get_text() for t in ax.texts]


def test_runs_figure_names_runs_labels_axes_and_shows_both_leakages(tmp_path: Path) -> None:
    fig = plot_runs(results(), "real_only", tmp_path / "runs.png")
    assert (tmp_path / "runs.png").stat().st_size > 5_000
    leakage, f1 = fig.axes[:2]
    for ax in (leakage, f1):
        ticks = [t.get_text() for t in ax.get_yticklabels()]
        assert ticks == ["real_only (reference)", "mislabel", "silent"]  # shared rows
        assert ax.get_xlabel()
    assert leakage.get_ylabel() == "run"
    assert "%" in leakage.get_xlabel() and "12 evaluation notes" in leakage.get_xlabel()
    assert "0 to 1" in f1.get_xlabel()
    assert "n = 12" in fig.get_suptitle() and "95%" in fig.get_suptitle()
    legend = [t.get_text() for t in leakage.get_legend().get_texts()]
    assert [entry.split(":")[0] for entry in legend] == ["label-agnostic", "label-consistent"]
    assert not any("_" in entry for entry in legend)  # human labels, not raw keys
    # the mislabelling run: protected (label-agnostic 0%), leaked (label-consistent 100%)
    points = {
        to_hex(line.get_color()): list(line.get_xdata())
        for line in leakage.lines
        if line.get_marker() in ("o", "s")
    }
    agnostic, consistent = points[to_hex(PALETTE["blue"])], points[to_hex(PALETTE["orange"])]
    assert agnostic == [0.0, 0.0, 100.0] and consistent == [0.0, 100.0, 100.0]
    # intervals are drawn (one bar collection per series), and the silent run's F1 is 0
    assert len([c for c in leakage.collections if c.get_segments()]) == 2
    f1_points = [list(line.get_xdata()) for line in f1.lines if line.get_marker() == "o"]
    assert len(f1_points) == 1 and f1_points[0] == pytest.approx([1.0, 2 / 3, 0.0])  # P = R = 2/3


def test_undefined_points_are_written_n_a_not_drawn_at_zero(tmp_path: Path) -> None:
    gold = [Note("e", "p", "Nothing here.", (), "unit", "holdout")]
    empty = {"none": bootstrap_metrics(count_table(gold, {}), n_resamples=20)}
    fig = plot_runs(empty, "none", tmp_path / "runs.png")
    leakage, f1 = fig.axes[:2]
    assert texts(f1) == ["n/a"]  # no gold and no predictions: F1 undefined
    assert not [line for line in f1.lines if len(line.get_xdata())]
    assert texts(leakage) == []  # leakage over one note is defined (0)


def test_per_label_recall_figure_has_labelled_axes_and_n(tmp_path: Path) -> None:
    gold = holdout(6)
    result = bootstrap_metrics(count_table(gold, {"n00": [DOCTOR]}), n_resamples=50)
    fig = plot_per_label_recall(result, tmp_path / "recall.png", "run: recall per label")
    (ax,) = fig.axes
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert ticks == ["DOCTOR\n(n=6)", "PATIENT\n(n=6)", "DATE\n(n=6)", "ALL\n(n=18)"]
    assert ax.get_xlabel() == "PHI label (n = gold spans)"
    assert "share of gold spans" in ax.get_ylabel()
    assert "6 notes" in ax.get_title()
    assert to_hex(ax.lines[0].get_color()) == to_hex(PALETTE["blue"])


def test_study_forest_marks_an_undefined_difference_n_a(tmp_path: Path) -> None:
    def row(arm: str, diff: float | None, reference: bool = False) -> dict[str, Any]:
        values: dict[str, Any] = {"arm": arm, "reference": reference, "seeds": 1}
        for metric in ("span_overlap_f1", "leakage_overlap_all"):
            values |= {
                f"{metric}_diff": diff,
                f"{metric}_diff_lo": None if diff is None else diff - 0.1,
                f"{metric}_diff_hi": None if diff is None else diff + 0.1,
                f"{metric}_significant": False,
            }
        return values

    rows = [row("ref", None, reference=True), row("a", 0.2), row("b", None)]
    fig = plot_forest(rows, "ref", 40, tmp_path / "study.png")
    f1_ax, leak_ax = fig.axes
    assert [t.get_text() for t in f1_ax.get_yticklabels()] == ["a (seeds=1)", "b (seeds=1)"]
    assert f1_ax.get_ylabel() == "arm"
    assert "share of notes" in leak_ax.get_xlabel() and "0-1 scale" in f1_ax.get_xlabel()
    assert texts(f1_ax) == ["n/a"] and texts(leak_ax) == ["n/a"]


def test_the_shared_palette_is_the_colour_cycle_and_pairs_no_red_with_green() -> None:
    plt = pyplot()
    cycle = [to_hex(c) for c in plt.rcParams["axes.prop_cycle"].by_key()["color"]]
    assert cycle == [to_hex(c) for c in SERIES_COLORS]
    # no pure red or pure green: the Okabe-Ito hues only
    rgb = np.array([[int(c[i : i + 2], 16) for i in (1, 3, 5)] for c in PALETTE.values()])
    reds = (rgb[:, 0] > 180) & (rgb[:, 1] < 90) & (rgb[:, 2] < 90)
    greens = (rgb[:, 1] > 150) & (rgb[:, 0] < 90) & (rgb[:, 2] < 90)
    assert not reds.any() and not greens.any()
