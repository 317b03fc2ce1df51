"""Tests for `synthdeid evaluate-ner` and `synthdeid compare-ner` on tiny made-up tables."""

from __future__ import annotations

import csv
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from synthdeid.cli import main
from synthdeid.evaluation.arms import ARM_METRICS, ArmMetric, ArmSummary, ArmTest
from synthdeid.evaluation.compare import arms_markdown
from synthdeid.evaluation.compare import tests_markdown as paired_tests_markdown
from synthdeid.evaluation.report import OUTPUTS, read_per_document
from synthdeid.evaluation.study_table import FOREST_METRICS, detectable_text, study_markdown
from synthdeid.notes import Note, Span, write_notes
from synthdeid.scoring.metrics import count_table

TEXT_A = "Seen by Dr Quill today."
TEXT_B = "Patient Vera Moss came in."
TEXT_C = "Visit 3/14, call 555-0100."
TEXT_D = "No identifiers in this note."
TEXT_T = "Train note for Dr Quill."


def span(text: str, surface: str, label: str) -> Span:
    start = text.index(surface)
    return Span(start, start + len(surface), label)


def gold_notes() -> list[Note]:
    return [
        Note("a", "p1", TEXT_A, (span(TEXT_A, "Quill", "DOCTOR"),), "unit", "holdout"),
        Note("b", "p2", TEXT_B, (span(TEXT_B, "Vera Moss", "PATIENT"),), "unit", "holdout"),
        Note(
            "c",
            "p3",
            TEXT_C,
            (span(TEXT_C, "3/14", "DATE"), span(TEXT_C, "555-0100", "PHONE")),
            "unit",
            "holdout",
        ),
        Note("d", "p4", TEXT_D, (), "unit", "holdout"),
        Note("t", "p5", TEXT_T, (span(TEXT_T, "Quill", "DOCTOR"),), "unit", "train"),
    ]


def predictions(gold: list[Note], spans: dict[str, tuple[Span, ...]]) -> list[Note]:
    return [replace(note, spans=spans.get(note.note_id, ())) for note in gold]


def weak_predictions() -> dict[str, tuple[Span, ...]]:
    return {
        "a": (span(TEXT_A, "Quill", "DOCTOR"),),
        "b": (span(TEXT_B, "Moss", "PATIENT"),),  # overlap hit, exact miss
        "c": (span(TEXT_C, "3/14", "DATE"),),  # the phone number leaks
    }


@pytest.fixture
def tables(tmp_path: Path) -> dict[str, Path]:
    gold = gold_notes()
    holdout = [n for n in gold if n.split == "holdout"]
    paths = {
        "gold": tmp_path / "gold.parquet",
        "weak": tmp_path / "weak.parquet",
        "perfect": tmp_path / "perfect.parquet",
    }
    write_notes(gold, paths["gold"])
    write_notes(predictions(holdout, weak_predictions()), paths["weak"])
    write_notes(predictions(gold, {n.note_id: n.spans for n in gold}), paths["perfect"])
    return paths


def evaluate(gold: Path, preds: Path, out: Path, *extra: str) -> int:
    return main(
        [
            "evaluate-ner",
            "--gold",
            str(gold),
            "--predictions",
            str(preds),
            "--run",
            preds.stem,
            "--out-dir",
            str(out),
            "--resamples",
            "200",
            *extra,
        ]
    )


def test_evaluate_end_to_end(tables: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "eval_weak"
    assert evaluate(tables["gold"], tables["weak"], out) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(OUTPUTS)
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["run"] == "weak"
    assert metrics["counts"] == {
        "n_notes": 4,  # the train note is not scored
        "n_notes_with_phi": 3,
        "n_gold_spans": 4,
        "n_predicted_spans": 3,
    }
    headline = metrics["headline"]
    assert headline["leakage_overlap_all"]["estimate"] == pytest.approx(1 / 4)
    assert headline["leakage_overlap_phi"]["estimate"] == pytest.approx(1 / 3)
    assert headline["span_overlap_recall"]["estimate"] == pytest.approx(3 / 4)
    assert headline["span_exact_recall"]["estimate"] == pytest.approx(2 / 4)
    assert headline["span_overlap_precision"]["estimate"] == 1.0
    for interval in headline.values():
        assert interval["ci_lo"] <= interval["estimate"] <= interval["ci_hi"]
    assert metrics["per_label"]["PHONE"]["overlap_recall"]["estimate"] == 0.0
    assert metrics["per_label"]["PHONE"]["support"] == 1
    assert "HOSPITAL" not in metrics["per_label"]  # no support, no predictions
    assert metrics["bootstrap"]["n_resamples"] == 200
    assert metrics["bootstrap"]["seed"] == 42
    assert set(metrics["definitions"]) >= set(headline)
    assert metrics["provenance"]["params"]["parts"] == ["holdout"]
    markdown = (out / "metrics.md").read_text()
    assert markdown.index("leakage_overlap_all") < markdown.index("span_overlap_f1")
    with (out / "metrics.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert rows[0]["metric"] == "leakage_overlap_all"
    assert {r["label"] for r in rows if r["scope"] == "label"} == {
        "DOCTOR",
        "PATIENT",
        "DATE",
        "PHONE",
        "ALL",
    }
    per_document = pq.read_table(out / "per_document.parquet")
    assert per_document.schema.field("note_id").type == pa.string()
    assert all(f.type == pa.int32() for f in per_document.schema if f.name != "note_id")
    assert per_document.column("note_id").to_pylist() == ["a", "b", "c", "d"]
    assert per_document.column("ALL.leak_overlap").to_pylist() == [0, 0, 1, 0]
    holdout = [n for n in gold_notes() if n.split == "holdout"]
    expected = count_table(holdout, weak_predictions())
    stored = read_per_document(out / "per_document.parquet")
    assert stored.note_ids == expected.note_ids
    assert (stored.values == expected.values).all()
    assert (out / "per_label_recall.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_evaluate_several_parts(tables: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "eval_perfect"
    assert evaluate(tables["gold"], tables["perfect"], out, "--parts", "holdout,train") == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["counts"]["n_notes"] == 5
    assert metrics["headline"]["span_exact_f1"]["estimate"] == 1.0
    assert metrics["headline"]["leakage_overlap_all"] == {
        "estimate": 0.0,
        "ci_lo": 0.0,
        "ci_hi": 0.0,
    }


def test_missing_prediction_note_fails_without_outputs(
    tables: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "eval_missing"
    # the weak predictions have no row for the train note "t"
    code = evaluate(tables["gold"], tables["weak"], out, "--parts", "holdout", "--parts", "train")
    assert code == 2
    assert not out.exists() or not any(out.iterdir())
    error = capsys.readouterr().err
    assert "weak.parquet" in error
    assert "first missing note ids: ['t']" in error


def test_unknown_part_fails(tables: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "eval_none"
    assert evaluate(tables["gold"], tables["weak"], out, "--parts", "validation") == 2
    assert not out.exists()


def test_predicted_text_must_match(tables: dict[str, Path], tmp_path: Path) -> None:
    holdout = [n for n in gold_notes() if n.split == "holdout"]
    changed = [replace(n, text=n.text.upper()) if n.note_id == "d" else n for n in holdout]
    path = tmp_path / "changed.parquet"
    write_notes(changed, path)
    assert evaluate(tables["gold"], path, tmp_path / "eval_changed") == 2


def compare(out: Path, *runs: str, reference: str | None = None, arms: tuple[str, ...] = ()) -> int:
    argv = ["compare-ner", "--out-dir", str(out), "--resamples", "200"]
    for run in runs:
        argv += ["--run", run]
    for arm in arms:
        argv += ["--arm", arm]
    if reference:
        argv += ["--reference", reference]
    return main(argv)


def test_compare_runs(tables: dict[str, Path], tmp_path: Path) -> None:
    evaluate(tables["gold"], tables["weak"], tmp_path / "weak")
    evaluate(tables["gold"], tables["perfect"], tmp_path / "perfect")
    out = tmp_path / "compare"
    code = compare(
        out, f"weak={tmp_path / 'weak'}", f"perfect={tmp_path / 'perfect'}", reference="weak"
    )
    assert code == 0
    names = {"runs.csv", "runs.md", "paired_tests.csv", "paired_tests.md", "comparison.json"}
    names |= {"arms.csv", "arms.md", "arm_tests.csv", "runs.html"}
    names |= {"cross_corpus.csv", "cross_corpus.md", "cross_corpus.png"}
    assert names | {"runs.png"} == {p.name for p in out.iterdir()}
    with (out / "runs.csv").open() as handle:
        runs = {row["run"]: row for row in csv.DictReader(handle)}
    assert runs["perfect"]["rank"] == "1"
    # the Markdown table lists the runs in rank order (weak was given first)
    rows_md = [line.split(" | ") for line in (out / "runs.md").read_text().splitlines()]
    ranked = [(cells[0], cells[1]) for cells in rows_md if cells[0] in ("| 1", "| 2")]
    assert ranked == [("| 1", "perfect"), ("| 2", "weak (reference)")]
    assert float(runs["weak"]["leakage_overlap_all"]) == pytest.approx(0.25)
    with (out / "paired_tests.csv").open() as handle:
        tests = {row["label"]: row for row in csv.DictReader(handle)}
    assert set(tests) == {"DOCTOR", "PATIENT", "DATE", "PHONE", "ALL"}
    assert float(tests["PHONE"]["diff"]) == 1.0
    assert float(tests["DOCTOR"]["p"]) == 1.0
    assert tests["ALL"]["m"] == "4"
    comparison = json.loads((out / "comparison.json").read_text())
    assert comparison["reference"] == "weak"
    assert comparison["tests"]["perfect"]["m"] == 4


def test_compare_aggregates_arms_over_training_seeds(
    tables: dict[str, Path], tmp_path: Path
) -> None:
    evaluate(tables["gold"], tables["weak"], tmp_path / "weak")
    evaluate(tables["gold"], tables["perfect"], tmp_path / "perfect")
    out = tmp_path / "arms"
    runs = [
        f"base-seed1={tmp_path / 'weak'}",
        f"base-seed2={tmp_path / 'perfect'}",
        f"other-seed1={tmp_path / 'perfect'}",
        f"other-seed2={tmp_path / 'perfect'}",
    ]
    arms = ("base-seed1=base", "base-seed2=base", "other-seed1=other", "other-seed2=other")
    assert compare(out, *runs, reference="base-seed1", arms=arms) == 0
    with (out / "arms.csv").open() as handle:
        rows = {row["arm"]: row for row in csv.DictReader(handle)}
    assert set(rows) == {"base", "other"}
    weak_f1 = json.loads((tmp_path / "weak" / "metrics.json").read_text())["headline"][
        "span_overlap_f1"
    ]["estimate"]
    base = rows["base"]
    assert base["seeds"] == "2" and base["reference"] == "True"
    assert float(base["span_overlap_f1_mean"]) == pytest.approx((weak_f1 + 1.0) / 2)
    assert float(base["span_overlap_f1_sd"]) == pytest.approx(abs(1.0 - weak_f1) / 2**0.5)
    # two identical seeds: no spread, so the t-interval collapses onto the mean
    assert float(rows["other"]["span_overlap_f1_sd"]) == 0.0
    with (out / "arm_tests.csv").open() as handle:
        tests = {row["metric"]: row for row in csv.DictReader(handle)}
    assert tests["span_overlap_f1"]["arm"] == "other"
    assert tests["span_overlap_f1"]["seeds_paired"] == "True"
    assert float(tests["span_overlap_f1"]["diff"]) == pytest.approx(1.0 - (weak_f1 + 1.0) / 2)
    comparison = json.loads((out / "comparison.json").read_text())
    assert comparison["reference_arm"] == "base"
    assert comparison["arms"]["other"]["runs"] == ["other-seed1", "other-seed2"]
    assert "SD n/a" not in (out / "arms.md").read_text()


def test_compare_single_run(tables: dict[str, Path], tmp_path: Path) -> None:
    evaluate(tables["gold"], tables["weak"], tmp_path / "weak")
    out = tmp_path / "single"
    assert compare(out, f"weak={tmp_path / 'weak'}") == 0
    with (out / "paired_tests.csv").open() as handle:
        assert list(csv.DictReader(handle)) == []
    assert (out / "runs.png").is_file()
    assert "single run" in (out / "paired_tests.md").read_text()
    # one seed: its spread is not defined, and says so
    assert "SD n/a" in (out / "arms.md").read_text()


def test_compare_refuses_runs_on_other_documents(tables: dict[str, Path], tmp_path: Path) -> None:
    evaluate(tables["gold"], tables["weak"], tmp_path / "weak")
    evaluate(tables["gold"], tables["perfect"], tmp_path / "both", "--parts", "holdout,train")
    out = tmp_path / "bad"
    assert compare(out, f"weak={tmp_path / 'weak'}", f"both={tmp_path / 'both'}") == 2
    assert not out.exists()


def test_compare_refuses_an_arm_for_an_unknown_run(tables: dict[str, Path], tmp_path: Path) -> None:
    evaluate(tables["gold"], tables["weak"], tmp_path / "weak")
    out = tmp_path / "bad_arm"
    assert compare(out, f"weak={tmp_path / 'weak'}", arms=("nope=arm",)) == 2
    assert not out.exists()


def mixture_summary(
    path: Path, notes: int, synthetic: int, pools: dict[str, str] | None = None
) -> Path:
    """A build-mixture summary.json as the stage writes it (sizes under "summary"); ``pools``:
    pool name -> the digest its provenance records for that pool's file."""
    summary = {"n_train_total": notes, "realized_synthetic_fraction": synthetic / notes}
    inputs = {
        f"pool:{name}": {"path": f"{name}.parquet", "digest": d}
        for name, d in (pools or {}).items()
    }
    path.write_text(json.dumps({"provenance": {"inputs": inputs}, "summary": summary}))
    return path


def compared_arms(tables: dict[str, Path], tmp_path: Path) -> Path:
    """compare-ner's folder for arm "real" (the weak run twice) and arm "dp" (the perfect run)."""
    evaluate(tables["gold"], tables["weak"], tmp_path / "weak")
    evaluate(tables["gold"], tables["perfect"], tmp_path / "perfect")
    compared = tmp_path / "compare"
    runs = [
        f"real-seed1={tmp_path / 'weak'}",
        f"real-seed2={tmp_path / 'weak'}",
        f"dp-seed1={tmp_path / 'perfect'}",
    ]
    arms = ("real-seed1=real", "real-seed2=real", "dp-seed1=dp")
    assert compare(compared, *runs, reference="real-seed1", arms=arms) == 0
    return compared


def test_tabulate_study_writes_one_row_per_arm_with_sizes_epsilon_and_deltas(
    tables: dict[str, Path], tmp_path: Path
) -> None:
    compared = compared_arms(tables, tmp_path)
    privacy = tmp_path / "privacy.json"
    privacy.write_text(json.dumps({"epsilon": 3.99, "delta": 1e-4}))
    out = tmp_path / "study"
    argv = ["tabulate-study", "--comparison", str(compared / "comparison.json")]
    argv += ["--mixture", f"real-seed1={mixture_summary(tmp_path / 'm1.json', 100, 0)}"]
    argv += ["--mixture", f"real-seed2={mixture_summary(tmp_path / 'm2.json', 100, 0)}"]
    argv += ["--mixture", f"dp-seed1={mixture_summary(tmp_path / 'm3.json', 120, 20)}"]
    argv += ["--privacy", f"dp-seed1={privacy}", "--title", "Unit study", "--out-dir", str(out)]
    assert main(argv) == 0
    with (out / "study.csv").open() as handle:
        rows = {row["arm"]: row for row in csv.DictReader(handle)}
    assert rows["real"]["reference"] == "True" and rows["real"]["seeds"] == "2"
    assert float(rows["dp"]["train_notes"]) == 120
    assert float(rows["dp"]["synthetic_share"]) == pytest.approx(20 / 120)
    assert float(rows["dp"]["epsilon"]) == 3.99
    # undefined figures are empty, never 0: no epsilon without DP, no SD of one seed
    assert rows["real"]["epsilon"] == "" and rows["dp"]["span_overlap_f1_sd"] == ""
    weak_f1 = json.loads((tmp_path / "weak" / "metrics.json").read_text())["headline"][
        "span_overlap_f1"
    ]["estimate"]
    assert float(rows["dp"]["span_overlap_f1_diff"]) == pytest.approx(1.0 - weak_f1)
    table = (out / "study.md").read_text()
    assert table.startswith("# Unit study")
    assert "real (reference)" in table and "16.7%" in table and "3.99" in table
    assert "n/a" in table  # the reference's epsilon
    assert (out / "study.png").stat().st_size > 5_000
    # each arm test carries its standard error and minimum detectable effects into the table
    (f1_test,) = (
        t
        for t in json.loads((compared / "comparison.json").read_text())["arm_tests"]
        if t["metric"] == "span_overlap_f1"
    )
    assert f1_test["se"] > 0 and f1_test["mde"] == pytest.approx(2.801585 * f1_test["se"])
    dp = rows["dp"]
    assert float(dp["span_overlap_f1_mde_bonferroni"]) == pytest.approx(f1_test["mde_bonferroni"])
    assert float(dp["span_overlap_f1_se"]) == pytest.approx(f1_test["se"])
    significant = dp["span_overlap_f1_significant"] == "True"
    assert (
        dp["reading"]
        == dp["span_overlap_f1_reading"]
        == ("helps" if significant else "cannot tell")
    )
    # fewer notes leak with the perfect run: never "hurts" on a lower-is-better metric
    assert dp["leakage_overlap_all_reading"] in ("helps", "cannot tell")
    assert rows["real"]["reading"] == "" and rows["real"]["span_overlap_f1_mde"] == ""
    assert "| MDE span-overlap F1 | reading (span-overlap F1) |" in table
    mde = f"{f1_test['mde_bonferroni']:.3f}"
    cell = "helps" if significant else f"cannot tell (MDE {mde})"
    assert f"| {mde} | {cell} |" in table
    assert (
        "Smallest detectable difference in span-overlap F1 (95%, power 0.8, Bonferroni over "
        f"1 arm, paired over seeds and documents): {mde}; "
    ) in table
    assert "MDE span-overlap F1" in (out / "study.html").read_text()


def test_tabulate_study_names_arms_whose_seeds_drew_different_pool_versions(
    tables: dict[str, Path], tmp_path: Path
) -> None:
    compared = compared_arms(tables, tmp_path)
    argv = ["tabulate-study", "--comparison", str(compared / "comparison.json")]

    def study(*mixtures: tuple[str, dict[str, str]]) -> str:
        out = tmp_path / f"study{len(list(tmp_path.glob('study*')))}"
        args = list(argv)
        for k, (run, pools) in enumerate(mixtures):
            summary = mixture_summary(tmp_path / f"{out.name}-{k}.json", 100, 25, pools)
            args += ["--mixture", f"{run}={summary}"]
        assert main([*args, "--out-dir", str(out)]) == 0
        return (out / "study.md").read_text()

    line = "Arms whose seeds drew from more than one version of a pool"
    one = {"template_pii": "sha256:aa", "template_no_pii": "sha256:bb"}
    other = {"template_pii": "sha256:cc", "template_no_pii": "sha256:bb"}
    # the two seeds of arm "real" drew template_pii from two files: named, with that pool only
    table = study(("real-seed1", one), ("real-seed2", other), ("dp-seed1", one))
    assert line in table and "difference): real (template_pii)." in table
    # one version per pool, and runs that record no digests: no such line
    assert line not in study(("real-seed1", one), ("real-seed2", one), ("dp-seed1", other))
    assert line not in study(("real-seed1", one), ("real-seed2", {}), ("dp-seed1", other))


def test_tabulate_study_of_a_comparison_without_the_mde(
    tables: dict[str, Path], tmp_path: Path
) -> None:
    """A comparison written before arm tests carried se and mde tabulates, its MDE n/a."""
    comparison = json.loads((compared_arms(tables, tmp_path) / "comparison.json").read_text())
    for test in comparison["arm_tests"]:
        for key in ("se", "mde", "mde_bonferroni"):
            del test[key]
    old = tmp_path / "old.json"
    old.write_text(json.dumps(comparison))
    out = tmp_path / "study"
    argv = ["tabulate-study", "--comparison", str(old), "--mde-target", "0.05"]
    assert main([*argv, "--out-dir", str(out)]) == 0
    with (out / "study.csv").open() as handle:
        rows = {row["arm"]: row for row in csv.DictReader(handle)}
    for metric in ARM_METRICS:
        assert rows["dp"][f"{metric}_se"] == rows["dp"][f"{metric}_mde_bonferroni"] == ""
    assert rows["dp"]["reading"] in ("helps", "cannot tell")  # from p, which it has
    table = (out / "study.md").read_text()
    dp_line = next(line for line in table.splitlines() if line.startswith("| dp |"))
    assert dp_line.endswith(f"| n/a | {rows['dp']['reading']} |")
    assert (
        "paired over seeds and documents): n/a (the comparison records no standard error)." in table
    )
    assert main([*argv, "--mde-target", "0", "--out-dir", str(tmp_path / "bad")]) == 2


def test_tabulate_study_refuses_a_summary_of_an_unknown_run(
    tables: dict[str, Path], tmp_path: Path
) -> None:
    evaluate(tables["gold"], tables["weak"], tmp_path / "weak")
    compared = tmp_path / "compare"
    assert compare(compared, f"weak={tmp_path / 'weak'}") == 0
    out = tmp_path / "study"
    argv = ["tabulate-study", "--comparison", str(compared / "comparison.json")]
    argv += ["--mixture", f"other={mixture_summary(tmp_path / 'm.json', 10, 0)}"]
    assert main([*argv, "--out-dir", str(out)]) == 2
    assert not out.exists()
    # a file that is not a build-mixture summary is named, not a traceback
    flat = tmp_path / "flat.json"
    flat.write_text(json.dumps({"n_train_total": 10}))
    argv = ["tabulate-study", "--comparison", str(compared / "comparison.json")]
    assert main([*argv, "--mixture", f"weak={flat}", "--out-dir", str(out)]) == 2
    assert not out.exists()


def test_a_silver_pool_with_no_note_is_reported_as_not_scored(
    tables: dict[str, Path], tmp_path: Path
) -> None:
    """A teacher that kept none of its answers: the steps finish and every figure is n/a."""
    empty = tmp_path / "empty_silver.parquet"
    write_notes([], empty)
    out = tmp_path / "pool"
    assert evaluate(tables["gold"], empty, out, "--skip-unpredicted") == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert "none of the 4 gold notes" in metrics["not_scored"]
    assert metrics["counts"]["n_notes"] == 0
    assert set(metrics["headline"].values()) == {None}
    assert "n/a" in (out / "metrics.md").read_text()
    assert read_per_document(out / "per_document.parquet").note_ids == ()
    assert (out / "per_label_recall.png").stat().st_size > 1_000
    noise = tmp_path / "noise"
    argv = ["compare-teacher", "--silver", f"llm={out}", "--out-dir", str(noise)]
    assert main([*argv, "--resamples", "200"]) == 0
    assert "Not measured" in (noise / "silver_noise.md").read_text()
    assert json.loads((noise / "silver_noise.json").read_text())["not_scored"]
    # without --skip-unpredicted a missing row is still an error
    assert evaluate(tables["gold"], empty, tmp_path / "strict") == 2


def test_a_run_that_predicts_nothing_has_undefined_precision_not_zero(
    tables: dict[str, Path], tmp_path: Path
) -> None:
    holdout = [n for n in gold_notes() if n.split == "holdout"]
    silent = tmp_path / "silent.parquet"
    write_notes(predictions(holdout, {}), silent)
    out = tmp_path / "eval_silent"
    assert evaluate(tables["gold"], silent, out) == 0
    headline = json.loads((out / "metrics.json").read_text())["headline"]
    # 0 of 3 notes with PHI protected: leakage 3/4, recall 0; precision has no predictions
    assert headline["leakage_overlap_all"]["estimate"] == pytest.approx(3 / 4)
    assert headline["span_overlap_recall"]["estimate"] == 0.0
    for name in ("span_overlap_precision", "detection_precision", "token_precision"):
        assert headline[name] == {"estimate": None, "ci_lo": None, "ci_hi": None}
    assert headline["span_overlap_f1"]["estimate"] == 0.0  # one side undefined, the other 0
    with (out / "metrics.csv").open() as handle:
        rows = {(r["scope"], r["label"], r["metric"]): r for r in csv.DictReader(handle)}
    assert rows["headline", "ALL", "span_overlap_precision"]["estimate"] == ""
    markdown = (out / "metrics.md").read_text()
    assert "| span_overlap_precision | n/a |" in markdown
    page = (out / "metrics.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "<table>" in page and "n/a" in page


def test_comparison_tables_are_one_html_page(tables: dict[str, Path], tmp_path: Path) -> None:
    evaluate(tables["gold"], tables["weak"], tmp_path / "weak")
    evaluate(tables["gold"], tables["perfect"], tmp_path / "perfect")
    out = tmp_path / "compare_html"
    assert compare(out, f"weak={tmp_path / 'weak'}", f"perfect={tmp_path / 'perfect'}") == 0
    page = (out / "runs.html").read_text()
    for heading in ("NER runs", "Paired bootstrap tests against weak", "Arms over training seeds"):
        assert heading in page
    assert "label-agnostic document leakage" in page
    assert "label-consistent document leakage" in page
    assert "leakage_overlap_all" in page  # the key is named beside its definition


# -- the table text, pinned: every cell as compare-ner and tabulate-study write it ------


def test_paired_tests_and_arms_tables_are_written_exactly() -> None:
    nan = float("nan")
    tested = [
        {
            "run": "b",
            "label": "DATE",
            "support": 4,
            "run_value": 0.75,
            "reference_value": 0.5,
            "diff": 0.25,
            "diff_lo": -0.125,
            "diff_hi": 0.5,
            "p": 0.04,
            "p_bonferroni": 0.08,
            "m": 2,
            "significant": False,
        },
        {
            "run": "b",
            "label": "NAME",
            "support": 5,
            "run_value": 1.0,
            "reference_value": 0.25,
            "diff": 0.75,
            "diff_lo": 0.5,
            "diff_hi": 1.0,
            "p": 0.0,
            "p_bonferroni": 0.0,
            "m": 2,
            "significant": True,
        },
        {
            "run": "b",
            "label": "ALL",
            "support": 9,
            "run_value": None,
            "reference_value": 0.5,
            "diff": None,
            "diff_lo": None,
            "diff_hi": None,
            "p": None,
            "p_bonferroni": None,
            "m": 2,
            "significant": False,
        },
    ]
    # a p of 0 is below the resamples' resolution, 2 / 2000 (times m = 2 adjusted)
    assert paired_tests_markdown(tested, "overlap_recall", "a", 2000).splitlines()[-4:] == [
        "|---|---|---|---|---|---|---|---|---|",
        "| b | DATE | 4 | 0.750 | 0.500 | +0.250 [-0.125, +0.500] | 0.0400 | 0.0800 | no |",
        "| b | NAME | 5 | 1.000 | 0.250 | +0.750 [+0.500, +1.000] | <0.0010 | <0.0020 | yes |",
        "| b | ALL | 9 | n/a | 0.500 | n/a | n/a | n/a | no |",
    ]
    spread = ArmMetric(0.5, 0.1, 0.25, 0.75, 0.4, 0.6)
    one_seed = ArmMetric(0.5, None, None, None, 0.4, 0.6)
    undefined = ArmMetric(nan, None, None, None, nan, nan)
    no_interval = ArmMetric(0.5, None, None, None, nan, nan)
    summaries = {
        "a": ArmSummary("a", ("a-seed1", "a-seed2"), dict.fromkeys(ARM_METRICS, spread)),
        "b": ArmSummary(
            "b",
            ("b",),
            dict(
                zip(
                    ARM_METRICS,
                    (one_seed, undefined, no_interval, one_seed, one_seed, one_seed, one_seed),
                    strict=True,
                )
            ),
        ),
    }
    test = ArmTest(
        "b", "a", "span_overlap_f1", 1, 2, False, 0.125, nan, nan, 0.5, 1.0, 1, False, nan, nan, nan
    )
    assert arms_markdown(summaries, "a", [test], 2000).splitlines()[-10:] == [
        "| arm | seeds | span_overlap_f1 | span_overlap_recall | span_overlap_precision "
        "| leakage_overlap_all | detection_recall | detection_precision "
        "| leakage_detection_all |",
        "|---|---|---|---|---|---|---|---|---|",
        "| a (reference) | 2 | "
        + " | ".join(["0.500 +- 0.100 [0.250, 0.750]; CI [0.400, 0.600]"] * 7)
        + " |",
        "| b | 1 | 0.500 (SD n/a); CI [0.400, 0.600] | n/a; CI n/a | 0.500 (SD n/a); CI n/a "
        "| " + " | ".join(["0.500 (SD n/a); CI [0.400, 0.600]"] * 4) + " |",
        "",
        "## Against the reference arm",
        "",
        "| arm | metric | seeds | diff [95% CI] | p | p_bonf | sig. |",
        "|---|---|---|---|---|---|---|",
        "| b | span_overlap_f1 | 1 vs 2 | +0.125 [n/a] | 0.5000 | 1.0000 | no |",
    ]


def test_study_cells_are_written_exactly() -> None:
    def row(arm: str, reference: bool, **figures: Any) -> dict[str, Any]:
        out: dict[str, Any] = {"arm": arm, "reference": reference, "seeds": 2}
        out |= {"train_notes": 120.0, "synthetic_share": 1 / 6, "epsilon": None}
        out |= {"train_wall_min": figures.get("wall"), "train_cpu_min": figures.get("cpu")}
        keys = ("mean", "sd", "ci_lo", "ci_hi", "diff", "diff_lo", "diff_hi", "p_bonferroni")
        keys += ("m", "mde_bonferroni", "reading")
        for metric in ARM_METRICS:
            out |= {f"{metric}_{key}": figures.get(key) for key in keys}
            out[f"{metric}_significant"] = figures.get("significant", False)
        return out

    defined = {"mean": 0.5, "sd": 0.1, "ci_lo": 0.4, "ci_hi": 0.6, "diff": 0.25}
    defined |= {"diff_lo": -0.125, "diff_hi": 0.5, "p_bonferroni": 0.0, "m": 1}
    defined |= {"significant": True}
    rows = [
        row("real", True, mean=0.5, sd=None, ci_lo=None, ci_hi=None, wall=20.25, cpu=38.0),
        row("dp", False, **defined, mde_bonferroni=0.041, reading="helps", wall=19.0),
        row("none", False),
        row(
            "small",
            False,
            **defined | {"p_bonferroni": 0.5, "significant": False},
            mde_bonferroni=0.018,
            reading="cannot tell",
        ),
    ]
    comparison = {
        "reference_arm": "real",
        "runs": {"r": {"counts": {"n_notes": 30}}},
        "n_resamples": 400,
    }
    lines = study_markdown(rows, comparison, "Study").splitlines()
    n_metrics, n_deltas = len(ARM_METRICS), len(FOREST_METRICS)
    assert lines[-8].endswith("| MDE span-overlap F1 | reading (span-overlap F1) |")
    assert lines[-7] == "|" + "---|" * (6 + n_metrics + n_deltas + 2)
    assert lines[-6] == (
        "| real (reference) | 2 | 120 | 16.7% | n/a | 20.2 (38.0) | "
        + " | ".join(["0.500 [n/a]"] * n_metrics + ["(reference)"] * n_deltas)
        + " | n/a | n/a |"
    )
    assert lines[-5] == (
        "| dp | 2 | 120 | 16.7% | n/a | 19.0 (n/a) | "
        + " | ".join(
            ["0.500 +- 0.100 [0.400, 0.600]"] * n_metrics
            + ["+0.250 [-0.125, +0.500] p<0.0050 *"] * n_deltas  # 2 / 400 resamples
        )
        + " | 0.041 | helps |"
    )
    assert lines[-4] == (
        "| none | 2 | 120 | 16.7% | n/a | n/a | "
        + " | ".join(["n/a"] * (n_metrics + n_deltas))
        + " | n/a | n/a |"
    )
    assert lines[-3].endswith(
        "+0.250 [-0.125, +0.500] p=0.5000 | 0.018 | cannot tell (MDE 0.018) |"
    )
    assert lines[-2] == ""
    assert lines[-1] == (
        "Smallest detectable difference in span-overlap F1 (95%, power 0.8, Bonferroni over "
        "3 arms, paired over seeds and documents): 0.018 to 0.041 across arms; arms within "
        "the 0.02 target: 1 of 3."
    )
    assert detectable_text(rows, 0.05).endswith("; arms within the 0.05 target: 2 of 3.")
    reference_only = [row for row in rows if row["reference"]]
    assert detectable_text(reference_only).startswith("No arm is tested against the reference")
    assert detectable_text(rows[:3], 0.05, alpha=0.1) == (
        "Smallest detectable difference in span-overlap F1 (90%, power 0.8, Bonferroni over "
        "2 arms, paired over seeds and documents): 0.041; arms within the 0.05 target: 1 of 2."
    )
