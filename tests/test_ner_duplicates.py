"""Degenerate arms: runs that would train the same model, found and reported once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from synthdeid.cli import main
from synthdeid.errors import ConfigError
from synthdeid.evaluation.study_table import degenerate_arms, degenerate_text
from synthdeid.ner.duplicates import TrainedRun, plan_runs, read_plan, settings_digest
from synthdeid.ner.mixtures import MixtureSpec, build_mixture
from synthdeid.notes import Note, Span
from synthdeid.workflow.ner_runs import NerRuns


def notes(n: int) -> list[Note]:
    return [
        Note(f"r{i}", f"p{i}", "Seen by Dr Ames.", (Span(11, 15, "DOCTOR"),), "real", "train")
        for i in range(n)
    ]


def pool(n: int) -> list[Note]:
    return [Note(f"s{i}", f"sp{i}", "Seen by Ames.", (), "synthetic") for i in range(n)]


def digest(spec: MixtureSpec, pools: dict[str, list[Note]] | None = None) -> str:
    summary = build_mixture(notes(40), pools or {}, spec).summary
    return str(summary["digest"])


def test_fixed_n_at_the_real_size_and_real_share_one_is_real_only() -> None:
    real_only = MixtureSpec(regime="augmentation", seed=1, validation_fraction=0.1)
    # 40 real notes of 40 patients: 4 held out for validation, 36 left
    fixed_all = MixtureSpec(
        regime="fixed_n", seed=1, total_notes=36, real_fraction=1.0, validation_fraction=0.1
    )
    fixed_fewer = MixtureSpec(
        regime="fixed_n", seed=1, total_notes=30, real_fraction=1.0, validation_fraction=0.1
    )
    other_seed = MixtureSpec(regime="augmentation", seed=2, validation_fraction=0.1)
    assert digest(fixed_all, {"syn": pool(50)}) == digest(real_only)
    assert digest(fixed_fewer, {"syn": pool(50)}) != digest(real_only)
    assert digest(other_seed) != digest(real_only)  # another validation carve


def run(name: str, arm: str, mixture: str, settings: str = "s") -> TrainedRun:
    return TrainedRun(name, arm, mixture, settings)


def test_an_arm_whose_every_run_repeats_another_arm_is_degenerate() -> None:
    runs = [
        run("real_only-seed1", "real_only", "m0", "seed1"),
        run("real_only-seed2", "real_only", "m0", "seed2"),
        run("fixed-real100-seed1", "fixed-real100", "m0", "seed1"),
        run("fixed-real100-seed2", "fixed-real100", "m0", "seed2"),
        run("fixed-real50-seed1", "fixed-real50", "m1", "seed1"),
        run("fixed-real50-seed2", "fixed-real50", "m1", "seed2"),
    ]
    plan = plan_runs(runs)
    assert plan.duplicates == {
        "fixed-real100-seed1": "real_only-seed1",
        "fixed-real100-seed2": "real_only-seed2",
    }
    assert plan.degenerate_arms == {"fixed-real100": "real_only"}
    assert plan.skipped == ["fixed-real100-seed1", "fixed-real100-seed2"]
    assert read_plan(json.loads(json.dumps(plan.as_dict()))) == plan


def test_a_partly_repeating_arm_is_trained_whole() -> None:
    runs = [
        run("a-seed1", "a", "m0", "seed1"),
        run("b-seed1", "b", "m0", "seed1"),
        run("b-seed2", "b", "m9", "seed2"),  # b's second seed is new
        run("c-seed1", "c", "m0", "other"),  # other settings: not a duplicate
        run("d-seed1", "d", "m0", "seed1"),
    ]
    plan = plan_runs(runs, protected={"d-seed1"})
    assert plan.duplicates == {"b-seed1": "a-seed1", "d-seed1": "a-seed1"}
    # b keeps a seed of its own; d is built upon (an ensemble member, say)
    assert plan.degenerate_arms == {}
    assert plan.skipped == []


def test_settings_digest_ignores_key_order_only() -> None:
    assert settings_digest({"a": 1, "b": [1, 2]}) == settings_digest({"b": [1, 2], "a": 1})
    assert settings_digest({"a": 1}) != settings_digest({"a": 2})


def test_a_bad_plan_is_named() -> None:
    with pytest.raises(ValueError, match="not a run plan"):
        read_plan({"format": "other"})
    with pytest.raises(ValueError, match="lacks or mistypes"):
        read_plan({"format": "synthdeid.run_plan/1", "runs": {}})


def ner_runs() -> NerRuns:
    mixture = {"regime": "augmentation", "synthetic_fraction": 0.0, "seed": 1}
    return NerRuns.from_config(
        {
            "runs": [
                {"name": "real_only", "mixture": mixture},
                {
                    "name": "fixed",
                    "mixture": {"regime": "fixed_n", "total_notes": 10, "seed": 1},
                    "sweep": {"real_fraction": [1.0, 0.5]},
                },
            ],
            "training_seeds": [1, 2],
            "arm_seeds": {},
            "reference_run": "real_only",
            "training": {"epochs": 1},
        }
    )


def test_runs_without_a_degenerate_arm() -> None:
    runs = ner_runs()
    assert set(runs.arms) == {"real_only", "fixed-real100", "fixed-real50"}
    kept = runs.without_arms({"fixed-real100"})
    assert set(kept.arms) == {"real_only", "fixed-real50"}
    assert sorted(kept.runs) == sorted(
        ["real_only-seed1", "real_only-seed2", "fixed-real50-seed1", "fixed-real50-seed2"]
    )
    assert runs.in_plan_order()[:2] == ["real_only-seed1", "real_only-seed2"]
    with pytest.raises(ConfigError, match="reference arm"):
        runs.without_arms({"real_only"})


def summary(path: Path, digest: str) -> Path:
    path.write_text(json.dumps({"summary": {"digest": digest, "n_train_total": 1}}))
    return path


def test_plan_runs_writes_the_plan_and_tabulate_study_names_the_arm(tmp_path: Path) -> None:
    argv = ["plan-runs"]
    for name, arm, mixture in (
        ("real_only-seed1", "real_only", "sha256:aa"),
        ("fixed-real100-seed1", "fixed-real100", "sha256:aa"),
        ("fixed-real50-seed1", "fixed-real50", "sha256:bb"),
    ):
        argv += ["--mixture", f"{name}={summary(tmp_path / f'{name}.json', mixture)}"]
        argv += ["--arm", f"{name}={arm}", "--settings", f"{name}=sha256:s1"]
    out = tmp_path / "plan" / "plan.json"
    assert main([*argv, "--out", str(out)]) == 0
    plan = json.loads(out.read_text())
    assert plan["degenerate_arms"] == {"fixed-real100": "real_only"}
    assert plan["skipped_runs"] == ["fixed-real100-seed1"]
    assert degenerate_arms(out, None) == {"fixed-real100": "real_only"}
    # an archive folder's plan.json serves when no --plan is given
    archive = tmp_path / "archive"
    archive.mkdir()
    (archive / "plan.json").write_text(out.read_text())
    assert degenerate_arms(None, [tmp_path, archive]) == {"fixed-real100": "real_only"}
    assert degenerate_arms(None, [tmp_path]) == {}
    assert "fixed-real100 is real_only" in degenerate_text({"fixed-real100": "real_only"})


def test_plan_runs_refuses_a_summary_without_a_digest(tmp_path: Path) -> None:
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"summary": {"n_train_total": 1}}))
    out = tmp_path / "plan.json"
    argv = ["plan-runs", "--mixture", f"a={old}", "--settings", "a=x", "--out", str(out)]
    assert main(argv) == 2
    assert not out.exists()


def test_an_archived_study_takes_the_first_reference_run_it_holds(tmp_path: Path) -> None:
    from synthdeid.workflow.ner_inputs import archived_reference

    runs = ner_runs()
    assert archived_reference(None, runs) == "real_only-seed1"
    (tmp_path / "real_only-seed2").mkdir()
    assert archived_reference(str(tmp_path), runs) == "real_only-seed2"
    with pytest.raises(ConfigError, match="holds no run of the reference arm"):
        archived_reference(str(tmp_path / "empty"), runs)
