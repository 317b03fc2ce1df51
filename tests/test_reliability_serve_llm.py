"""Hostile and careless uses of ``synthdeid serve-llm``, against real processes and sockets.

A busy port, records that name some other process (a look-alike command
line, a server of another state folder, a reused pid, a group the start did
not make), a record whose URL leaves loopback, symlinked state files and
scoped IPv6 hosts. Every refusal is exit status 2 with one line on stderr
and no traceback; processes the command did not start are left running and
files it does not own keep their bytes. Each decision is made before a model
loads, so none of these tests needs llama-cpp-python.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests
from tests.serve_llm_helpers import fake_gguf, record, running, stand_in_server, start_ticks

from synthdeid.cli import main
from synthdeid.errors import ConfigError
from synthdeid.llm.server import (
    LOG_FILE,
    STATE_FILE,
    ServerError,
    ServerHandle,
    _wait_until_ready,
    check_loopback,
    stop_server,
)


def refusal_line(capsys: pytest.CaptureFixture[str]) -> str:
    """The one line a refusal wrote on stderr (nothing on stdout, no traceback)."""
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in captured.err, captured.err
    return lines[0]


class _Answers200(BaseHTTPRequestHandler):
    """Answers every GET with 200 and a models list, as an OpenAI-compatible server would."""

    def do_GET(self) -> None:
        body = b'{"object": "list", "data": [{"id": "someone-else"}]}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def foreign_listener() -> Iterator[int]:
    """An HTTP server on a loopback port that no ``serve-llm start`` made; yields its port."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Answers200)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def answers(port: int) -> bool:
    with requests.Session() as http:
        http.trust_env = False
        return http.get(f"http://127.0.0.1:{port}/v1/models", timeout=5).status_code == 200


# --- a port another process listens on


def test_start_on_a_port_another_process_listens_on_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state_dir = tmp_path / "state"
    model = str(fake_gguf(tmp_path / "m.gguf"))
    with foreign_listener() as port:
        argv = ["serve-llm", "start", "--model", model, "--port", str(port)]
        assert main([*argv, "--state-dir", str(state_dir)]) == 2
        line = refusal_line(capsys)
        assert f"port {port}" in line and "in use" in line, line
        assert answers(port)
    assert not state_dir.exists()


def test_readiness_answered_by_another_process_is_a_failed_start(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with foreign_listener() as port:
            handle = ServerHandle(
                pid=child.pid,
                base_url=f"http://127.0.0.1:{port}/v1",
                model="m",
                log_path=tmp_path / LOG_FILE,
                state_dir=tmp_path,
                start_ticks=start_ticks(child.pid),
            )
            started = time.monotonic()
            with pytest.raises(ServerError, match=rf"port {port} .*another process"):
                _wait_until_ready(child, handle, timeout_s=30)
            assert time.monotonic() - started < 10  # refused at once, not at the timeout
            assert answers(port)
    finally:
        child.kill()
        child.wait()


def test_listens_on_tells_the_process_that_holds_a_port() -> None:
    from synthdeid.llm.server import listens_on

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with foreign_listener() as port:
            assert listens_on(os.getpid(), port)
            assert not listens_on(child.pid, port)
            assert not listens_on(os.getpid(), port + 1 if port < 65535 else port - 1)
    finally:
        child.kill()
        child.wait()


# --- records that name some other process


def test_stop_leaves_a_process_that_only_names_the_module_alone(tmp_path: Path) -> None:
    (tmp_path / "llama_cpp.server").write_text("")
    tail = subprocess.Popen(["tail", "-f", "llama_cpp.server"], cwd=tmp_path)
    try:
        path = record(tmp_path, tail.pid)
        assert stop_server(tmp_path, grace_s=0.5) is False
        assert running(tail.pid) and tail.poll() is None
        assert not path.exists()  # stale: the pid does not run a server of this folder
    finally:
        tail.kill()
        tail.wait()


def test_stop_leaves_a_server_of_another_state_folder_alone(tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    with stand_in_server(other, grandchild=True) as (server, grandchild):
        record(tmp_path / "mine", server.pid)  # its record, copied into this folder
        assert stop_server(tmp_path / "mine", grace_s=0.5) is False
        assert running(server.pid) and running(grandchild)


def test_stop_leaves_a_reused_pid_alone(tmp_path: Path) -> None:
    with stand_in_server(tmp_path) as (server, _):
        record(tmp_path, server.pid, ticks=start_ticks(server.pid) - 1)
        assert stop_server(tmp_path, grace_s=0.5) is False
        assert running(server.pid)


def test_stop_signals_only_the_server_when_the_start_did_not_make_its_group(
    tmp_path: Path,
) -> None:
    # the recorded process leads a process group, but not a session as a start makes it
    with stand_in_server(tmp_path, grandchild=True, group="group") as (server, grandchild):
        record(tmp_path, server.pid)
        assert stop_server(tmp_path, grace_s=2) is True
        assert server.wait(timeout=5) == -signal.SIGTERM
        time.sleep(0.3)
        assert running(grandchild)


@pytest.mark.parametrize(
    "url",
    [
        "http://192.0.2.7:8000/v1",
        "http://example.org:80/v1",
        "http://127.0.0.1@192.0.2.7:80/v1",
        "https://127.0.0.1:9/v1",
        "http://[::1%25lo]:9/v1",
        "http://127.0.0.1:9/v1?x=1",
    ],
)
def test_status_refuses_a_record_whose_url_is_not_the_loopback_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], url: str
) -> None:
    with stand_in_server(tmp_path) as (server, _):
        path = record(tmp_path, server.pid, url=url)
        before = path.read_bytes()
        assert main(["serve-llm", "status", "--state-dir", str(tmp_path)]) == 2
        line = refusal_line(capsys)
        assert STATE_FILE in line and "loopback" in line and url not in line, line
        assert running(server.pid) and path.read_bytes() == before


# --- symlinked state files


@pytest.mark.parametrize("name", [LOG_FILE, STATE_FILE])
def test_start_refuses_a_symlinked_state_file_and_leaves_its_target(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"precious bytes\n")
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    (state_dir / name).symlink_to(victim)
    argv = ["serve-llm", "start", "--model", str(fake_gguf(tmp_path / "m.gguf"))]
    assert main([*argv, "--state-dir", str(state_dir)]) == 2
    line = refusal_line(capsys)
    assert name in line and "symbolic link" in line, line
    assert victim.read_bytes() == b"precious bytes\n"
    assert sorted(p.name for p in state_dir.iterdir()) == [name]
    for action in ("status", "stop"):
        assert main(["serve-llm", action, "--state-dir", str(state_dir)]) == (
            2 if name == STATE_FILE else 0
        )
        capsys.readouterr()
    assert victim.read_bytes() == b"precious bytes\n"


# --- scoped hosts


@pytest.mark.parametrize("host", ["::1%lo", "::1%1", "fe80::1%lo", "127.0.0.1%lo"])
def test_a_scoped_host_is_refused(host: str) -> None:
    with pytest.raises(ConfigError, match="loopback only"):
        check_loopback(host)


def test_loopback_spellings_become_the_plain_address() -> None:
    assert check_loopback("0:0:0:0:0:0:0:1") == "::1"


def test_cli_start_on_a_scoped_host_is_one_line_and_leaves_no_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state_dir = tmp_path / "a" / "state"
    argv = ["serve-llm", "start", "--model", str(fake_gguf(tmp_path / "m.gguf"))]
    assert main([*argv, "--host", "::1%lo", "--state-dir", str(state_dir)]) == 2
    line = refusal_line(capsys)
    assert "loopback only" in line and "::1%lo" in line, line
    assert not (tmp_path / "a").exists()
