"""The `synthdeid` command of the running interpreter, findable by the rules (parse time)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path


def ensure_cli_on_path() -> None:
    """Make the ``synthdeid`` command of the running interpreter findable.

    Rules call ``synthdeid``; when snakemake runs from a venv that is not
    activated (``.venv/bin/snakemake``), that venv's bin folder is put first on
    PATH, so local and SLURM jobs (which inherit the environment) use the same
    installation as the workflow.
    """
    if shutil.which("synthdeid") is None:
        bin_dir = str(Path(sys.executable).parent)
        os.environ["PATH"] = os.pathsep.join([bin_dir, os.environ.get("PATH", "")])
