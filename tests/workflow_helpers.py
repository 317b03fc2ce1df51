"""Running the workflow from tests: a fresh copy per working directory, snakemake in the venv."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from snakemake.api import SnakemakeApi
from snakemake.settings.enums import Quietness
from snakemake.settings.types import (
    ConfigSettings,
    OutputSettings,
    ResourceSettings,
    StorageSettings,
)

from synthdeid.workflow.outputs import RuleOutputs

WORKFLOW_PARTS = ("workflow", "config", "resources", "envs", "profiles")
# What the tests that run the demo change in its config: they check plumbing (the jobs,
# artifacts, schemas and reruns), not how good a model gets, so each model that trains
# for epochs trains for one (PATE-CTGAN, whose default is 300, for 10), and AIM fits
# one-way marginals. Written into the copy's config/config.yaml, so that every later run
# and dry run in that copy sees it.
PLUMBING: dict[str, Any] = {
    "ner": {"training": {"epochs": 1}},
    "synth": {
        "tabular": {
            "extraction": {"model": {"epochs": 1}},
            "options": {
                # AIM on one-way marginals: the same selection, measurement and estimation
                # steps, 6 times faster than on pairs (27 s against 155 s on 2 AMD EPYC cores)
                "aim": {"max_model_size": 10, "degree": 1},
                "pate_ctgan": {"epochs": 10},
            },
        }
    },
}


def snakemake(
    workdir: Path, *args: str, check: bool = True, pythonpath: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run snakemake in ``workdir``; ``pythonpath`` puts a copy of the package first."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "2", *args],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    if check and result.returncode != 0:
        pytest.fail(
            f"snakemake {' '.join(args)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        )
    return result


def declared_outputs(repo: Path) -> RuleOutputs:
    """Every rule's declared outputs, from the workflow parsed with the demo config as
    Snakemake parses it (what the Snakefile's ``rule_outputs()`` gives the tables)."""
    with SnakemakeApi(OutputSettings(quiet={Quietness.ALL})) as api:
        workflow = api.workflow(
            resource_settings=ResourceSettings(),
            config_settings=ConfigSettings(),
            storage_settings=StorageSettings(),
            snakefile=repo / "workflow" / "Snakefile",
            workdir=repo,
        )
        return RuleOutputs.from_rules(workflow._workflow.rules)


def copy_workflow(repo: Path, target: Path, overlay: Mapping[str, Any] | None = None) -> Path:
    """Copy the workflow (not results) into ``target``, a fresh working directory; with
    ``overlay``, merged into the copy's default config (:func:`merge_into_config`)."""
    for part in WORKFLOW_PARTS:
        source = repo / part
        if source.is_dir():
            shutil.copytree(source, target / part)
        else:
            shutil.copy2(source, target / part)
    if overlay:
        merge_into_config(target, overlay)
    return target


def merge_into_config(workdir: Path, overlay: Mapping[str, Any]) -> None:
    """Merge ``overlay`` into ``workdir``'s config/config.yaml, mapping by mapping."""
    path = workdir / "config" / "config.yaml"
    config = yaml.safe_load(path.read_text())
    merge_config(config, overlay)
    path.write_text(yaml.safe_dump(config, sort_keys=False))


def merge_config(config: dict[str, Any], overlay: Mapping[str, Any]) -> None:
    """Merge ``overlay`` into ``config`` as Snakemake merges ``--configfile`` files: nested
    mappings key by key, anything else replaced."""
    for key, value in overlay.items():
        if isinstance(value, Mapping) and isinstance(config.get(key), dict):
            merge_config(config[key], value)
        else:
            config[key] = value
