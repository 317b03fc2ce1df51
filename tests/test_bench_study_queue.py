"""The study queue (bench/study_queue.py) and the CPU profile it trains."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from bench_helpers import bench_module
from synthdeid.ner.sweeps import expand_runs

REPO = Path(__file__).resolve().parents[1]


def load_queue() -> ModuleType:
    return bench_module("study_queue")


def run_names(config: str, seeds_from: str = "physionet-study.yaml") -> list[str]:
    ner = yaml.safe_load((REPO / "config" / config).read_text("utf-8"))["ner"]
    seeds = yaml.safe_load((REPO / "config" / seeds_from).read_text("utf-8"))["ner"]
    runs = expand_runs(ner["runs"], seeds["training_seeds"], seeds["arm_seeds"])
    return [run["name"] for run in runs]


def test_the_cpu_profile_is_the_study_less_the_llm_pool_arms() -> None:
    study, profile = run_names("physionet-study.yaml"), run_names("physionet-study-cpu.yaml")
    left_out = {name.rsplit("-seed", 1)[0] for name in set(study) - set(profile)}
    assert left_out == {"silver-silver_llm", "tabular"}
    assert set(profile) <= set(study)


def test_the_queue_lists_every_run_of_the_profile_but_the_degenerate_arm() -> None:
    queue = load_queue().read_queue(REPO / "bench" / "study" / "physionet-cpu.txt")
    profile = run_names("physionet-study-cpu.yaml")
    assert set(profile) - set(queue) == {f"fixed-real100-seed{s}" for s in (1, 2, 3)}
    assert set(queue) <= set(profile)
    assert queue[:3] == ["real_only-seed1", "real_only-seed2", "real_only-seed3"]


def test_pending_runs_skip_archived_and_degenerate_ones(tmp_path: Path) -> None:
    queue = load_queue()
    listed = tmp_path / "queue.txt"
    listed.write_text("# order\na-seed1\nb-seed1  # a comment\n\nc-seed1\nd-seed1\n")
    runs = queue.read_queue(listed)
    assert runs == ["a-seed1", "b-seed1", "c-seed1", "d-seed1"]
    archive = tmp_path / "archive"
    (archive / "a-seed1").mkdir(parents=True)
    (archive / "a-seed1" / "run.json").write_text("{}")
    (archive / "c-seed1").mkdir()  # a folder without run.json is not archived
    plan = tmp_path / "plan.json"
    assert queue.skipped_runs(plan) == set()
    plan.write_text(json.dumps({"skipped_runs": ["d-seed1"]}))
    assert queue.pending(runs, archive, queue.skipped_runs(plan)) == ["b-seed1", "c-seed1"]
    listed.write_text("a-seed1\na-seed1\n")
    with pytest.raises(SystemExit, match="listed twice: a-seed1"):
        queue.read_queue(listed)


def test_a_run_folder_is_copied_whole_over_an_older_one(tmp_path: Path) -> None:
    queue = load_queue()
    source = tmp_path / "results" / "b-seed1"
    source.mkdir(parents=True)
    (source / "run.json").write_text('{"new": true}')
    archive = tmp_path / "archive"
    (archive / "b-seed1").mkdir(parents=True)
    (archive / "b-seed1" / "stale.parquet").write_text("old")
    queue.copy_into(source, archive)
    assert sorted(p.name for p in (archive / "b-seed1").iterdir()) == ["run.json"]
    assert [p.name for p in archive.iterdir()] == ["b-seed1"]  # no scratch left


def test_a_dry_run_names_the_next_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    listed = tmp_path / "queue.txt"
    listed.write_text("a-seed1\nb-seed1\nc-seed1\n")
    argv = ["--queue", str(listed), "--archive", str(tmp_path / "archive"), "--corpus", "x"]
    assert load_queue().main([*argv, "--next", "2", "--dry-run"]) == 0
    assert (
        "0 of 3 queued runs archived or skipped; next: a-seed1, b-seed1" in capsys.readouterr().out
    )


def test_a_run_a_stopped_call_left_incomplete_is_taken_up_again() -> None:
    command = load_queue().snakemake_command(Path("t/run.json"), 2, ["--configfile", "c.yaml"])
    assert command[:4] == ["snakemake", "--cores", "2", "--rerun-incomplete"]
    assert command[4:] == ["t/run.json", "--configfile", "c.yaml"]
