"""Running the workflow from tests: a fresh copy per working directory, snakemake in the venv."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

WORKFLOW_PARTS = ("workflow", "config", "resources", "envs", "profiles")


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


def planned_jobs(output: str) -> dict[str, int]:
    """Rule -> count from the 'Job stats' table of a dry run."""
    jobs: dict[str, int] = {}
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Job stats:"))
    for line in lines[start + 3 :]:
        parts = line.split()
        if len(parts) != 2 or parts[0] == "total":
            break
        jobs[parts[0]] = int(parts[1])
    return jobs


def copy_workflow(repo: Path, target: Path) -> Path:
    """Copy the workflow (not results) into ``target``, a fresh working directory."""
    for part in WORKFLOW_PARTS:
        source = repo / part
        if source.is_dir():
            shutil.copytree(source, target / part)
        else:
            shutil.copy2(source, target / part)
    return target
