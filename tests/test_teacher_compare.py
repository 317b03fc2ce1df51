"""Tests for `synthdeid compare-teacher`: teacher vs. student per category, silver label noise.

Gold, teacher, student and silver labels are tiny hand-made notes tables;
``evaluate-ner`` turns them into the folders the stage reads, so every
expected figure below can be counted by hand.
"""

from __future__ import annotations

import csv
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from matplotlib.colors import to_hex

from synthdeid.cli import main
from synthdeid.evaluation import teacher_figures
from synthdeid.evaluation.teacher_comparison import distillation_fields
from synthdeid.notes import Note, Span, write_notes

DOCTORS = ("Quill", "Hart", "Ames", "Lowe", "Byrd", "Cole", "Dunn", "Frey")
PATIENTS = ("Vera Moss", "Ian Reed", "Ola Park", "Tom Vale", "Ada Kim", "Bo Lind", "Eli Nash")
DATES = ("3/14", "4/2", "5/30", "6/11", "7/4", "8/19", "9/23", "10/8")
N_HOLDOUT = 8
N_POOL = 5
RESAMPLES = "200"
DISTILLATION_FILES = {f"distillation.{ext}" for ext in ("csv", "md", "html", "json", "png")}
NOISE_FILES = {f"silver_noise.{ext}" for ext in ("csv", "md", "json", "png")}
TABLE_2_HEADER = (
    "| Category | teacher P [95% CI] | teacher R [95% CI] | student P [95% CI] | "
    "student R [95% CI] | Support | ΔP (p_bonf) | ΔR (p_bonf) |"
)


def find(text: str, surface: str, label: str) -> Span:
    start = text.index(surface)
    return Span(start, start + len(surface), label)


def make_note(k: int, split: str) -> Note:
    doctor, patient, date = DOCTORS[k], PATIENTS[k % len(PATIENTS)], DATES[k]
    text = f"Seen by Dr {doctor} on {date}; patient {patient} is stable."
    spans = (find(text, doctor, "DOCTOR"), find(text, date, "DATE"), find(text, patient, "PATIENT"))
    return Note(f"{split}-{k}", f"p{k}", text, spans, "unit", split)


def gold_notes() -> list[Note]:
    holdout = [make_note(k, "holdout") for k in range(N_HOLDOUT)]
    return holdout + [make_note(k, "train") for k in range(N_POOL)]


def relabel(notes: list[Note], edit: dict[str, list[Span]]) -> list[Note]:
    return [replace(n, spans=tuple(edit.get(n.note_id, list(n.spans)))) for n in notes]


def teacher_notes(holdout: list[Note]) -> list[Note]:
    """Every gold span, plus one false DOCTOR on "stable" in holdout-0."""
    first = holdout[0]
    return relabel(holdout, {first.note_id: [*first.spans, find(first.text, "stable", "DOCTOR")]})


def student_notes(holdout: list[Note]) -> list[Note]:
    """No DATE at all; PATIENT surname only in holdout-0, missed in holdout-1."""
    edit = {}
    for note in holdout:
        spans = [s for s in note.spans if s.label != "DATE"]
        if note.note_id == "holdout-0":
            spans = [s for s in spans if s.label != "PATIENT"] + [
                find(note.text, "Moss", "PATIENT")
            ]
        if note.note_id == "holdout-1":
            spans = [s for s in spans if s.label != "PATIENT"]
        edit[note.note_id] = spans
    return relabel(holdout, edit)


def silver_notes(pool: list[Note]) -> list[Note]:
    """Pool labels: DATE missed in train-0 and train-1, a false DOCTOR in train-2."""
    edit = {
        "train-0": [s for s in pool[0].spans if s.label != "DATE"],
        "train-1": [s for s in pool[1].spans if s.label != "DATE"],
        "train-2": [*pool[2].spans, find(pool[2].text, "stable", "DOCTOR")],
    }
    return relabel(pool, edit)


def evaluate(gold: Path, predictions: Path, out: Path, *extra: str) -> None:
    argv = ["evaluate-ner", "--gold", str(gold), "--predictions", str(predictions)]
    argv += ["--run", predictions.stem, "--out-dir", str(out), "--resamples", RESAMPLES, *extra]
    assert main(argv) == 0


@pytest.fixture
def folders(tmp_path: Path) -> dict[str, Path]:
    """evaluate-ner folders: teacher, student (holdout), silver (pool), student_all (both)."""
    gold = gold_notes()
    holdout = [n for n in gold if n.split == "holdout"]
    pool = [n for n in gold if n.split == "train"]
    tables = {name: tmp_path / f"{name}.parquet" for name in ("gold", "teacher", "student")}
    tables["silver"] = tmp_path / "silver.parquet"
    write_notes(gold, tables["gold"])
    write_notes(teacher_notes(holdout), tables["teacher"])
    write_notes(student_notes(holdout) + pool, tables["student"])
    write_notes(silver_notes(pool), tables["silver"])
    out = {name: tmp_path / f"eval_{name}" for name in ("teacher", "student", "silver")}
    evaluate(tables["gold"], tables["teacher"], out["teacher"])
    evaluate(tables["gold"], tables["student"], out["student"])
    evaluate(tables["gold"], tables["silver"], out["silver"], "--parts", "train")
    out["student_all"] = tmp_path / "eval_student_all"
    evaluate(tables["gold"], tables["student"], out["student_all"], "--parts", "holdout,train")
    return out


def compare(out: Path, *extra: str) -> int:
    return main(["compare-teacher", "--out-dir", str(out), "--resamples", RESAMPLES, *extra])


def read_rows(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_distillation_and_noise(folders: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "compare"
    code = compare(
        out,
        "--teacher",
        f"teacher={folders['teacher']}",
        "--student",
        f"student={folders['student']}",
        "--silver",
        f"teacher={folders['silver']}",
    )
    assert code == 0
    assert {p.name for p in out.iterdir()} == DISTILLATION_FILES | NOISE_FILES
    rows = {row["label"]: row for row in read_rows(out / "distillation.csv")}
    assert list(rows) == ["DOCTOR", "PATIENT", "DATE", "ALL"]  # labels with support, then ALL
    assert list(next(iter(rows.values()))) == distillation_fields()

    def value(label: str, column: str) -> float:
        return float(rows[label][column])

    assert [rows[label]["support"] for label in rows] == ["8", "8", "8", "24"]
    # a student that never predicts DATE: recall 0, the teacher 1; its precision is
    # undefined (an empty cell), and so are the difference and the test, never 0
    assert value("DATE", "teacher_recall") == 1.0
    assert value("DATE", "student_recall") == 0.0
    assert value("DATE", "student_recall_hi") == 0.0
    for column in ("student_precision", "precision_diff", "precision_p"):
        assert rows["DATE"][column] == ""
    assert value("DATE", "recall_diff") == -1.0
    assert value("DOCTOR", "teacher_precision") == pytest.approx(8 / 9)
    assert value("DOCTOR", "student_precision") == 1.0
    assert value("DOCTOR", "precision_diff") == pytest.approx(1 / 9)
    assert value("PATIENT", "student_recall") == pytest.approx(7 / 8)  # surname-only overlaps
    assert value("ALL", "teacher_precision") == pytest.approx(24 / 25)
    assert value("ALL", "student_recall") == pytest.approx(15 / 24)
    for row in rows.values():
        assert row["m"] == "3"
        for part in ("precision", "recall"):
            if row[f"{part}_diff"] == "":
                assert row[f"{part}_significant"] == "False"
                continue
            p, p_bonf = float(row[f"{part}_p"]), float(row[f"{part}_p_bonferroni"])
            assert p_bonf == pytest.approx(min(1.0, 3 * p))
            assert row[f"{part}_significant"] == str(p_bonf < 0.05)
            lo, hi = float(row[f"{part}_diff_lo"]), float(row[f"{part}_diff_hi"])
            assert lo <= float(row[f"{part}_diff"]) <= hi
    # every resample holds DATE notes, so DATE differs on all of them; DOCTOR only on some
    assert rows["DATE"]["recall_significant"] == "True"
    assert rows["DATE"]["precision_significant"] == "False"
    assert rows["DOCTOR"]["precision_significant"] == "False"
    assert rows["PATIENT"]["recall_significant"] == "False"

    markdown = (out / "distillation.md").read_text(encoding="utf-8")
    assert TABLE_2_HEADER in markdown
    assert "| DATE | 1.00 [1.00-1.00] | 1.00 [1.00-1.00] | n/a | 0.00 [0.00-0.00] |" in markdown
    assert "-1.00 (<0.0300)*" in markdown  # p 0: below 2 * m / n_resamples
    assert "+0.11 (" in markdown and "+0.11 (<0.0300)*" not in markdown
    assert "200 document-level resamples, seed 42" in markdown
    assert "overlap span matching" in markdown
    assert "m = 3" in markdown and "alpha = 0.05" in markdown
    assert "Significant after Bonferroni: DATE recall: student lower" in markdown
    assert "DATE recall: student lower (-1.00, p_bonf <0.0300)" in markdown
    assert "DATE precision" not in markdown
    assert "DOCTOR precision" not in markdown

    document = json.loads((out / "distillation.json").read_text(encoding="utf-8"))
    assert document["provenance"]["step"] == "compare-teacher"
    assert document["provenance"]["params"]["match"] == "overlap"
    assert document["metrics"] == {"precision": "overlap_precision", "recall": "overlap_recall"}
    assert document["m"] == 3
    assert document["tests"]["recall"]["m"] == 3
    assert document["student"]["per_label"]["DATE"]["overlap_recall"]["estimate"] == 0.0
    assert document["student"]["per_label"]["DATE"]["overlap_precision"]["estimate"] is None
    html = (out / "distillation.html").read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>") and "<table>" in html and "n/a" in html
    assert document["rows"][2]["label"] == "DATE"
    for name in ("distillation.png", "silver_noise.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert (out / name).stat().st_size > 1000


def test_exact_matching(folders: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "exact"
    teacher, student = f"gemini={folders['teacher']}", f"deberta={folders['student']}"
    assert compare(out, "--teacher", teacher, "--student", student, "--match", "exact") == 0
    assert {p.name for p in out.iterdir()} == DISTILLATION_FILES  # no --silver, no noise files
    rows = {row["label"]: row for row in read_rows(out / "distillation.csv")}
    # the surname-only PATIENT span is an overlap hit but an exact miss
    assert float(rows["PATIENT"]["student_recall"]) == pytest.approx(6 / 8)
    assert float(rows["PATIENT"]["student_precision"]) == pytest.approx(6 / 7)
    markdown = (out / "distillation.md").read_text(encoding="utf-8")
    assert "| Category | gemini P [95% CI] | gemini R [95% CI] | deberta P [95% CI]" in markdown
    assert "exact span matching" in markdown
    document = json.loads((out / "distillation.json").read_text(encoding="utf-8"))
    assert document["metrics"]["recall"] == "exact_recall"
    assert document["teacher"]["name"] == "gemini"


def test_dumbbell_colours(
    folders: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    figures: list[Any] = []
    monkeypatch.setattr(teacher_figures, "save_figure", lambda fig, path: figures.append(fig))
    teacher, student = f"teacher={folders['teacher']}", f"student={folders['student']}"
    assert compare(tmp_path / "fig", "--teacher", teacher, "--student", student) == 0
    (fig,) = figures
    precision_ax, recall_ax = fig.axes
    assert "teacher" in fig.get_suptitle() and "overlap" in fig.get_suptitle()
    ticks = [t.get_text() for t in precision_ax.get_yticklabels()]
    assert ticks == ["DOCTOR (n=8)", "PATIENT (n=8)", "DATE (n=8)", "ALL (n=24)"]
    assert precision_ax.get_ylabel() == "PHI label (n = gold spans)"
    assert precision_ax.get_xlabel() == "span overlap precision (0 to 1)"

    def connectors(ax: Any) -> list[Any]:
        return [line for line in ax.lines if line.get_linestyle() in ("-", "--")]

    def kinds(ax: Any) -> list[tuple[str, str]]:
        return [(to_hex(line.get_color()), line.get_linestyle()) for line in connectors(ax)]

    better = (to_hex(teacher_figures.BETTER_OR_EQUAL[0]), "-")
    worse = (to_hex(teacher_figures.WORSE[0]), "--")
    # one connector per row with both figures defined, in row order; the student never
    # predicts DATE, so its DATE precision is n/a (no connector, an n/a marker), not 0
    assert kinds(precision_ax) == [better, better, better]  # ALL: 15/15 >= 24/25
    assert [t.get_text() for t in precision_ax.texts] == ["student: n/a"]
    assert kinds(recall_ax) == [better, worse, worse, worse]
    assert list(connectors(recall_ax)[2].get_xdata()) == [1.0, 0.0]
    # every point carries its interval: one bar collection per system and panel
    for ax in (precision_ax, recall_ax):
        assert len([c for c in ax.collections if c.get_segments()]) == 2


def test_silver_noise_only(folders: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "noise"
    assert compare(out, "--silver", f"teacher={folders['silver']}") == 0
    assert {p.name for p in out.iterdir()} == NOISE_FILES
    rows = read_rows(out / "silver_noise.csv")
    values = {(r["scope"], r["label"], r["metric"]): r for r in rows}

    def estimate(scope: str, label: str, metric: str) -> float:
        return float(values[scope, label, metric]["estimate"])

    # 5 pool notes, 15 gold spans; silver misses 2 DATEs and adds 1 false DOCTOR
    assert estimate("label", "DATE", "overlap_recall") == pytest.approx(3 / 5)
    assert estimate("label", "DATE", "overlap_precision") == 1.0
    assert estimate("label", "DOCTOR", "overlap_precision") == pytest.approx(5 / 6)
    assert estimate("label", "DOCTOR", "overlap_recall") == 1.0
    assert estimate("label", "PATIENT", "overlap_f1") == 1.0
    assert estimate("label", "ALL", "overlap_precision") == pytest.approx(13 / 14)
    assert estimate("label", "ALL", "overlap_recall") == pytest.approx(13 / 15)
    assert estimate("headline", "ALL", "detection_recall") == pytest.approx(13 / 15)
    assert estimate("headline", "ALL", "detection_precision") == pytest.approx(13 / 14)
    assert estimate("headline", "ALL", "leakage_overlap_all") == pytest.approx(2 / 5)
    assert values["label", "DOCTOR", "overlap_precision"]["support"] == "5"
    assert values["label", "DOCTOR", "overlap_precision"]["predicted"] == "6"
    assert values["label", "DATE", "overlap_recall"]["predicted"] == "3"
    for row in rows:
        assert float(row["ci_lo"]) <= float(row["estimate"]) <= float(row["ci_hi"])
    markdown = (out / "silver_noise.md").read_text(encoding="utf-8")
    assert "| DATE | 1.00 [1.00-1.00] | 0.60 [" in markdown
    assert "| Support (gold spans) | Predicted (silver spans) |" in markdown
    assert "student learns false PHI" in markdown
    assert "missed PHI is ordinary text" in markdown
    document = json.loads((out / "silver_noise.json").read_text(encoding="utf-8"))
    assert document["per_label"]["DOCTOR"]["precision"]["estimate"] == pytest.approx(5 / 6)
    assert document["counts"]["n_notes"] == 5
    assert document["provenance"]["inputs"]["silver"]["digest"].startswith("sha256:")


def test_other_documents_fail(
    folders: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bad"
    teacher, student = f"teacher={folders['teacher']}", f"student={folders['student_all']}"
    assert compare(out, "--teacher", teacher, "--student", student) == 2
    error = capsys.readouterr().err
    assert str(folders["student_all"] / "per_document.parquet") in error
    assert "other documents" in error
    assert not out.exists()


def test_missing_per_document_fails(
    folders: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    out = tmp_path / "missing"
    teacher, student = f"teacher={folders['teacher']}", f"student={folders['student']}"
    assert (
        compare(out, "--teacher", teacher, "--student", student, "--silver", f"teacher={empty}")
        == 2
    )
    error = capsys.readouterr().err
    assert str(empty / "per_document.parquet") in error
    assert not out.exists()  # nothing is written before every input is read


def test_same_names_fail(folders: dict[str, Path], tmp_path: Path) -> None:
    teacher, student = f"x={folders['teacher']}", f"x={folders['student']}"
    assert compare(tmp_path / "same", "--teacher", teacher, "--student", student) == 2


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--teacher", "t=somewhere"), "needs --student NAME=DIR, --silver DIR or both"),
        (("--student", "s=somewhere"), "--student needs --teacher"),
    ],
)
def test_configuration_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: tuple[str, ...], message: str
) -> None:
    out = tmp_path / "config"
    assert compare(out, *extra) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()
