from __future__ import annotations

import os
import sys
from pathlib import Path

from synthdeid.workflow.environment import ensure_cli_on_path


def test_cli_of_the_running_interpreter_is_put_on_path(monkeypatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    ensure_cli_on_path()
    assert os.environ["PATH"].split(os.pathsep)[0] == str(Path(sys.executable).parent)
    before = os.environ["PATH"]
    ensure_cli_on_path()  # already findable: unchanged
    assert os.environ["PATH"] == before
