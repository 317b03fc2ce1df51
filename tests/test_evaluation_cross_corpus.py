"""Runs x corpora tables (synthdeid.evaluation.cross_corpus) on hand-countable notes."""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path

import pytest

from synthdeid.cli import main
from synthdeid.errors import ConfigError, InputError
from synthdeid.evaluation.cross_corpus import (
    CROSS_METRICS,
    PLOTTED,
    CrossCell,
    cross_markdown,
    cross_rows,
    parse_cells,
    plot_cross,
    score_cells,
)
from synthdeid.figures import share_limits
from synthdeid.notes import UNSPLIT, Note, Span, write_notes
from synthdeid.stats import Interval


def note(note_id: str, text: str, surfaces: dict[str, str]) -> Note:
    spans = tuple(
        Span(text.index(s), text.index(s) + len(s), label) for s, label in surfaces.items()
    )
    return Note(note_id, f"p-{note_id}", text, spans, "unit", UNSPLIT)


def corpus_a() -> list[Note]:
    return [
        note("a1", "Seen by Dr Quill.", {"Quill": "DOCTOR"}),
        note("a2", "Vera Moss on 3/14.", {"Vera Moss": "PATIENT", "3/14": "DATE"}),
        note("a3", "No identifiers here.", {}),
    ]


def corpus_b() -> list[Note]:
    return [
        note("b1", "Call 555-0100 today.", {"555-0100": "PHONE"}),
        note("b2", "Dr Ames saw her.", {"Ames": "DOCTOR"}),
    ]


def evaluate(
    tmp: Path, name: str, gold: list[Note], predicted: dict[str, tuple[Span, ...]]
) -> Path:
    gold_path, pred_path, out = (
        tmp / f"{name}-gold.parquet",
        tmp / f"{name}-pred.parquet",
        tmp / name,
    )
    write_notes(gold, gold_path)
    write_notes([replace(n, spans=predicted.get(n.note_id, ())) for n in gold], pred_path)
    argv = ["evaluate-ner", "--gold", str(gold_path), "--predictions", str(pred_path)]
    argv += ["--parts", UNSPLIT, "--run", name, "--out-dir", str(out), "--resamples", "200"]
    assert main(argv) == 0
    return out


@pytest.fixture
def cells(tmp_path: Path) -> list[tuple[str, str, Path]]:
    a, b = corpus_a(), corpus_b()
    perfect_a = {n.note_id: n.spans for n in a}
    # "weak" finds Quill as a PATIENT (label-agnostic hit, label-consistent leak) and misses a2
    weak_a = {"a1": (Span(11, 16, "PATIENT"),)}
    perfect_b = {n.note_id: n.spans for n in b}
    return [
        ("strong", "alpha", evaluate(tmp_path, "strong-alpha", a, perfect_a)),
        ("weak", "alpha", evaluate(tmp_path, "weak-alpha", a, weak_a)),
        ("strong", "beta", evaluate(tmp_path, "strong-beta", b, perfect_b)),
        ("weak", "beta", evaluate(tmp_path, "weak-beta", b, {})),
    ]


def test_cells_are_scored_per_corpus_against_a_hand_count(cells: list) -> None:
    scored = {(c.run, c.corpus): c for c in score_cells(cells, n_resamples=200, seed=1)}
    assert scored[("strong", "alpha")].n_notes == 3 and scored[("weak", "beta")].n_notes == 2
    weak = scored[("weak", "alpha")].metrics
    # 3 gold spans; one detected (Quill, wrong label) -> recall 1/3
    assert weak["detection_recall"].estimate == pytest.approx(1 / 3)
    # notes with a leak among all 3: label-agnostic a2 only; label-consistent a1 and a2
    assert weak["leakage_detection_all"].estimate == pytest.approx(1 / 3)
    assert weak["leakage_overlap_all"].estimate == pytest.approx(2 / 3)
    assert scored[("strong", "beta")].metrics["detection_recall"].estimate == 1.0
    # nothing predicted on beta: precision is undefined, never 0
    assert not scored[("weak", "beta")].metrics["detection_precision"].defined
    for cell in scored.values():
        for interval in cell.metrics.values():
            if interval.defined:
                assert interval.lo <= interval.estimate <= interval.hi


def test_table_and_rows_have_every_cell_and_na(cells: list, tmp_path: Path) -> None:
    scored = score_cells(cells, n_resamples=200, seed=1)
    rows = cross_rows(scored)
    assert len(rows) == 4 * len(CROSS_METRICS)
    undefined = [r for r in rows if r["run"] == "weak" and r["corpus"] == "beta"]
    assert {r["metric"]: r["estimate"] for r in undefined}["detection_precision"] is None
    markdown = cross_markdown(scored, {"alpha": "alpha holdout"})
    assert "alpha holdout (3 notes)" in markdown and "beta (2 notes)" in markdown
    assert "### detection recall" in markdown and "n/a" in markdown
    fig = plot_cross(scored, tmp_path / "cross.png")
    assert (tmp_path / "cross.png").stat().st_size > 0
    assert fig.axes[0].get_ylabel() == "run"
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["strong", "weak"]
    assert all(ax.get_xlabel().endswith("axis fits the values)") for ax in fig.axes[:3])
    for ax, metric in zip(fig.axes[:3], PLOTTED, strict=True):  # each panel holds its values
        lo, hi = ax.get_xlim()
        drawn = [c.metrics[metric] for c in scored]
        values = [v for i in drawn for v in (i.estimate, i.lo, i.hi) if v == v]
        assert lo <= min(values) and max(values) <= hi


def test_share_axes_fit_values_near_one_end() -> None:
    near_one = [Interval(0.985, 0.97, 1.0), Interval(0.99, 0.98, 1.0)]
    lo, hi = share_limits(near_one)
    assert 0.9 < lo < 0.97 and 1.0 <= hi <= 1.02
    near_zero = [Interval(0.004, 0.0, 0.018)]
    lo, hi = share_limits(near_zero)
    assert lo == 0.0 and 0.018 < hi < 0.1
    nan = float("nan")
    assert share_limits([Interval(nan, nan, nan)]) == (0.0, 1.02)


def test_cells_are_written_exactly_and_an_unscored_cell_is_blank() -> None:
    nan = float("nan")
    scored = Interval(0.5, 0.25, 0.75)
    cells = [
        CrossCell("strong", "alpha", 3, dict.fromkeys(CROSS_METRICS, scored)),
        CrossCell("weak", "alpha", 3, dict.fromkeys(CROSS_METRICS, Interval(nan, nan, nan))),
        CrossCell("strong", "beta", 2, dict.fromkeys(CROSS_METRICS, Interval(1.0, nan, nan))),
    ]
    lines = cross_markdown(cells, {"alpha": "alpha holdout"}).splitlines()
    assert lines[6:11] == [
        "### detection recall",
        "",
        "| run | alpha holdout (3 notes) | beta (2 notes) |",
        "|---|---|---|",
        "| strong | 0.500 [0.250, 0.750] | 1.000 [n/a] |",
    ]
    assert lines[11] == "| weak | n/a | |"  # an empty cell is "| |"


def test_runs_of_one_corpus_must_score_the_same_documents(tmp_path: Path) -> None:
    a = corpus_a()
    full = evaluate(tmp_path, "full", a, {})
    part = evaluate(tmp_path, "part", a[:2], {})
    with pytest.raises(InputError, match="other documents of corpus 'alpha'"):
        score_cells([("x", "alpha", full), ("y", "alpha", part)], n_resamples=50, seed=1)


def test_a_cell_named_twice_is_refused() -> None:
    with pytest.raises(ConfigError, match="twice"):
        parse_cells([["alpha", "x", "d1"], ["alpha", "x", "d2"]])


def test_compare_ner_writes_the_runs_by_corpus_table(cells: list, tmp_path: Path) -> None:
    own = {run: folder for run, corpus, folder in cells if corpus == "alpha"}
    out = tmp_path / "compare"
    argv = ["compare-ner", "--run", f"strong={own['strong']}", "--run", f"weak={own['weak']}"]
    argv += ["--reference", "strong", "--resamples", "200", "--out-dir", str(out)]
    argv += ["--corpus-name", "alpha"]
    argv += [
        "--cross",
        "beta",
        "strong",
        str(cells[2][2]),
        "--cross",
        "beta",
        "weak",
        str(cells[3][2]),
    ]
    assert main(argv) == 0
    with (out / "cross_corpus.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert {(r["run"], r["corpus"]) for r in rows} == {
        ("strong", "alpha"),
        ("weak", "alpha"),
        ("strong", "beta"),
        ("weak", "beta"),
    }
    assert "alpha holdout" in (out / "cross_corpus.md").read_text()
    assert (out / "cross_corpus.png").stat().st_size > 0


def test_compare_ner_without_other_corpora_still_tabulates_the_holdout(
    cells: list, tmp_path: Path
) -> None:
    own = {run: folder for run, corpus, folder in cells if corpus == "alpha"}
    out = tmp_path / "compare"
    argv = ["compare-ner", "--run", f"strong={own['strong']}", "--run", f"weak={own['weak']}"]
    argv += ["--resamples", "200", "--out-dir", str(out)]
    assert main(argv) == 0
    with (out / "cross_corpus.csv").open() as handle:
        corpora = {r["corpus"] for r in csv.DictReader(handle)}
    assert corpora == {"holdout"}
