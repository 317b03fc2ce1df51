"""Config values that could only fail while jobs run are refused when the workflow is parsed.

Schema checks are tested by validating config/config.yaml with an override merged
over it, the way Snakemake merges a named config; checks the schema cannot express
(fractions summing to 1) and the whole path are tested with ``snakemake -n``.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from snakemake.exceptions import WorkflowError
from snakemake.utils import update_config, validate

from synthdeid.workflow.dry_run import job_table
from workflow_helpers import copy_workflow, snakemake

REPO = Path(__file__).resolve().parents[1]
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"
DEFAULT = yaml.safe_load((REPO / "config" / "config.yaml").read_text(encoding="utf-8"))


def merged(override: dict[str, Any]) -> dict[str, Any]:
    config = copy.deepcopy(DEFAULT)
    update_config(config, override)
    return config


def joined(message: str) -> str:
    """The message with the schema's pretty-printed string pieces joined again."""
    return re.sub(r"'\s*\n\s*'", "", message)


def refusal(override: dict[str, Any]) -> str:
    with pytest.raises(WorkflowError) as err:
        validate(merged(override), str(SCHEMA))
    return joined(str(err.value))


def privacy(**values: float | None) -> dict[str, Any]:
    return {"synth": {"dplm": {"privacy": values}}}


def test_the_default_and_the_physionet_config_are_valid() -> None:
    validate(merged({}), str(SCHEMA))
    physionet = yaml.safe_load((REPO / "config" / "physionet.yaml").read_text(encoding="utf-8"))
    validate(merged(physionet), str(SCHEMA))


@pytest.mark.parametrize(
    "overlays",
    [
        ["physionet-study.yaml"],
        ["physionet-study.yaml", "physionet-study-cpu.yaml"],
        ["physionet-deploy-cpu.yaml"],
        ["llm-physionet-server.yaml"],
        ["llm-physionet-qwen.yaml"],
        ["dplm-smollm2.yaml"],
    ],
)
def test_the_physionet_overlays_are_valid(overlays: list[str]) -> None:
    config = merged(yaml.safe_load((REPO / "config" / "physionet.yaml").read_text("utf-8")))
    for name in overlays:
        update_config(config, yaml.safe_load((REPO / "config" / name).read_text("utf-8")))
    validate(config, str(SCHEMA))


def test_noise_multiplier_with_the_inherited_target_epsilon_is_refused() -> None:
    # config.yaml sets target_epsilon; a named config setting noise_multiplier inherits it
    message = refusal(privacy(noise_multiplier=1.0))
    assert "sets both target_epsilon and noise_multiplier" in message
    assert "target_epsilon: null" in message


def test_noise_multiplier_with_target_epsilon_null_is_accepted() -> None:
    config = merged(privacy(noise_multiplier=1.0, target_epsilon=None))
    validate(config, str(SCHEMA))
    assert config["synth"]["dplm"]["privacy"]["noise_multiplier"] == 1.0


def test_neither_privacy_parameter_is_refused() -> None:
    assert "sets neither target_epsilon nor noise_multiplier" in refusal(
        privacy(target_epsilon=None)
    )


@pytest.mark.parametrize(
    "path",
    [
        ("synth", "template", "guard"),
        ("synth", "template", "pools"),
        ("synth", "dplm", "pools"),
    ],
)
def test_min_surface_chars_has_a_maximum(path: tuple[str, ...]) -> None:
    def at(value: int) -> dict[str, Any]:
        override: dict[str, Any] = {"min_surface_chars": value}
        for key in reversed(path):
            override = {key: override}
        return override

    validate(merged(at(64)), str(SCHEMA))
    assert "65 is greater than the maximum of 64" in refusal(at(65))


@pytest.fixture(scope="module")
def workflow_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_workflow(REPO, tmp_path_factory.mktemp("workflow"))


def dry_run_refusal(workdir: Path, name: str, override: dict[str, Any]) -> str:
    path = workdir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(override), encoding="utf-8")
    result = snakemake(workdir, "-n", "--configfile", str(path), check=False)
    assert result.returncode != 0
    return joined(result.stdout + result.stderr)


def test_dry_run_refuses_fractions_not_summing_to_one(workflow_copy: Path) -> None:
    output = dry_run_refusal(workflow_copy, "fractions", {"split": {"fractions": {"holdout": 0.4}}})
    assert "split.fractions must be non-negative and sum to 1" in output
    assert "'holdout': 0.4" in output


def test_dry_run_refuses_an_inherited_privacy_conflict(workflow_copy: Path) -> None:
    output = dry_run_refusal(workflow_copy, "privacy", privacy(noise_multiplier=0.8))
    assert "sets both target_epsilon and noise_multiplier" in output


# ---------------------------------------------------------------- stacked runs (lexicons)

STACKED_RUN = {"name": "real_only_lexicons", "base": "real_only", "lexicons": ["first_names"]}


def with_runs(*extra: dict[str, Any]) -> dict[str, Any]:
    """The demo's runs and ``extra`` (a named config replaces the whole list)."""
    return {"ner": {"runs": [*DEFAULT["ner"]["runs"], *extra]}}


def test_a_stacked_run_has_base_and_lexicons_and_no_mixture() -> None:
    validate(merged(with_runs(STACKED_RUN)), str(SCHEMA))
    mixture = {"regime": "augmentation", "synthetic_fraction": 0.0}
    assert "is valid under each of" in refusal(with_runs({**STACKED_RUN, "mixture": mixture}))
    assert "'streets' is not one of" in refusal(with_runs({**STACKED_RUN, "lexicons": ["streets"]}))
    assert "'holdout' is not one of" in refusal(with_runs({**STACKED_RUN, "parts": ["holdout"]}))
    assert "is not valid under any of" in refusal(with_runs({"name": "x", "base": "real_only"}))


def test_dry_run_plans_a_stacked_run_like_any_other(workflow_copy: Path) -> None:
    path = workflow_copy / "stacked.yaml"
    path.write_text(yaml.safe_dump(with_runs(STACKED_RUN)), encoding="utf-8")
    result = snakemake(workflow_copy, "-n", "-p", "--configfile", str(path))
    jobs = job_table(result.stdout)
    n_runs = len(DEFAULT["ner"]["runs"]) + 1
    assert jobs["stack_lexicons"] == 1
    assert jobs["predict_ner"] == jobs["evaluate_ner"] == n_runs
    assert jobs["build_mixture"] == jobs["train_ner"]  # no mixture or training of its own
    assert (
        "stack-lexicons --model results/train_ner/demo/real_only/model" in result.stdout
        and "--validation results/build_mixture/demo/real_only/validation.parquet" in result.stdout
        and "--lexicons first_names" in result.stdout
    )
    assert (
        "predict-ner --model results/stack_lexicons/demo/real_only_lexicons/model" in result.stdout
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"base": "real_surrogate_ensemble"},
            "base 'real_surrogate_ensemble' is not a trained run",
        ),
        ({"base": "bogus"}, "base 'bogus' is not a trained run"),
        (
            {"pools": ["surrogates"]},
            "pools, tapt, training and distill_from belong to its base run",
        ),
        ({"training_seeds": [1, 2]}, "stacks lexicons over a trained run"),
    ],
)
def test_dry_run_refuses_bad_stacked_runs(
    workflow_copy: Path, change: dict[str, Any], message: str
) -> None:
    assert message in dry_run_refusal(
        workflow_copy, "bad-stacked", with_runs({**STACKED_RUN, **change})
    )


# ---------------------------------------------------------------- distilled runs

# a student of the demo's ensemble: its soft labels on the student's training notes
DISTILLED_RUN = {
    "name": "ensemble_student",
    "distill_from": "real_surrogate_ensemble",
    "mixture": {"regime": "augmentation", "synthetic_fraction": 0.0, "seed": 1},
}


def test_a_distilled_run_names_its_teacher_as_a_string() -> None:
    validate(merged(with_runs(DISTILLED_RUN)), str(SCHEMA))
    assert "is not of type 'string'" in refusal(
        with_runs({**DISTILLED_RUN, "distill_from": ["real_only"]})
    )


def test_dry_run_plans_the_teachers_soft_labels_before_the_student(workflow_copy: Path) -> None:
    path = workflow_copy / "distilled.yaml"
    path.write_text(yaml.safe_dump(with_runs(DISTILLED_RUN)), encoding="utf-8")
    result = snakemake(workflow_copy, "-n", "-p", "--configfile", str(path))
    jobs = job_table(result.stdout)
    assert jobs["soft_label_ner"] == 1
    soft_labels = "results/soft_label_ner/demo/ensemble_student/local/soft_labels.parquet"
    labelled = result.stdout.index(
        "soft-label-ner --teacher results/ensemble_ner/demo/real_surrogate_ensemble/model"
        " --train results/build_mixture/demo/ensemble_student/train.parquet"
        f" --out {soft_labels}"
    )
    trained = result.stdout.index(f"--soft-labels {soft_labels} --run ensemble_student")
    assert labelled < trained
    # the other runs train on their gold labels alone
    assert result.stdout.count("--soft-labels") == 1
