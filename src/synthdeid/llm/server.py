"""Run llama.cpp's OpenAI-compatible server as a child daemon on loopback.

The OpenAI-compatible backend (:mod:`synthdeid.llm.openai_http`) needs a
server; this module starts ``python -m llama_cpp.server`` (the package
``llama-cpp-python[server]``, installed by ``scripts/setup-llm-server.sh``) on
a GGUF model that :func:`~synthdeid.llm.models.resolve_model` names, and stops
it again. The server:

* binds a loopback address only (127.0.0.0/8, ::1 or ``localhost``): prompts
  carry masked notes and must not be reachable from other machines;
* runs detached in its own process group and session, so it outlives the
  ``synthdeid serve-llm start`` command that started it, and a stop reaches
  every process it made;
* writes its output to ``<state_dir>/server.log`` (local only: it is never
  copied into results, and this module never quotes it in errors or logs);
* is recorded in ``<state_dir>/server.json`` (pid, URL, model alias, start
  time), written atomically, which :func:`stop_server` and
  :func:`server_status` read. A record whose process no longer runs the
  server (it died, or its pid was reused) is stale and removed.

The child gets a small allowlisted environment: llama.cpp's server settings
are pydantic settings, which read variables such as ``HOST``, ``PORT``,
``API_KEY`` or ``MODEL`` from the environment, and one of those inherited by
accident could move the server off loopback.

Process checks read ``/proc``, so this module works on Linux only.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import requests

from synthdeid.artifacts import write_json_atomic
from synthdeid.errors import ConfigError, InputError, StepError
from synthdeid.llm.models import resolve_model

log = logging.getLogger(__name__)

SERVER_MODULE = "llama_cpp.server"
STATE_FILE = "server.json"
LOG_FILE = "server.log"
SETUP_SCRIPT = "scripts/setup-llm-server.sh"
# what `python -m llama_cpp.server` imports besides llama_cpp (its `server` extra)
SERVER_PACKAGES = (
    "llama_cpp",
    "uvicorn",
    "fastapi",
    "pydantic_settings",
    "sse_starlette",
    "starlette_context",
)
# the only variables the child inherits (see the module docstring)
CHILD_ENVIRONMENT = (
    "PATH",
    "HOME",
    "USER",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TMPDIR",
    "LD_LIBRARY_PATH",
    "PYTHONPATH",
    "VIRTUAL_ENV",
)
STOP_GRACE_S = 10.0
_POLL_S = 0.25
# servers this process started, by pid: polled to reap them when they exit
_STARTED: dict[int, subprocess.Popen[bytes]] = {}


class ServerError(StepError):
    """The server did not start, answer or stop as asked; the message names its log file."""


@dataclass(frozen=True)
class ServerHandle:
    """A running server: its pid (also its process group), API root and model alias."""

    pid: int
    base_url: str  # http://127.0.0.1:<port>/v1
    model: str  # the alias to send as "model" in requests
    log_path: Path
    state_dir: Path


def require_server_packages() -> None:
    """Refuse, with the command that fixes it, when the server's packages are missing.

    Uses :func:`importlib.util.find_spec`, which does not import (and so does
    not load llama.cpp's shared library) in this process.
    """
    missing = [name for name in SERVER_PACKAGES if importlib.util.find_spec(name) is None]
    if missing:
        raise ConfigError(
            f"the local LLM server needs llama-cpp-python[server], and {', '.join(missing)} "
            f"cannot be imported in {sys.executable}; run `{SETUP_SCRIPT}` to install it"
        )


def check_loopback(host: str) -> str:
    """The address to bind for ``host``: a loopback address as is, ``localhost`` as 127.0.0.1.

    Anything else is a ConfigError. ``localhost`` is pinned to IPv4 so that the
    port probed free and the address the server binds are the same.
    """
    if host == "localhost":
        return "127.0.0.1"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    if address is None or not address.is_loopback:
        raise ConfigError(
            f"the LLM server binds loopback only (127.0.0.0/8, ::1 or localhost), not {host!r}"
        )
    return host


def start_server(
    model: object,
    *,
    state_dir: Path,
    port: int = 0,
    threads: int = 1,
    n_ctx: int = 4096,
    host: str = "127.0.0.1",
    timeout_s: float = 180,
) -> ServerHandle:
    """Start the server on ``model`` and return once ``GET /v1/models`` answers 200.

    ``model`` is anything :func:`~synthdeid.llm.models.resolve_model` takes,
    or a :class:`~pathlib.Path` to a GGUF file. ``port`` 0 picks a free port.
    A server already recorded in ``state_dir`` is refused (stop it first). A
    server that dies or is not ready within ``timeout_s`` is killed and its
    record removed, and the error names the log file to read.
    """
    host = check_loopback(host)
    ref = resolve_model(str(model) if isinstance(model, Path) else model)
    gguf = ref.gguf_path
    if gguf is None:
        raise ConfigError(
            f"model {ref.name!r} is a {ref.kind} model; the llama.cpp server needs a GGUF file "
            "(bundled:<name> or a path to a .gguf file)"
        )
    require_server_packages()
    if port < 0 or port > 65535 or threads < 1 or n_ctx < 1 or timeout_s <= 0:
        raise ConfigError(
            f"server settings out of range: port {port} (0-65535), threads {threads} (>= 1), "
            f"context {n_ctx} (>= 1), timeout {timeout_s} s (> 0)"
        )
    state_dir = Path(state_dir)
    state_dir.mkdir(parents=True, exist_ok=True)
    running = server_status(state_dir)
    if running is not None:
        raise ConfigError(
            f"{state_dir}: a server already runs there (pid {running.pid}, {running.base_url}); "
            f"stop it first with `synthdeid serve-llm stop --state-dir {state_dir}`"
        )
    port = port or free_port(host)
    base_url = f"http://{_url_host(host)}:{port}/v1"
    command = [
        sys.executable,
        "-m",
        SERVER_MODULE,
        "--model",
        str(gguf.resolve()),  # absolute: the server runs in state_dir
        "--model_alias",
        ref.name,
        "--host",
        host,
        "--port",
        str(port),
        "--n_threads",
        str(threads),
        "--n_threads_batch",
        str(threads),
        "--n_ctx",
        str(n_ctx),
        "--verbose",
        "false",
    ]
    log_path = state_dir / LOG_FILE
    started = time.monotonic()
    with open(log_path, "wb") as log_file:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            cwd=state_dir,
            env=_child_environment(os.environ),
            start_new_session=True,  # own session and process group: detached, stoppable as one
        )
    _STARTED[process.pid] = process
    handle = ServerHandle(process.pid, base_url, ref.name, log_path, state_dir)
    try:
        _write_state(handle)
        _wait_until_ready(process, handle, timeout_s)
    except BaseException:  # a failed start, also Ctrl-C or SIGTERM: leave nothing running
        _kill_group(process.pid, signal.SIGKILL)
        process.wait()
        _STARTED.pop(process.pid, None)
        (state_dir / STATE_FILE).unlink(missing_ok=True)
        raise
    log.info(
        "LLM server ready in %.1f s: pid %d, %s, model %s (%s), log %s",
        time.monotonic() - started,
        handle.pid,
        handle.base_url,
        handle.model,
        gguf.name,
        log_path,
    )
    return handle


def stop_server(state_dir: Path, *, grace_s: float = STOP_GRACE_S) -> bool:
    """Stop the server recorded in ``state_dir``; False when none was running.

    SIGTERM goes to the server's process group, SIGKILL after ``grace_s``
    seconds if it is still there. The record is removed either way; a stale
    one (its pid no longer runs the server) is removed with a log line.
    """
    handle = server_status(state_dir)
    if handle is None:
        return False
    _kill_group(handle.pid, signal.SIGTERM)
    if not _wait_for_exit(handle.pid, grace_s):
        log.warning("LLM server pid %d did not stop within %.0f s; killing it", handle.pid, grace_s)
        _kill_group(handle.pid, signal.SIGKILL)
        if not _wait_for_exit(handle.pid, 5.0):
            raise ServerError(
                f"LLM server pid {handle.pid} survived SIGKILL; see {handle.log_path}"
            )
    (Path(state_dir) / STATE_FILE).unlink(missing_ok=True)
    log.info("LLM server pid %d stopped", handle.pid)
    return True


def server_status(state_dir: Path) -> ServerHandle | None:
    """The server recorded in ``state_dir`` if it still runs, else None (stale record removed)."""
    state_dir = Path(state_dir)
    state_path = state_dir / STATE_FILE
    state = _read_state(state_path)
    if state is None:
        return None
    pid = state["pid"]
    if not is_server_process(pid):
        state_path.unlink(missing_ok=True)
        log.info("removed stale %s: pid %d no longer runs %s", state_path, pid, SERVER_MODULE)
        return None
    return ServerHandle(pid, state["url"], state["model"], state_dir / LOG_FILE, state_dir)


@contextmanager
def running_server(model: object, *, state_dir: Path, **settings: Any) -> Iterator[ServerHandle]:
    """A started server for the ``with`` block, stopped after it (tests and scripts)."""
    handle = start_server(model, state_dir=state_dir, **settings)
    try:
        yield handle
    finally:
        stop_server(handle.state_dir)


def free_port(host: str) -> int:
    """A TCP port that is free on ``host`` now (another process may take it before the server)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def is_server_process(pid: int) -> bool:
    """Whether ``pid`` is a live (not zombie) process running ``python -m llama_cpp.server``.

    A server this process started is polled (and so reaped once it exits:
    a stopped server does not linger as a zombie of a long-lived caller).
    """
    child = _STARTED.get(pid)
    if child is not None and child.poll() is not None:
        del _STARTED[pid]
        return False
    proc = Path("/proc") / str(pid)
    try:
        cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        stat = (proc / "stat").read_text(encoding="ascii", errors="replace")
    except OSError:  # gone, or not ours to read
        return False
    state = stat.rpartition(")")[2].split()[:1]
    return state != ["Z"] and SERVER_MODULE.encode() in cmdline


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _child_environment(environ: Mapping[str, str]) -> dict[str, str]:
    return {name: environ[name] for name in CHILD_ENVIRONMENT if name in environ}


def _write_state(handle: ServerHandle) -> None:
    state = {
        "pid": handle.pid,
        "url": handle.base_url,
        "model": handle.model,
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "log": LOG_FILE,
    }
    write_json_atomic(state, handle.state_dir / STATE_FILE)


def _read_state(path: Path) -> dict[str, Any] | None:
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise InputError(
            path, None, f"not a readable server record ({type(exc).__name__})", _STATE_HINT
        ) from None
    if not (
        isinstance(state, dict)
        and isinstance(state.get("pid"), int)
        and state["pid"] > 0
        and isinstance(state.get("url"), str)
        and isinstance(state.get("model"), str)
    ):
        raise InputError(path, None, "a server record needs pid, url and model", _STATE_HINT)
    return state


_STATE_HINT = "remove it if no server runs from this folder"


def _wait_until_ready(
    process: subprocess.Popen[bytes], handle: ServerHandle, timeout_s: float
) -> None:
    deadline = time.monotonic() + timeout_s
    with requests.Session() as http:
        http.trust_env = False  # loopback: never through a proxy from the environment
        while True:
            code = process.poll()
            if code is not None:
                raise ServerError(
                    f"the LLM server exited with status {code} before it was ready; "
                    f"see {handle.log_path}"
                )
            try:
                if http.get(f"{handle.base_url}/models", timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                pass  # not listening yet
            if time.monotonic() >= deadline:
                raise ServerError(
                    f"the LLM server was not ready within {timeout_s:.0f} s and was killed; "
                    f"see {handle.log_path}"
                )
            time.sleep(_POLL_S)


def _kill_group(pid: int, sig: signal.Signals) -> None:
    """Send ``sig`` to the process group ``pid`` leads (to ``pid`` alone if it leads none)."""
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except ProcessLookupError:
        pass  # already gone


def _wait_for_exit(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while is_server_process(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(_POLL_S / 2)
    return True
