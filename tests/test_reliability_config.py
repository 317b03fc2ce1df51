"""Config values a careless user tries, refused when the workflow is parsed or planned.

Each try once passed the config and failed later, in a job (a traceback, a
MemoryError) or silently (a "cross-corpus" score on the training corpus
itself); now the schema, the parse-time checks or the input function that
needs the value refuse it with the key and the fix. docs/reliability.md lists
these tries with the others.
"""

from __future__ import annotations

import random
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from snakemake.utils import validate

from synthdeid.errors import ConfigError
from synthdeid.ner.mixtures import MAX_COMPUTE_BUDGET, MixtureSpec, draw_with_replacement
from synthdeid.ner.training import TrainingConfig
from synthdeid.notes import Note
from synthdeid.runtime import SEED_MAX, check_seed
from synthdeid.tabular.source import chosen_source
from synthdeid.workflow.dry_run import job_table
from synthdeid.workflow.tables import Tables
from synthdeid.workflow.tabular import source_files
from test_config_checks import DEFAULT, SCHEMA, merged, refusal
from workflow_helpers import copy_workflow, snakemake

REPO = Path(__file__).resolve().parents[1]
FIRST_RUN = DEFAULT["ner"]["runs"][0]


def with_first_run(**changes: Any) -> dict[str, Any]:
    """The demo's runs with the first one changed (a named config replaces the whole list)."""
    return {"ner": {"runs": [{**FIRST_RUN, **changes}, *DEFAULT["ner"]["runs"][1:]]}}


@pytest.fixture(scope="module")
def workflow_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_workflow(REPO, tmp_path_factory.mktemp("workflow"))


def dry_run(workdir: Path, name: str, override: dict[str, Any]) -> tuple[int, str]:
    path = workdir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(override), encoding="utf-8")
    result = snakemake(workdir, "-n", "--configfile", str(path), check=False)
    return result.returncode, result.stdout + result.stderr


# ---------------------------------------------------------------- seeds


@pytest.mark.parametrize("seed", [-1, 2**64, SEED_MAX + 1])
def test_training_seeds_out_of_range_are_refused_by_the_schema(seed: int) -> None:
    message = refusal({"ner": {"training_seeds": [seed]}})
    assert "training_seeds" in message
    assert str(seed) in message


@pytest.mark.parametrize(
    "override",
    [
        {"split": {"seed": -1}},
        {"synth": {"template": {"seed": 2**64}}},
        {"synth": {"tabular": {"table": {"seed": -5}}}},
        {"ner": {"arm_seeds": {"real_only": [-1]}}},
    ],
    ids=["split", "template", "tabular-table", "arm-seeds"],
)
def test_every_seed_key_takes_the_one_seed_range(override: dict[str, Any]) -> None:
    message = refusal(override)
    assert "less than the minimum of 0" in message or "greater than the maximum" in message


def test_the_largest_seed_passes_the_schema() -> None:
    validate(merged({"ner": {"training_seeds": [0, SEED_MAX]}}), str(SCHEMA))


@pytest.mark.parametrize("seed", [-1, 2**64, True, "1"])
def test_train_ner_refuses_a_seed_out_of_range_before_training(seed: object) -> None:
    with pytest.raises(ConfigError, match=r"ner\.training\.seed: a seed must be an integer"):
        TrainingConfig.from_mapping({"seed": seed})
    with pytest.raises(ConfigError, match=r"mixture\.seed: a seed must be an integer"):
        MixtureSpec(regime="augmentation", seed=seed)  # type: ignore[arg-type]
    assert check_seed(SEED_MAX, "x") == SEED_MAX


# ---------------------------------------------------------------- compute budget


def test_a_compute_budget_past_the_bound_is_refused_when_the_config_is_read() -> None:
    mixture = {"regime": "compute_matched", "steps": 10**9, "batch_size": 8, "seed": 1}
    config = merged(with_first_run(mixture=mixture))
    validate(config, str(SCHEMA))  # the schema alone cannot bound a product
    with pytest.raises(ConfigError) as caught:
        Tables.from_config(config)
    message = str(caught.value)
    assert "ner run 'real_only'" in message and "mixture (compute_matched)" in message
    assert f"{MAX_COMPUTE_BUDGET:,}" in message


def test_dry_run_refuses_the_compute_budget(workflow_copy: Path) -> None:
    mixture = {"regime": "compute_matched", "steps": 10**9, "batch_size": 8, "seed": 1}
    code, output = dry_run(workflow_copy, "budget", with_first_run(mixture=mixture))
    assert code != 0
    assert "steps x batch_size = 8,000,000,000 examples" in output
    assert "MemoryError" not in output and "Traceback" not in output


def test_a_budget_at_the_bound_is_drawn_in_bounded_pieces() -> None:
    """The chunked draw gives exactly the draws of one call (same generator, same order)."""
    MixtureSpec(regime="compute_matched", seed=1, steps=MAX_COMPUTE_BUDGET, batch_size=1)
    notes = [Note(f"n{i}", "p", "x", (), "t", "train") for i in range(50)]
    k = 3 * (1 << 20) + 17
    expected = Counter(random.Random("4:real").choices(sorted(n.note_id for n in notes), k=k))
    assert draw_with_replacement(notes, k, 4, "real") == dict(expected)


# ---------------------------------------------------------------- tabular source


def test_a_named_config_switches_the_tabular_source_by_nulling_the_other_key() -> None:
    source = {"path": "tables/t.csv", "sklearn": None}
    config = merged({"synth": {"tabular": {"table": {"source": source}}}})
    validate(config, str(SCHEMA))
    assert chosen_source(config["synth"]["tabular"]["table"]["source"]) == {"path": "tables/t.csv"}
    assert source_files(config["synth"]["tabular"]["table"]["source"]) == {"source": "tables/t.csv"}


def test_a_merged_source_with_both_keys_is_refused_with_the_way_out() -> None:
    message = refusal({"synth": {"tabular": {"table": {"source": {"path": "t.csv"}}}}})
    assert "source" in message
    with pytest.raises(ConfigError, match="sets the other key to null"):
        chosen_source({"path": "t.csv", "sklearn": "breast_cancer"})
    with pytest.raises(ConfigError, match="got none"):
        chosen_source({"path": None, "sklearn": None})


def test_dry_run_plans_the_switched_source_from_its_file(workflow_copy: Path) -> None:
    table = workflow_copy / "tables" / "t.csv"
    table.parent.mkdir(exist_ok=True)
    table.write_text("a,b\n1,2\n", encoding="utf-8")
    source = {"path": "tables/t.csv", "sklearn": None}
    path = workflow_copy / "switch.yaml"
    path.write_text(yaml.safe_dump({"synth": {"tabular": {"table": {"source": source}}}}))
    result = snakemake(
        workflow_copy,
        "-n",
        "--configfile",
        str(path),
        "-p",
        "results/prepare_tabular/breast_cancer/prepared.parquet",
    )
    assert job_table(result.stdout)["prepare_tabular"] == 1
    assert "input: tables/t.csv," in result.stdout + result.stderr
    assert """--source '{"path":"tables/t.csv"}'""" in result.stdout + result.stderr


# ---------------------------------------------------------------- evaluation corpora


def test_dry_run_refuses_an_evaluation_corpus_holding_the_main_corpus(workflow_copy: Path) -> None:
    """A copy at another path and name is still the corpus: refused by its digests."""
    copy = workflow_copy / "elsewhere" / "copy.jsonl"
    copy.parent.mkdir(exist_ok=True)
    shutil.copyfile(workflow_copy / DEFAULT["corpus"]["path"], copy)
    entry = {
        "name": "not_demo",
        "format": "jsonl",
        "path": "elsewhere/copy.jsonl",
        "source": "demo-synthetic",
        "labels": {"mapping": {}},
    }
    code, output = dry_run(workflow_copy, "same", {"evaluation": {"corpora": [entry]}})
    assert code != 0
    assert "evaluation.corpora[not_demo]: its files hold the same bytes" in output


def test_an_evaluation_corpus_of_other_notes_is_planned(workflow_copy: Path) -> None:
    result = snakemake(workflow_copy, "-n")
    assert job_table(result.stdout)["ingest_eval_corpus"] == 1
