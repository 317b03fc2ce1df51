"""End-to-end: lint, dry run, a real run on the demo config, reruns by branch."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from bench_helpers import bench_module
from synthdeid.artifacts import read_parquet_with_provenance
from synthdeid.evaluation.archive import read_archives
from synthdeid.mask import PLACEHOLDER_RE, REMOVED_SCHEMA
from synthdeid.notes import NOTES_SCHEMA, read_notes
from synthdeid.workflow.dry_run import job_table
from workflow_helpers import PLUMBING, copy_workflow, snakemake

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def workdir(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the workflow in which the demo default (one epoch per model: PLUMBING) has
    been run once."""
    target = copy_workflow(repo, tmp_path_factory.mktemp("workflow"), PLUMBING)
    snakemake(target)
    return target


# every job of the demo run: rule -> count (two NER runs)
DEMO_JOBS = {
    "ingest_corpus": 1,
    "split_notes": 1,
    "mask_seeds": 1,
    "plot_corpus_overview": 1,
    "replace_surrogates": 1,
    "generate_templates": 1,
    "fill_templates": 1,
    "diagnose_synthetic": 1,
    "plant_canaries": 1,
    "train_dp_lm": 2,
    "sample_dp_lm": 2,
    "audit_dp_lm": 1,
    "prepare_tabular": 1,
    "fit_dp_tabular": 4,
    "fit_dp_gan_tabular": 2,
    "evaluate_tabular": 1,
    "subsample_tabular": 1,
    "verbalize_tabular": 1,
    "check_faithfulness": 1,
    "extract_tabular": 1,
    "label_teacher": 4,
    "combine_teachers": 2,
    "evaluate_teacher": 4,
    "measure_silver_noise": 3,
    "compare_teacher": 1,
    "build_mixture": 3,
    "train_ner": 3,
    "ensemble_ner": 1,
    "predict_ner": 4,
    "evaluate_ner": 4,
    "report_errors": 1,
    # every run also on the second demo corpus (evaluation.corpora)
    "ingest_eval_corpus": 1,
    "predict_ner_cross": 4,
    "evaluate_ner_cross": 4,
    "compare_ner": 1,
    "plan_runs": 1,
    "tabulate_study": 1,
    "ledger_privacy": 1,
    "list_provenance": 1,
    "all": 1,
}

# what every rerun plans besides its branch: the provenance table of the final artifacts,
# and the default target
ALWAYS = {"list_provenance": 1, "all": 1}

# what a change to surrogate_aug (runs[1]) reruns besides its own branch: the demo
# ensemble it is a member of (ensemble_ner, then its predictions and evaluations on the
# holdout and on the second demo corpus)
MEMBER_RERUN = {
    "ensemble_ner": 1,
    "predict_ner": 2,
    "evaluate_ner": 2,
    "predict_ner_cross": 2,
    "evaluate_ner_cross": 2,
}


TABULAR_JOBS = (
    "prepare_tabular",
    "fit_dp_tabular",
    "fit_dp_gan_tabular",
    "evaluate_tabular",
    "subsample_tabular",
    "verbalize_tabular",
    "check_faithfulness",
    "extract_tabular",
)


def test_lint_is_clean(repo: Path) -> None:
    result = snakemake(repo, "--lint")
    assert "Congratulations, your workflow is in a good condition!" in result.stdout + result.stderr


def test_dry_run_plans_the_implemented_rules(repo: Path, tmp_path: Path) -> None:
    result = snakemake(copy_workflow(repo, tmp_path), "-n")
    assert job_table(result.stdout) == DEMO_JOBS


def test_demo_run_writes_artifacts_with_their_schemas(workdir: Path) -> None:
    results = workdir / "results"
    for rule in ("ingest_corpus", "split_notes"):
        table, provenance = read_parquet_with_provenance(results / rule / "demo" / "notes.parquet")
        assert table.schema.remove_metadata() == NOTES_SCHEMA
        assert provenance["code_version"]
    split = read_notes(results / "split_notes" / "demo" / "notes.parquet")
    assert {n.split for n in split} == {"seed", "train", "holdout"}
    masked_path = results / "mask_seeds" / "demo" / "masked.parquet"
    assert pq.read_schema(masked_path).remove_metadata() == NOTES_SCHEMA
    masked = read_notes(masked_path)
    assert {n.split for n in masked} == {"seed"}
    assert all(PLACEHOLDER_RE.fullmatch(s.surface(n.text)) for n in masked for s in n.spans)
    removed, provenance = read_parquet_with_provenance(
        results / "mask_seeds" / "demo" / "local" / "removed_values.parquet"
    )
    assert removed.schema.remove_metadata() == REMOVED_SCHEMA.remove_metadata()
    assert removed.schema.metadata[b"synthdeid.local_only"] == b"true"
    assert provenance["params"]["label_view"] == "canonical"
    overview = (results / "plot_corpus_overview" / "demo" / "overview.png").read_bytes()
    assert overview.startswith(b"\x89PNG")
    # the released surrogate corpus carries keyed ids, none of the corpus's own
    surrogates = read_notes(results / "replace_surrogates" / "demo" / "notes.parquet")
    assert all(n.note_id.startswith("note-") for n in surrogates)
    assert all(n.patient_id.startswith("patient-") for n in surrogates)
    assert not {n.note_id for n in surrogates} & {n.note_id for n in split}
    # the report's table of what made each final artifact
    made = json.loads((results / "list_provenance" / "demo" / "provenance.json").read_text())
    recorded = [a for a in made["artifacts"] if a["step"]]
    assert len(recorded) >= 10 and all(a["code_digest"].startswith("sha256:") for a in recorded)
    summary = json.loads((results / "mask_seeds" / "demo" / "summary.json").read_text())
    assert summary["summary"]["notes_with_gold_surfaces_left"] == 0
    assert (workdir / "logs" / "mask_seeds" / "demo.log").read_text().count("masked") >= 1


def test_demo_run_trains_predicts_and_evaluates_every_run(workdir: Path) -> None:
    results = workdir / "results"
    holdout = [n for n in read_notes(results / "split_notes" / "demo" / "notes.parquet")]
    holdout_ids = {n.note_id for n in holdout if n.split == "holdout"}
    for run in ("real_only", "surrogate_aug"):
        model = results / "train_ner" / "demo" / run / "model"
        settings = json.loads((model / "synthdeid_ner.json").read_text())
        assert 0 < settings["o_threshold"] < 1
        assert (model / "README.md").read_text().startswith("---")
        assert (model / "model.safetensors").is_file()
        predictions = read_notes(results / "predict_ner" / "demo" / run / "predictions.parquet")
        assert {n.note_id for n in predictions} == holdout_ids
        redacted = read_notes(results / "predict_ner" / "demo" / run / "deidentified.parquet")
        for note in redacted:
            assert all(s.surface(note.text) == f"[{s.label}]" for s in note.spans)
        metrics = json.loads((results / "evaluate_ner" / "demo" / run / "metrics.json").read_text())
        leakage = metrics["headline"]["leakage_overlap_all"]
        assert leakage["ci_lo"] <= leakage["estimate"] <= leakage["ci_hi"]
    mixture = json.loads(
        (results / "build_mixture" / "demo" / "surrogate_aug" / "summary.json").read_text()
    )
    assert mixture["summary"]["n_synthetic"] > 0
    ensemble = json.loads(
        (
            results
            / "ensemble_ner"
            / "demo"
            / "real_surrogate_ensemble"
            / "model"
            / "synthdeid_ensemble.json"
        ).read_text()
    )
    assert [m["name"] for m in ensemble["members"]] == ["real_only", "surrogate_aug"]
    assert ensemble["members"][0]["path"] == "../../../../train_ner/demo/real_only/model"
    assert ensemble["validation_notes"]["kept"] > 0
    predictions = read_notes(
        results / "predict_ner" / "demo" / "real_surrogate_ensemble" / "predictions.parquet"
    )
    assert {n.note_id for n in predictions} == holdout_ids
    assert (results / "compare_ner" / "demo" / "runs.png").read_bytes().startswith(b"\x89PNG")
    pool, provenance = read_parquet_with_provenance(
        results / "fill_templates" / "demo" / "pii.parquet"
    )
    assert pool.schema.remove_metadata() == NOTES_SCHEMA and pool.num_rows > 10
    assert provenance["params"]["source"] == "synthetic:template:none"
    for figure in ("lengths.png", "labels.png"):
        assert (
            (results / "diagnose_synthetic" / "demo" / figure).read_bytes().startswith(b"\x89PNG")
        )


def test_demo_run_scores_every_run_on_the_second_corpus(workdir: Path) -> None:
    results = workdir / "results"
    external = read_notes(results / "ingest_eval_corpus" / "demo_external" / "notes.parquet")
    assert len(external) == 60 and {n.split for n in external} == {"unsplit"}
    runs = ("real_only", "surrogate_aug", "real_surrogate_ensemble", "silver_student")
    for run in runs:
        folder = results / "predict_ner_cross" / "demo" / run / "demo_external"
        predicted = read_notes(folder / "predictions.parquet")
        assert {n.note_id for n in predicted} == {n.note_id for n in external}
    with (results / "compare_ner" / "demo" / "cross_corpus.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert {(r["run"], r["corpus"]) for r in rows} == {
        (run, corpus) for run in runs for corpus in ("demo", "demo_external")
    }
    assert {r["n_notes"] for r in rows if r["corpus"] == "demo_external"} == {"60"}
    assert (results / "compare_ner" / "demo" / "cross_corpus.png").stat().st_size > 0
    assert "demo holdout" in (results / "compare_ner" / "demo" / "runs.html").read_text()


def test_demo_run_lists_the_reference_runs_errors_locally(workdir: Path) -> None:
    folder = workdir / "results" / "report_errors" / "demo" / "real_only"
    table, provenance = read_parquet_with_provenance(folder / "local" / "errors.parquet")
    assert table.schema.metadata[b"synthdeid.local_only"] == b"true"
    assert provenance["params"]["parts"] == ["seed"]
    split = {n.note_id: n for n in read_notes(workdir / "results/split_notes/demo/notes.parquet")}
    assert all(
        split[i].split != "holdout" for i in table.column("note_id").to_pylist() if i in split
    )
    summary = json.loads((folder / "summary.json").read_text())["summary"]
    assert summary["notes_by_part"].keys() <= {"seed", "validation"}
    assert summary["errors"]["missed"]["count"] == sum(
        kind == "missed" for kind in table.column("kind").to_pylist()
    )


def test_demo_run_trains_samples_and_audits_the_dp_language_model(workdir: Path) -> None:
    results = workdir / "results"
    dp = json.loads((results / "train_dp_lm" / "demo" / "dp" / "privacy.json").read_text())
    assert dp["dp"] is True and dp["epsilon"] <= 4.01 and dp["target_epsilon"] == 4.0
    non_dp = json.loads((results / "train_dp_lm" / "demo" / "non_dp" / "privacy.json").read_text())
    assert non_dp["dp"] is False and non_dp["steps"] == dp["steps"]
    samples = pq.read_table(results / "sample_dp_lm" / "demo" / "dp" / "samples.parquet")
    assert samples.num_rows > 0
    audit = json.loads((results / "audit_dp_lm" / "demo" / "audit.json").read_text())
    assert set(audit["models"]) == {"dp", "non_dp"}
    assert audit["models"]["dp"]["outliers"]["n_canaries"] == 4  # config.yaml's outliers.count
    for figure in ("max_rouge_l.png", "canaries.png", "outliers.png"):
        assert (results / "audit_dp_lm" / "demo" / figure).read_bytes().startswith(b"\x89PNG")


def test_demo_run_compares_every_synthesizer_and_verbalizes_a_subsample(workdir: Path) -> None:
    results = workdir / "results"
    # smartnoise's GAN synthesizers run in their own environment, in their own rule
    gan = {"pate_ctgan", "dp_ctgan"}
    for name in ("mst", "aim", *sorted(gan)):
        rule = "fit_dp_gan_tabular" if name in gan else "fit_dp_tabular"
        fit = results / rule / "breast_cancer" / name / "eps3"
        privacy = json.loads((fit / "privacy.json").read_text())
        assert privacy["epsilon_total"] == 3.0 and privacy["sums_to_total"] is True
    for name in ("gaussian_copula", "ctgan"):
        fit = results / "fit_dp_tabular" / "breast_cancer" / name / "non_dp"
        assert json.loads((fit / "privacy.json").read_text())["dp"] is False
    comparison = json.loads(
        (results / "evaluate_tabular" / "breast_cancer" / "comparison.json").read_text()
    )["results"]
    assert len(comparison) == 7  # the real holdout and six synthesizers
    assert all(r["metrics"]["overall"]["n"] == 10 for r in comparison[1:])
    figure = results / "evaluate_tabular" / "breast_cancer" / "comparison.png"
    assert figure.read_bytes().startswith(b"\x89PNG")
    pool = read_notes(results / "verbalize_tabular" / "breast_cancer" / "pii.parquet")
    assert len(pool) == 40 and {n.source for n in pool} == {"synthetic:tabular:grammar"}
    scores = json.loads(
        (results / "check_faithfulness" / "breast_cancer" / "faithfulness.json").read_text()
    )
    assert scores["reports"] == 40 and scores["generators"] == ["grammar"]
    extraction = json.loads(
        (results / "extract_tabular" / "breast_cancer" / "extraction.json").read_text()
    )
    assert extraction["training_reports"] == 40 and extraction["test_reports"] == 284
    assert set(extraction["extractors"]) == {"fine-tuned"}  # no LLM in the demo


def test_demo_run_labels_with_teachers_and_distils_a_student(workdir: Path) -> None:
    results = workdir / "results"
    seed_ids = {
        n.note_id
        for n in read_notes(results / "split_notes" / "demo" / "notes.parquet")
        if n.split == "seed"
    }
    pool = read_notes(
        results / "combine_teachers" / "demo" / "ensemble" / "pool" / "silver.parquet"
    )
    assert {n.note_id for n in pool} == seed_ids
    assert {n.source for n in pool} == {"silver:ensemble"}
    assert sum(len(n.spans) for n in pool) > 0
    summary = json.loads(
        (results / "label_teacher" / "demo" / "model" / "pool" / "summary.json").read_text()
    )["summary"]
    assert summary["notes_by_status"] == {"ok": len(seed_ids)}
    # the student learned from the silver pool only
    mixture = json.loads(
        (results / "build_mixture" / "demo" / "silver_student" / "summary.json").read_text()
    )["summary"]
    assert mixture["n_real"] == 0 and mixture["n_synthetic"] == len(seed_ids)
    compare = results / "compare_teacher" / "demo"
    table = (compare / "ensemble" / "distillation.md").read_text()
    assert "| Category | ensemble P [95% CI] | ensemble R [95% CI] | silver_student P" in table
    noise_dir = results / "measure_silver_noise" / "demo"
    for teacher in ("model", "rules", "ensemble"):
        noise = json.loads((noise_dir / teacher / "silver_noise.json").read_text())
        assert noise["name"] == teacher
        assert (noise_dir / teacher / "silver_noise.png").read_bytes().startswith(b"\x89PNG")
    assert (compare / "ensemble" / "distillation.png").read_bytes().startswith(b"\x89PNG")


def test_nothing_to_do_after_a_run(workdir: Path) -> None:
    result = snakemake(workdir, "-n")
    assert "Nothing to be done" in result.stdout + result.stderr


@pytest.mark.skipif(
    os.environ.get("SYNTHDEID_REPORT_TESTS") != "1",
    reason="the report test is opt-in: set SYNTHDEID_REPORT_TESTS=1 (it needs chromium and "
    "chromedriver, which tests/report/install-chromium.sh apt-installs as root)",
)
def test_the_report_renders_every_item_in_chromium(workdir: Path) -> None:
    install = subprocess.run(
        [Path(__file__).parent / "report" / "install-chromium.sh"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if install.returncode != 0:
        pytest.fail(f"install-chromium.sh failed:\n{install.stdout[-3000:]}\n{install.stderr}")
    from report.report_browser import check_report

    snakemake(workdir, "--report", "report.html")
    check = check_report(workdir / "report.html", workdir / "report-screenshots")
    assert check.items, "the report lists no results"
    assert not check.problems, "\n".join(check.problems)
    assert check.landing.stat().st_size > 10_000
    assert all(item.screenshot and item.screenshot.stat().st_size for item in check.items)


def dry_run_with(workdir: Path, name: str, keys: tuple, value: object):
    """``snakemake -n`` with the demo config changed at one place (``keys`` path)."""
    config = yaml.safe_load((workdir / "config" / "config.yaml").read_text())
    target = config
    for key in keys[:-1]:
        target = target[key]
    target[keys[-1]] = value
    path = workdir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return snakemake(workdir, "-n", "--configfile", str(path))


def changed_config(workdir: Path, section: str, key: str, value: object) -> str:
    """Write the demo config with one value changed; return the file's path."""
    config = yaml.safe_load((workdir / "config" / "config.yaml").read_text())
    config[section][key] = value
    path = workdir / f"changed-{section}-{key}.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def test_changing_a_masking_parameter_reruns_masking_and_synthesis(workdir: Path) -> None:
    result = snakemake(
        workdir, "-n", "--configfile", changed_config(workdir, "mask", "label_view", "coarse")
    )
    assert job_table(result.stdout) == {
        "mask_seeds": 1,
        "generate_templates": 1,
        "fill_templates": 1,
        "diagnose_synthetic": 1,
        "train_dp_lm": 2,
        "sample_dp_lm": 2,
        "audit_dp_lm": 1,
        "ledger_privacy": 1,
        **ALWAYS,
    }
    assert "Params have changed since last execution" in result.stdout


def test_changing_one_run_reruns_only_that_branch(workdir: Path) -> None:
    result = dry_run_with(
        workdir,
        "changed-run",
        (
            "ner",
            "runs",
            1,
            "training",
        ),
        {"learning_rate": 3.0e-4},
    )
    # the run and the ensemble it is a member of; nothing else
    assert job_table(result.stdout) == {
        "train_ner": 1,
        "compare_ner": 1,
        "plan_runs": 1,
        "tabulate_study": 1,
        **ALWAYS,
        **MEMBER_RERUN,
    }
    assert "results/train_ner/demo/surrogate_aug/model" in result.stdout
    # real_only is read by the ensemble, not retrained
    assert "output: results/train_ner/demo/real_only/model" not in result.stdout
    assert "output: results/ensemble_ner/demo/real_surrogate_ensemble/model" in result.stdout


def test_changing_the_dedup_threshold_reruns_only_the_pool_branch(workdir: Path) -> None:
    result = dry_run_with(
        workdir,
        "changed-pools",
        (
            "synth",
            "template",
            "pools",
            "near_threshold",
        ),
        0.9,
    )
    assert job_table(result.stdout) == {"fill_templates": 1, "diagnose_synthetic": 1, **ALWAYS}


def test_changing_the_split_seed_reruns_split_and_mask(workdir: Path) -> None:
    result = snakemake(workdir, "-n", "--configfile", changed_config(workdir, "split", "seed", 99))
    # everything downstream of the split: every job but ingest, the canaries and the
    # tabular branch (its table is not the notes corpus)
    independent = {"ingest_corpus", "ingest_eval_corpus", "plant_canaries", *TABULAR_JOBS}
    assert job_table(result.stdout) == {
        rule: n for rule, n in DEMO_JOBS.items() if rule not in independent
    }


def test_changing_the_privacy_target_reruns_only_the_dp_branch(workdir: Path) -> None:
    result = dry_run_with(
        workdir,
        "changed-privacy",
        (
            "synth",
            "dplm",
            "privacy",
        ),
        {"target_epsilon": 8.0},
    )
    assert job_table(result.stdout) == {
        "train_dp_lm": 1,
        "sample_dp_lm": 1,
        "audit_dp_lm": 1,
        "ledger_privacy": 1,
        **ALWAYS,
    }
    assert "output: results/train_dp_lm/demo/dp/model" in result.stdout
    assert "output: results/train_dp_lm/demo/non_dp/model" not in result.stdout


def test_the_pretrained_language_model_switch_reruns_only_the_dp_lm_branch(
    workdir: Path, repo: Path
) -> None:
    overlay = repo / "config" / "dplm-smollm2.yaml"
    result = snakemake(workdir, "-n", "-p", "--configfile", "config/config.yaml", str(overlay))
    assert job_table(result.stdout) == {
        "train_dp_lm": 2,
        "sample_dp_lm": 2,
        "audit_dp_lm": 1,
        "ledger_privacy": 1,
        **ALWAYS,
    }
    assert "bundled:smollm2" in result.stdout  # the settings the two trainings get
    assert '"lora":{"alpha":32' in result.stdout  # params are compact JSON, keys sorted


def test_changing_one_synthesizer_reruns_only_its_fit_and_the_comparison(workdir: Path) -> None:
    result = dry_run_with(
        workdir,
        "changed-ctgan",
        (
            "synth",
            "tabular",
            "options",
            "ctgan",
        ),
        {"epochs": 3},
    )
    assert job_table(result.stdout) == {"fit_dp_tabular": 1, "evaluate_tabular": 1, **ALWAYS}
    assert "results/fit_dp_tabular/breast_cancer/ctgan/non_dp/samples.parquet" in result.stdout


def test_the_tabular_reports_pool_joins_a_mixture(workdir: Path) -> None:
    result = dry_run_with(
        workdir,
        "changed-tabular-pool",
        (
            "ner",
            "runs",
            1,
            "pools",
        ),
        ["tabular_reports"],
    )
    assert job_table(result.stdout) == {
        "build_mixture": 1,
        "train_ner": 1,
        "compare_ner": 1,
        "plan_runs": 1,
        "tabulate_study": 1,
        **ALWAYS,
        **MEMBER_RERUN,
    }
    assert "results/verbalize_tabular/breast_cancer/pii.parquet" in result.stdout


def test_changing_one_teacher_reruns_only_its_branch(workdir: Path) -> None:
    """The rules teacher relabels; the model teacher and the other runs are left alone."""
    result = dry_run_with(
        workdir, "changed-teacher", ("teacher", "teachers", 1, "detectors"), ["DATE"]
    )
    assert job_table(result.stdout) == {
        "label_teacher": 2,
        "combine_teachers": 2,
        "evaluate_teacher": 3,
        "measure_silver_noise": 2,
        "build_mixture": 1,
        "train_ner": 1,
        "predict_ner": 1,
        "evaluate_ner": 1,
        "predict_ner_cross": 1,
        "evaluate_ner_cross": 1,
        "compare_ner": 1,
        "plan_runs": 1,
        "tabulate_study": 1,
        "compare_teacher": 1,
        **ALWAYS,
    }
    assert "results/train_ner/demo/silver_student/model" in result.stdout
    assert "teacher=model," not in result.stdout  # the model teacher is not relabelled


def test_a_teacher_that_needs_its_own_labels_is_refused(workdir: Path) -> None:
    config = yaml.safe_load((workdir / "config" / "config.yaml").read_text())
    config["teacher"]["teachers"][0]["model"] = "silver_student"  # trained on its own labels
    path = workdir / "cyclic-teacher.yaml"
    path.write_text(yaml.safe_dump(config))
    result = snakemake(workdir, "-n", "--configfile", str(path), check=False)
    assert result.returncode != 0
    assert "depends on its own silver labels" in result.stdout + result.stderr


def test_an_ensemble_operating_point_reruns_only_the_ensemble(workdir: Path) -> None:
    result = dry_run_with(
        workdir, "ensemble-point", ("ner", "runs", 2, "operating_point"), {"mode": "leakage"}
    )
    assert job_table(result.stdout) == {
        "ensemble_ner": 1,
        "predict_ner": 1,
        "evaluate_ner": 1,
        "predict_ner_cross": 1,
        "evaluate_ner_cross": 1,
        "compare_ner": 1,
        "tabulate_study": 1,
        **ALWAYS,
    }
    assert "results/predict_ner/demo/real_surrogate_ensemble/predictions.parquet" in result.stdout


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"members": ["real_only", "bogus"]}, "member 'bogus' is not a trained run"),
        ({"members": ["real_only", "silver_student"], "pools": ["surrogates"]}, "pools, tapt"),
        ({"members": ["real_only"]}, "is too short"),
    ],
)
def test_bad_ensemble_runs_are_refused(workdir: Path, change: dict, message: str) -> None:
    config = yaml.safe_load((workdir / "config" / "config.yaml").read_text())
    config["ner"]["runs"][2].update(change)
    path = workdir / "bad-ensemble.yaml"
    path.write_text(yaml.safe_dump(config))
    result = snakemake(workdir, "-n", "--configfile", str(path), check=False)
    assert result.returncode != 0
    assert message in result.stdout + result.stderr


def test_tapt_is_one_switch_on_a_run(workdir: Path) -> None:
    result = dry_run_with(
        workdir,
        "changed-tapt",
        (
            "ner",
            "runs",
            1,
            "tapt",
        ),
        "dplm",
    )
    assert job_table(result.stdout) == {
        "tapt_encoder": 1,
        "train_ner": 1,
        "compare_ner": 1,
        "plan_runs": 1,
        "tabulate_study": 1,
        **ALWAYS,
        **MEMBER_RERUN,
    }
    assert "results/tapt_encoder/demo/dplm/model" in result.stdout


def test_tapt_on_own_notes_is_one_switch_on_a_run(workdir: Path) -> None:
    result = dry_run_with(workdir, "own-tapt", ("ner", "runs", 1, "tapt"), "own")
    assert job_table(result.stdout) == {
        "tapt_encoder_own": 1,
        "train_ner": 1,
        "compare_ner": 1,
        "plan_runs": 1,
        "tabulate_study": 1,
        **ALWAYS,
        **MEMBER_RERUN,
    }
    # the run's own mixture feeds the adaptation; the mixture itself is not rebuilt
    assert "results/build_mixture/demo/surrogate_aug/train.parquet" in result.stdout
    assert "results/tapt_encoder_own/demo/surrogate_aug/model" in result.stdout


def sweep_config(workdir: Path, name: str, fractions: list[float], seeds: list[int]) -> str:
    """The demo config plus one run swept over ``fractions`` and ``seeds``; its path."""
    config = yaml.safe_load((workdir / "config" / "config.yaml").read_text())
    config["ner"]["runs"].append(
        {
            "name": "sweep",
            "pools": ["surrogates"],
            "mixture": {"regime": "augmentation", "seed": 1},
            "sweep": {"synthetic_fraction": fractions},
            "training_seeds": seeds,
        }
    )
    path = workdir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def mixture_targets(fractions: list[str], seeds: list[int]) -> list[str]:
    return [
        f"results/build_mixture/demo/sweep-syn{f}-seed{s}/summary.json"
        for f in fractions
        for s in seeds
    ]


def test_a_swept_run_expands_into_named_runs_and_new_values_add_only_theirs(
    workdir: Path,
) -> None:
    first = sweep_config(workdir, "sweep-1", [0.25, 0.5], [1, 2])
    planned = snakemake(workdir, "-n", "--configfile", first)
    # four new runs, each a whole branch; no existing run is touched
    assert job_table(planned.stdout) == {
        "build_mixture": 4,
        "train_ner": 4,
        "predict_ner": 4,
        "evaluate_ner": 4,
        "predict_ner_cross": 4,
        "evaluate_ner_cross": 4,
        "compare_ner": 1,
        "plan_runs": 1,
        "tabulate_study": 1,
        **ALWAYS,
    }
    commands = snakemake(workdir, "-n", "-p", "--configfile", first)
    # the training seed reaches train_ner's settings; the mixture keeps its draw seed
    assert '"seed":2' in commands.stdout
    assert "--run sweep-syn50-seed2" in commands.stdout
    # build the four mixtures (cheap), then add a fraction and a seed
    # (targets go before --configfile, which takes every value after it)
    snakemake(workdir, *mixture_targets(["25", "50"], [1, 2]), "--configfile", first)
    summary = json.loads(
        (workdir / "results/build_mixture/demo/sweep-syn25-seed2/summary.json").read_text()
    )
    assert summary["summary"]["target_synthetic_fraction"] == 0.25
    second = sweep_config(workdir, "sweep-2", [0.25, 0.5, 0.9], [1, 2, 3])
    more = snakemake(
        workdir,
        "-n",
        *mixture_targets(["25", "50", "90"], [1, 2, 3]),
        "--configfile",
        second,
    )
    # 9 mixtures asked for, 4 already built with unchanged params: only the 5 new ones run
    assert job_table(more.stdout) == {"build_mixture": 5}
    assert "output: results/build_mixture/demo/sweep-syn25-seed1/" not in more.stdout
    assert "output: results/build_mixture/demo/sweep-syn90-seed3/" in more.stdout


def test_the_study_target_tabulates_every_arm_of_the_demo(workdir: Path) -> None:
    snakemake(workdir, "study")
    out = workdir / "results" / "tabulate_study" / "demo"
    table = (out / "study.md").read_text()
    for arm in ("real_only (reference)", "surrogate_aug", "real_surrogate_ensemble"):
        assert arm in table
    with (out / "study.csv").open() as handle:
        rows = {row["arm"]: row for row in csv.DictReader(handle)}
    # an ensemble has no mixture of its own: its sizes are undefined, not 0
    assert rows["real_surrogate_ensemble"]["train_notes"] == ""
    assert float(rows["surrogate_aug"]["synthetic_share"]) > 0
    assert rows["real_only"]["span_overlap_f1_diff"] == ""
    assert rows["surrogate_aug"]["span_overlap_f1_p"] != ""
    assert (out / "study.png").stat().st_size > 10_000
    # one row per run: a trained run names the epoch it kept and its machine, an ensemble
    # (nothing trained) n/a
    with (out / "study_runs.csv").open() as handle:
        runs = {row["run"]: row for row in csv.DictReader(handle)}
    trained = runs["real_only"]
    assert 1 <= int(trained["best_epoch"]) <= int(trained["epochs"])
    assert trained["precision"] in ("fp32", "bf16") and trained["machine"]
    assert trained["code_version"].startswith("0.")
    assert runs["real_surrogate_ensemble"]["best_epoch"] == ""


def test_the_study_rebuilds_from_its_archive_alone(workdir: Path) -> None:
    """ner.study_archive: `snakemake study` tabulates a committed archive, trains nothing."""
    snakemake(workdir, "study", "archive")
    archive = workdir / "committed-archive"
    shutil.copytree(workdir / "results" / "archive_run" / "demo", archive)
    shutil.copy(workdir / "results" / "plan_runs" / "demo" / "plan.json", archive)
    overlay = workdir / "from-archive.yaml"
    overlay.write_text(yaml.safe_dump({"ner": {"study_archive": "committed-archive"}}))
    planned = snakemake(workdir, "-n", "study", "--configfile", str(overlay))
    assert job_table(planned.stdout) == {
        "compare_ner_archive": 1,
        "tabulate_study_archive": 1,
        "study": 1,
    }
    snakemake(workdir, "study", "--configfile", str(overlay))
    live = (workdir / "results" / "tabulate_study" / "demo" / "study.md").read_text()
    rebuilt = (workdir / "results" / "tabulate_study_archive" / "demo" / "study.md").read_text()
    row = next(line for line in live.splitlines() if line.startswith("| surrogate_aug |"))
    # the same arm, the same figures: F1 cell onwards (the train time is in both)
    assert row in rebuilt.splitlines()
    # each run's row too: figures, epoch kept, machine, train time
    runs = (workdir / "results" / "tabulate_study" / "demo" / "study_runs.md").read_text()
    runs_rebuilt = (
        workdir / "results" / "tabulate_study_archive" / "demo" / "study_runs.md"
    ).read_text()
    row = next(line for line in runs.splitlines() if line.startswith("| surrogate_aug |"))
    assert row in runs_rebuilt.splitlines()


def test_a_touched_corpus_and_a_step_rerun_on_unchanged_code_replan_nothing(
    workdir: Path,
) -> None:
    """Content decides (profiles/default: checksums of files up to 4 GB), not mtimes."""
    os.utime(workdir / "resources" / "demo" / "notes.jsonl")  # newer, the same bytes
    assert "Nothing to be done" in snakemake(workdir, "-n").stdout
    # where only modification times count, the same touch replans the whole chain
    by_time = snakemake(workdir, "-n", "--max-checksum-file-size", "1")
    assert job_table(by_time.stdout)["ingest_corpus"] == 1
    # a step rerun on unchanged code writes the same bytes (no commit in its provenance):
    # nothing after it reruns
    notes = "results/ingest_corpus/demo/notes.parquet"
    before = (workdir / notes).read_bytes()
    snakemake(
        workdir, notes, "--forcerun", "ingest_corpus"
    )  # the target first: --forcerun takes a list
    assert (workdir / notes).read_bytes() == before
    assert "Nothing to be done" in snakemake(workdir, "-n").stdout


def test_a_change_to_a_stages_code_reruns_that_stage(repo: Path, workdir: Path) -> None:
    """params.code: the digest of the code a rule's stage runs (synthdeid.code_identity)."""
    copy = workdir / "changed-src"
    shutil.copytree(
        repo / "src" / "synthdeid",
        copy / "synthdeid",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    same = snakemake(workdir, "-n", pythonpath=copy)
    assert "Nothing to be done" in same.stdout  # a copy with the same bytes
    stage = copy / "synthdeid" / "stages" / "split_notes.py"
    stage.write_text(stage.read_text() + "\n# a change to the code split_notes runs\n")
    changed = snakemake(workdir, "-n", pythonpath=copy)
    jobs = job_table(changed.stdout)
    # split_notes and what depends on it; ingest_corpus, upstream, stays
    assert jobs["split_notes"] == 1 and "ingest_corpus" not in jobs
    assert jobs["mask_seeds"] == 1 and jobs["train_ner"] == 3
    assert "Params have changed since last execution" in changed.stdout


def test_own_tapt_settings_leave_runs_without_it_alone(workdir: Path) -> None:
    result = dry_run_with(workdir, "own-tapt-steps", ("ner", "tapt"), {"max_steps": 7})
    assert "Nothing to be done" in result.stdout + result.stderr


@pytest.mark.parametrize(
    ("override", "name"),
    [
        ("bogus_key: 1\n", "bogus_key"),
        ("mask:\n  propagte: false\n", "propagte"),
        ("corpus:\n  name: demo\n  format: jsonl\n  path: x\n  colour: red\n", "colour"),
    ],
)
def test_unknown_config_key_fails_naming_it(
    repo: Path, tmp_path: Path, override: str, name: str
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(override)
    result = snakemake(copy_workflow(repo, tmp_path), "-n", "--configfile", str(bad), check=False)
    assert result.returncode != 0
    assert f"'{name}' was unexpected" in result.stdout + result.stderr


def test_missing_corpus_variable_is_a_clear_error(repo: Path, tmp_path: Path) -> None:
    env_free = {k: v for k, v in os.environ.items() if k != "PHYSIONET_DEID_DIR"}
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--configfile", "config/physionet.yaml"],
        cwd=copy_workflow(repo, tmp_path),
        env=env_free,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert "export PHYSIONET_DEID_DIR=" in result.stdout + result.stderr


def test_pending_runs_train_on_a_bare_copy_from_the_packed_state(
    repo: Path, workdir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bench/study_gpu.py, as on a lent GPU machine: the state packed here, the pending run
    trained on a bare copy of the workflow, its archive unpacked into the archive folder.
    The copy runs exactly the pending run's jobs (Snakemake's records travel)."""
    study_gpu = bench_module("study_gpu")
    snakemake(workdir, "archive")  # the demo's runs archived: the queue's done part
    config = yaml.safe_load((workdir / "config" / "config.yaml").read_text())
    config["ner"]["runs"].append(
        {  # a small run: the plumbing is under test
            "name": "pending",
            "mixture": {"regime": "fixed_n", "total_notes": 24, "real_fraction": 1.0, "seed": 1},
        }
    )
    (workdir / "pending.yaml").write_text(yaml.safe_dump(config))
    archive = tmp_path / "archive"
    archived = sorted(p.name for p in (workdir / "results/archive_run/demo").iterdir())
    for run in archived:
        shutil.copytree(workdir / "results/archive_run/demo" / run, archive / run)
    queue = tmp_path / "queue.txt"
    queue.write_text("\n".join([*archived, "pending"]) + "\n")
    packed = tmp_path / "packed"
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.chdir(workdir)
    args = ["--queue", str(queue), "--archive", str(archive), "--corpus", "demo"]
    pack = ["pack", *args, "--corpus-env", "", "--out", str(packed)]
    assert study_gpu.main([*pack, "--", "--configfile", "pending.yaml"]) == 0
    manifest = json.loads((packed / "run" / "manifest.json").read_text())
    assert manifest["targets"] == ["results/archive_run/demo/pending/run.json"]
    assert manifest["planned_jobs"]["train_ner"] == 1
    with tarfile.open(packed / "run" / "state.tar") as tar:
        names = tar.getnames()
    assert "results/split_notes/demo/notes.parquet" in names
    assert any(name.startswith(".snakemake/metadata/") for name in names)
    # what no pending job reads stays behind: an archived run's model, the ingested corpus
    assert not any(name.startswith("results/train_ner/demo/real_only/") for name in names)
    assert not any(name.startswith("results/ingest_corpus/") for name in names)

    device = copy_workflow(repo, tmp_path / "device", PLUMBING)
    shutil.copy(workdir / "pending.yaml", device)
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.chdir(device)
    run = ["device", "--run", str(packed / "run"), "--uploads", str(packed), "--out", str(out)]
    local = ["--work", str(tmp_path / "work"), "--cores", "2", "--gpu-jobs", "1", "--no-install"]
    assert study_gpu.main([*run, *local, "--deadline", "1200"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["archived"] == ["pending"] and summary["snakemake_returncode"] == 0
    assert job_table((out / "snakemake.log").read_text()) == manifest["planned_jobs"]

    assert study_gpu.main(["unpack", "--bundle", str(out), "--archive", str(archive)]) == 0
    runs = {run.name: run for run in read_archives([archive])}
    assert runs["pending"].arm == "pending"
    assert (archive / "pending" / "per_document.parquet").is_file()
    assert (archive / "plan.json").is_file()
