"""Run llama.cpp's OpenAI-compatible server as a child daemon on loopback.

The OpenAI-compatible backend (:mod:`synthdeid.llm.openai_http`) needs a
server; this module starts ``python -m llama_cpp.server`` (the package
``llama-cpp-python[server]``, installed by ``scripts/setup-llm-server.sh``) on
a GGUF model that :func:`~synthdeid.llm.models.resolve_model` names, and stops
it again. The server:

* binds a plain loopback address only (127.0.0.0/8, ::1 without a zone, or
  ``localhost``): prompts carry masked notes and must not be reachable from
  other machines;
* is ready only when ``GET /v1/models`` answers and the port is held by the
  process the start made (its listening socket, read from ``/proc``): a port
  another process listens on is refused before the start, and one taken
  while the server loads fails the start instead of naming that process;
* runs detached in its own session and process group, so it outlives the
  ``synthdeid serve-llm start`` command that started it, and a stop reaches
  every process it made;
* writes its output to ``<state_dir>/server.log`` (local only: it is never
  copied into results, and this module never quotes it in errors or logs);
* is recorded in ``<state_dir>/server.json`` (pid, the pid's start time,
  URL, model alias, start date), written atomically, which
  :func:`stop_server` and :func:`server_status` read.

A record names the server only while its pid is alive, started at the
recorded time (so it is not a reused pid), runs ``python -m
llama_cpp.server`` and works in the record's state folder (where a start
runs it); otherwise it is stale and removed, and nothing is signalled. A
stop signals the whole process group only when the server still leads the
session and group its start made, else the server alone. A record whose URL
is not the loopback API root a start writes is refused. The state files are
never followed through a symbolic link: a linked (or otherwise not plain)
``server.json`` or ``server.log`` is refused, the log is created anew, and
the record's temporary file is opened without following links.

The child gets a small allowlisted environment: llama.cpp's server settings
are pydantic settings, which read variables such as ``HOST``, ``PORT``,
``API_KEY`` or ``MODEL`` from the environment, and one of those inherited by
accident could move the server off loopback.

Process checks read ``/proc``, so this module works on Linux only.
"""

from __future__ import annotations

import errno
import importlib.util
import ipaddress
import json
import logging
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import requests

from synthdeid.artifacts import make_parents, remove_empty_folders, write_json_atomic
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
_TCP_LISTEN = "0A"  # the LISTEN state in /proc/<pid>/net/tcp
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
    start_ticks: int  # when the pid started (clock ticks after boot): tells a reused pid


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
    """The address to bind for ``host``: a loopback address in its plain form, ``localhost`` as 127.0.0.1.

    Anything else is a ConfigError, an IPv6 address with a zone (``::1%lo``)
    included. ``localhost`` is pinned to IPv4 so that the port probed free and
    the address the server binds are the same.
    """
    if host == "localhost":
        return "127.0.0.1"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    if address is None or not address.is_loopback or getattr(address, "scope_id", None):
        raise ConfigError(
            "the LLM server binds loopback only (127.0.0.0/8, ::1 without a zone, or localhost), "
            f"not {host!r}"
        )
    return str(address)


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
    or a :class:`~pathlib.Path` to a GGUF file. ``port`` 0 picks a free port;
    a given port another process listens on is refused. A server already
    recorded in ``state_dir`` is refused (stop it first), and so is a state
    file that is a symbolic link. Everything is checked before the state
    folder is made. A server that dies, or is not ready within ``timeout_s``,
    or whose port answers from another process, is killed and its record
    removed (its log too when empty, and the folders the start made when
    then empty), and the error names the log file to read.
    """
    host = check_loopback(host)
    ref = resolve_model(str(model) if isinstance(model, Path) else model)
    gguf = ref.gguf_path
    if gguf is None:
        raise ConfigError(
            f"model {ref.name!r} is a {ref.kind} model; the llama.cpp server needs a GGUF file "
            "(bundled:<name> or a path to a .gguf file)"
        )
    if port < 0 or port > 65535 or threads < 1 or n_ctx < 1 or timeout_s <= 0:
        raise ConfigError(
            f"server settings out of range: port {port} (0-65535), threads {threads} (>= 1), "
            f"context {n_ctx} (>= 1), timeout {timeout_s} s (> 0)"
        )
    state_dir = Path(state_dir)
    _check_state_file(state_dir / LOG_FILE)  # and server_status checks the record
    running = server_status(state_dir)
    if running is not None:
        raise ConfigError(
            f"{state_dir}: a server already runs there (pid {running.pid}, {running.base_url}); "
            f"stop it first with `synthdeid serve-llm stop --state-dir {state_dir}`"
        )
    port = free_port(host, port)
    require_server_packages()
    base_url = _base_url(host, port)
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
    created = make_parents(log_path)
    process: subprocess.Popen[bytes] | None = None
    try:
        log_fd = _create_log(log_path)
        try:
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log_fd,
                stderr=subprocess.STDOUT,
                cwd=state_dir,
                env=_child_environment(os.environ),
                start_new_session=True,  # own session and process group: detached, stoppable
            )
        finally:
            os.close(log_fd)
        _STARTED[process.pid] = process
        ticks = _start_ticks(process.pid)
        if ticks is None:
            raise ServerError(f"the LLM server exited at once; {_see_log(log_path)}")
        handle = ServerHandle(process.pid, base_url, ref.name, log_path, state_dir, ticks)
        _write_state(handle)
        _wait_until_ready(process, handle, timeout_s)
    except BaseException:  # a failed start, also Ctrl-C or SIGTERM: leave nothing running
        if process is not None:
            _kill_started(process)
        (state_dir / STATE_FILE).unlink(missing_ok=True)
        if not _log_written(log_path):
            log_path.unlink(missing_ok=True)
        remove_empty_folders(created)
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

    SIGTERM goes to the server's process group (to the server alone when it
    no longer leads the session its start made), SIGKILL after ``grace_s``
    seconds if it is still there; each is sent only after checking that the
    pid is still the recorded server. It returns once that process has ended
    (gone or a zombie), not merely once it stops looking like the server: an
    exiting process releases its memory, command line and working folder
    before it ends, and may still hold its port then. The record is removed
    either way; a stale one (its pid no longer runs this folder's server) is
    removed with a log line, and nothing is signalled.
    """
    handle = server_status(state_dir)
    if handle is None:
        return False
    _signal_server(handle, signal.SIGTERM)
    if not _wait_for_exit(handle, grace_s):
        log.warning("LLM server pid %d did not stop within %.0f s; killing it", handle.pid, grace_s)
        _signal_server(handle, signal.SIGKILL)
        if not _wait_for_exit(handle, 5.0):
            raise ServerError(
                f"LLM server pid {handle.pid} survived SIGKILL; see {handle.log_path}"
            )
    (Path(state_dir) / STATE_FILE).unlink(missing_ok=True)
    log.info("LLM server pid %d stopped", handle.pid)
    return True


def server_status(state_dir: Path) -> ServerHandle | None:
    """The server recorded in ``state_dir`` if it still runs, else None (stale record removed).

    A record that is not a plain file, or whose URL is not the loopback API
    root a start writes, is an InputError; see the module docstring for when
    a record is stale.
    """
    state_dir = Path(state_dir)
    state_path = state_dir / STATE_FILE
    state = _read_state(state_path)
    if state is None:
        return None
    pid = state["pid"]
    handle = ServerHandle(
        pid, state["url"], state["model"], state_dir / LOG_FILE, state_dir, state["pid_start_ticks"]
    )
    if not is_server_process(pid, handle.start_ticks, state_dir):
        state_path.unlink(missing_ok=True)
        log.info(
            "removed stale %s: pid %d no longer runs %s started from this folder",
            state_path,
            pid,
            SERVER_MODULE,
        )
        return None
    return handle


@contextmanager
def running_server(model: object, *, state_dir: Path, **settings: Any) -> Iterator[ServerHandle]:
    """A started server for the ``with`` block, stopped after it (tests and scripts)."""
    handle = start_server(model, state_dir=state_dir, **settings)
    try:
        yield handle
    finally:
        stop_server(handle.state_dir)


def free_port(host: str, port: int = 0) -> int:
    """``port`` if it is free on ``host`` now, else a ConfigError; with 0, a free port.

    Probed as the server binds (``SO_REUSEADDR``: a port a closed connection
    still waits on counts as free). Another process may take the port before
    the server binds it; the start then fails (see :func:`start_server`).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            problem = "is in use" if exc.errno == errno.EADDRINUSE else "cannot be bound"
            raise ConfigError(
                f"port {port} on {host} {problem} ({exc.strerror}); "
                "choose another --port, or 0 for a free one"
            ) from None
        return int(probe.getsockname()[1])


def is_server_process(pid: int, start_ticks: int, state_dir: Path) -> bool:
    """Whether ``pid`` is still the server a start from ``state_dir`` made.

    That is: alive (not a zombie), started at ``start_ticks`` (so not a reused
    pid), running ``<python> -m llama_cpp.server`` (not merely naming it) and
    working in ``state_dir`` (a server of another state folder works in its
    own). A server this process started is polled (and so reaped once it
    exits: a stopped server does not linger as a zombie of a long-lived caller).
    """
    if not _process_alive(pid, start_ticks):
        return False
    proc = Path("/proc") / str(pid)
    try:
        cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        in_state_dir = os.path.samefile(proc / "cwd", state_dir)
    except OSError:  # gone, or not ours to read
        return False
    return cmdline[1:3] == [b"-m", SERVER_MODULE.encode()] and in_state_dir


def _process_alive(pid: int, start_ticks: int) -> bool:
    """Whether the process ``pid`` started at ``start_ticks`` has not ended yet.

    Ended: gone, a zombie (or dead), or the pid reused by a later process. A
    process this one started is polled, and so reaped once it ends.
    """
    child = _STARTED.get(pid)
    if child is not None and child.poll() is not None:
        del _STARTED[pid]
        return False
    try:
        fields = _stat_fields(pid)
        return fields[0] not in ("Z", "X") and int(fields[19]) == start_ticks
    except (OSError, IndexError, ValueError):
        return False


def listens_on(pid: int, port: int) -> bool:
    """Whether process ``pid`` holds a listening TCP socket on ``port`` (any address).

    Matches the socket inodes among its open files (``/proc/<pid>/fd``) with
    the listening sockets of its network namespace (``/proc/<pid>/net/tcp``
    and ``tcp6``); False when they cannot be read.
    """
    proc = Path("/proc") / str(pid)
    try:
        descriptors = os.listdir(proc / "fd")
    except OSError:
        return False
    sockets = set()
    for descriptor in descriptors:
        try:
            target = os.readlink(proc / "fd" / descriptor)
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            sockets.add(target[len("socket:[") : -1])
    for table in ("tcp", "tcp6"):
        try:
            rows = (proc / "net" / table).read_text(encoding="ascii").splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            # sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
            fields = row.split()
            if (
                len(fields) > 9
                and fields[3] == _TCP_LISTEN
                and fields[9] in sockets
                and int(fields[1].rpartition(":")[2], 16) == port
            ):
                return True
    return False


def _stat_fields(pid: int) -> list[str]:
    """``/proc/<pid>/stat`` after the command name: [0] the state (field 3), [19] the start time (field 22)."""
    stat_line = (Path("/proc") / str(pid) / "stat").read_text(encoding="ascii", errors="replace")
    return stat_line.rpartition(")")[2].split()


def _start_ticks(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks after boot; None when it is gone."""
    try:
        return int(_stat_fields(pid)[19])
    except (OSError, IndexError, ValueError):
        return None


def _base_url(host: str, port: int) -> str:
    """The API root a start records for the bound ``host`` and ``port``."""
    return f"http://{f'[{host}]' if ':' in host else host}:{port}/v1"


def _is_loopback_api_root(url: str) -> bool:
    """Whether ``url`` is an API root a start writes: ``http://<plain loopback address>:<port>/v1``."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
        return (
            host is not None
            and port is not None
            and check_loopback(host) == host
            and _base_url(host, port) == url
        )
    except ValueError:  # a malformed URL, or a host that is not loopback (ConfigError)
        return False


def _child_environment(environ: Mapping[str, str]) -> dict[str, str]:
    return {name: environ[name] for name in CHILD_ENVIRONMENT if name in environ}


def _write_state(handle: ServerHandle) -> None:
    state = {
        "pid": handle.pid,
        "pid_start_ticks": handle.start_ticks,
        "url": handle.base_url,
        "model": handle.model,
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "log": LOG_FILE,
    }
    write_json_atomic(state, handle.state_dir / STATE_FILE)


def _read_state(path: Path) -> dict[str, Any] | None:
    if not _check_state_file(path):
        return None
    try:
        # no-follow: a link put in its place after the check is refused (ELOOP), not read;
        # non-blocking: a FIFO there does not hang the read
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as record_file:
            state = json.loads(record_file.read().decode("utf-8"))
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
        and isinstance(state.get("pid_start_ticks"), int)
        and isinstance(state.get("url"), str)
        and isinstance(state.get("model"), str)
    ):
        raise InputError(
            path, None, "a server record needs pid, pid_start_ticks, url and model", _STATE_HINT
        )
    if not _is_loopback_api_root(state["url"]):
        raise InputError(
            path,
            None,
            "its url is not the loopback API root a start records (http://<loopback>:<port>/v1)",
            _STATE_HINT,
        )
    return state


_STATE_HINT = "remove it if no server runs from this folder"


def _check_state_file(path: Path) -> bool:
    """Whether state file ``path`` exists; an InputError when it is a link or not a plain file."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(mode):
        problem = "is a symbolic link"
    elif not stat.S_ISREG(mode):
        problem = "is not a regular file"
    else:
        return True
    raise InputError(
        path, None, f"{problem}; the server's state files must be plain files", "remove it"
    )


def _see_log(path: Path) -> str:
    """Where to read why a start failed: its log, or that it wrote none (an empty one is removed)."""
    return f"see {path}" if _log_written(path) else f"it wrote nothing to {path.name}"


def _log_written(path: Path) -> bool:
    """Whether the server wrote to its log at ``path`` (a plain file, not empty)."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_size > 0


def _create_log(path: Path) -> int:
    """A new, empty log file at ``path``, open for writing; the old log (a plain file) is removed.

    Created exclusively and without following links, so a link or a file put
    in its place meanwhile is refused rather than written through.
    """
    path.unlink(missing_ok=True)
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)


def _wait_until_ready(
    process: subprocess.Popen[bytes], handle: ServerHandle, timeout_s: float
) -> None:
    """Return once the server answers ``GET /v1/models`` with 200 from a port it holds itself.

    Anything that answers while the port is not the child's is another
    process: a ServerError at once, rather than a start that names it.
    """
    port = urlsplit(handle.base_url).port
    deadline = time.monotonic() + timeout_s
    with requests.Session() as http:
        http.trust_env = False  # loopback: never through a proxy from the environment
        while True:
            code = process.poll()
            if code is not None:
                raise ServerError(
                    f"the LLM server exited with status {code} before it was ready; "
                    f"{_see_log(handle.log_path)}"
                )
            try:
                status: int | None = http.get(f"{handle.base_url}/models", timeout=2).status_code
            except requests.RequestException:
                status = None  # not listening yet
            if status is not None:
                if port is None or not listens_on(process.pid, port):
                    raise ServerError(
                        f"port {port} on loopback answers, but not from the LLM server this "
                        f"start made: another process listens there; {_see_log(handle.log_path)}"
                    )
                if status == 200:
                    return
            if time.monotonic() >= deadline:
                raise ServerError(
                    f"the LLM server was not ready within {timeout_s:.0f} s and was killed; "
                    f"{_see_log(handle.log_path)}"
                )
            time.sleep(_POLL_S)


def _signal_server(handle: ServerHandle, sig: signal.Signals) -> None:
    """Send ``sig`` to the recorded server's process, checked to be it just before.

    ``handle`` comes from :func:`server_status`, which checked that it names
    the server; here the pid is checked to be that same process still (its
    start time), since a server that is exiting no longer shows its command
    line and folder. To its whole process group when it still leads the
    session and group its start made (its pid is its session and group id),
    else to it alone; nothing when the process has ended.
    """
    pid = handle.pid
    if not _process_alive(pid, handle.start_ticks):
        return
    try:
        if os.getsid(pid) == pid and os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except ProcessLookupError:
        pass  # already gone


def _kill_started(process: subprocess.Popen[bytes]) -> None:
    """Kill the session a start made, with every process in it, and reap the server."""
    if process.poll() is None:  # not reaped, so its pid and group are still the ones made
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    _STARTED.pop(process.pid, None)


def _wait_for_exit(handle: ServerHandle, timeout_s: float) -> bool:
    """Whether the recorded process ended within ``timeout_s`` seconds."""
    deadline = time.monotonic() + timeout_s
    while _process_alive(handle.pid, handle.start_ticks):
        if time.monotonic() >= deadline:
            return False
        time.sleep(_POLL_S / 2)
    return True
