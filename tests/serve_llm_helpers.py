"""Real processes and records for the ``serve-llm`` tests.

A stand-in server is a real ``python -m llama_cpp.server`` process, run from a
tiny package made for it (the real server needs llama-cpp-python and a model):
it sleeps, and can ignore SIGTERM, leave its folder and end a second after
SIGTERM, or start a grandchild in its group. Records
are written as ``synthdeid serve-llm start`` writes them, with the process's
start time read from ``/proc`` here, independently of the code under test.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SERVER_MODULE = "llama_cpp.server"
STATE_FILE = "server.json"
LOOPBACK_URL = "http://127.0.0.1:9/v1"

_STAND_IN = """\
import os, signal, subprocess, sys, time
def exit_slowly(signum, frame):
    os.chdir("/")  # as an exiting process loses its folder and command line before it ends
    time.sleep(1.0)
    sys.exit(0)
if sys.argv[1] == "ignore":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
elif sys.argv[1] == "slow":
    signal.signal(signal.SIGTERM, exit_slowly)
child = None
if sys.argv[2] == "grandchild":
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
print(child.pid if child else 0, flush=True)
time.sleep(120)
"""


def fake_gguf(path: Path) -> Path:
    """A file that resolve_model takes for a GGUF model (magic bytes) but llama.cpp cannot load."""
    path.write_bytes(b"GGUF" + bytes(60))
    return path


def running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's zombie may wait for a PID 1 that never reaps)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def start_ticks(pid: int) -> int:
    """When ``pid`` started, in clock ticks after boot (``/proc/<pid>/stat`` field 22)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rpartition(")")[2].split()[19])


def record(state_dir: Path, pid: int, *, url: str = LOOPBACK_URL, ticks: int | None = None) -> Path:
    """Write ``state_dir``'s server record for ``pid`` (its real start time unless ``ticks``)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_dir / STATE_FILE
    state = {
        "pid": pid,
        "pid_start_ticks": start_ticks(pid) if ticks is None else ticks,
        "url": url,
        "model": "m",
    }
    path.write_text(json.dumps(state))
    return path


@contextmanager
def stand_in_server(
    cwd: Path,
    *,
    ignore_term: bool = False,
    slow_exit: bool = False,
    grandchild: bool = False,
    group: str = "session",
) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """A running ``python -m llama_cpp.server`` stand-in with ``cwd`` as its working folder.

    ``group`` is ``"session"`` (its own session and group, as a start makes
    it), ``"group"`` (its own group in this session) or ``"inherit"`` (this
    process's group). Yields the process once its signal handling is set up,
    with its grandchild's pid (0 without one); both are killed afterwards if
    a test left them running.
    """
    package = Path(tempfile.mkdtemp(prefix="stand-in-"))
    server = package / "llama_cpp" / "server"
    server.mkdir(parents=True)
    (package / "llama_cpp" / "__init__.py").write_text("")
    (server / "__init__.py").write_text("")
    (server / "__main__.py").write_text(_STAND_IN)
    argv = [
        sys.executable,
        "-m",
        SERVER_MODULE,
        "ignore" if ignore_term else "slow" if slow_exit else "default",
        "grandchild" if grandchild else "alone",
    ]
    process = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(package)},
        start_new_session=group == "session",
        process_group=0 if group == "group" else None,
    )
    assert process.stdout is not None
    grandchild_pid = 0
    try:
        grandchild_pid = int(process.stdout.readline())
        yield process, grandchild_pid
    finally:
        process.kill()
        process.wait()
        process.stdout.close()
        if grandchild_pid and running(grandchild_pid):
            os.kill(grandchild_pid, signal.SIGKILL)
        shutil.rmtree(package, ignore_errors=True)
