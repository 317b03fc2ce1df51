"""The local llama.cpp server (synthdeid.llm.server and ``synthdeid serve-llm``).

Refusals, stale records and stopping run everywhere: stopping is tried on
real stand-in ``python -m llama_cpp.server`` processes
(:mod:`tests.serve_llm_helpers`). The tests that start the real server need
``llama-cpp-python[server]`` (``scripts/setup-llm-server.sh``) and are skipped
without it; those that load the bundled SmolLM2 are ``slow`` (about 10 s each
to start). Hostile uses are in ``tests/test_reliability_serve_llm.py``.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from tests.serve_llm_helpers import fake_gguf, record, running, stand_in_server

from synthdeid.cli import main
from synthdeid.errors import ConfigError, InputError
from synthdeid.llm import ChatRequest, ChatResponse
from synthdeid.llm.openai_http import OpenAICompatibleBackend
from synthdeid.llm.server import (
    LOG_FILE,
    STATE_FILE,
    ServerError,
    check_loopback,
    is_server_process,
    require_server_packages,
    running_server,
    server_status,
    start_server,
    stop_server,
)


def _server_installed() -> bool:
    try:
        require_server_packages()
    except ConfigError:
        return False
    return True


needs_server = pytest.mark.skipif(
    not _server_installed(),
    reason="llama-cpp-python[server] is not installed: run scripts/setup-llm-server.sh",
)


# --- refusals before anything starts


@pytest.mark.parametrize(
    "host", ["0.0.0.0", "::", "192.168.1.5", "10.0.0.1", "example.org", "127.1"]
)
def test_a_host_that_is_not_loopback_is_refused(tmp_path: Path, host: str) -> None:
    state_dir = tmp_path / "state"
    with pytest.raises(ConfigError, match="loopback only"):
        start_server(fake_gguf(tmp_path / "m.gguf"), state_dir=state_dir, host=host)
    assert not state_dir.exists()


def test_loopback_hosts_are_accepted_and_localhost_is_pinned_to_ipv4() -> None:
    assert check_loopback("127.0.0.1") == "127.0.0.1"
    assert check_loopback("127.8.9.10") == "127.8.9.10"
    assert check_loopback("::1") == "::1"
    assert check_loopback("localhost") == "127.0.0.1"


def test_a_model_without_a_gguf_file_is_refused(tmp_path: Path) -> None:
    model_dir = tmp_path / "hf-model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text("{}")
    for model in (str(model_dir), "some-org/some-model"):
        with pytest.raises(ConfigError, match="needs a GGUF file"):
            start_server(model, state_dir=tmp_path / "state")
    assert not (tmp_path / "state").exists()


def test_missing_server_packages_name_the_setup_script(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # as if not installed
    with pytest.raises(ConfigError, match=r"llama_cpp.*run `scripts/setup-llm-server\.sh`"):
        start_server(fake_gguf(tmp_path / "m.gguf"), state_dir=tmp_path / "state")
    assert not (tmp_path / "state").exists()


def test_cli_start_on_a_public_address_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["serve-llm", "start", "--model", str(fake_gguf(tmp_path / "m.gguf"))]
    assert main([*argv, "--host", "0.0.0.0", "--state-dir", str(tmp_path / "s")]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "loopback only" in captured.err


# --- records and stopping


def test_stop_and_status_without_a_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert stop_server(tmp_path) is False
    assert server_status(tmp_path) is None
    assert main(["serve-llm", "status", "--state-dir", str(tmp_path)]) == 0
    assert main(["serve-llm", "stop", "--state-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out == ""


def test_a_stale_record_is_removed_and_its_pid_left_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    # gone, and alive but not a server (this test)
    for pid, ticks in ((gone.pid, 1), (os.getpid(), None)):
        path = record(tmp_path, pid, ticks=ticks)
        with caplog.at_level(logging.INFO, logger="synthdeid.llm.server"):
            assert stop_server(tmp_path) is False
        assert not path.exists()
        assert f"pid {pid} no longer runs llama_cpp.server" in caplog.text
        caplog.clear()
    assert running(os.getpid())


def test_a_record_that_is_not_json_is_an_input_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / STATE_FILE).write_text("{not json")
    with pytest.raises(InputError, match=rf"{STATE_FILE}: not a readable server record"):
        server_status(tmp_path)
    (tmp_path / STATE_FILE).write_text(json.dumps({"pid": "12", "url": 3}))
    with pytest.raises(InputError, match="needs pid, pid_start_ticks, url and model"):
        stop_server(tmp_path)


def test_stop_terminates_the_whole_process_group(tmp_path: Path) -> None:
    with stand_in_server(tmp_path, grandchild=True) as (server, grandchild):
        path = record(tmp_path, server.pid)
        handle = server_status(tmp_path)
        assert handle is not None
        assert is_server_process(server.pid, handle.start_ticks, tmp_path)
        assert stop_server(tmp_path) is True
        assert server.wait(timeout=5) == -signal.SIGTERM
        assert not path.exists()
        deadline = time.monotonic() + 5
        while running(grandchild) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not running(grandchild)


def test_stop_returns_once_the_server_has_ended_not_when_it_leaves_its_folder(
    tmp_path: Path,
) -> None:
    with stand_in_server(tmp_path, slow_exit=True) as (server, _):
        path = record(tmp_path, server.pid)
        started = time.monotonic()
        assert stop_server(tmp_path) is True
        assert time.monotonic() - started >= 1.0
        assert not running(server.pid)
        assert server.wait(timeout=1) == 0
        assert not path.exists()


def test_stop_kills_a_server_that_ignores_sigterm(tmp_path: Path) -> None:
    with stand_in_server(tmp_path, ignore_term=True) as (server, _):
        path = record(tmp_path, server.pid)
        started = time.monotonic()
        assert stop_server(tmp_path, grace_s=0.5) is True
        assert server.wait(timeout=5) == -signal.SIGKILL
        assert time.monotonic() - started >= 0.5
        assert not path.exists()


# --- the real server


@needs_server
def test_a_server_that_cannot_load_its_model_is_an_error_naming_the_log(tmp_path: Path) -> None:
    with pytest.raises(
        ServerError, match=r"exited with status \d+ before it was ready; see .*server\.log"
    ):
        start_server(fake_gguf(tmp_path / "broken.gguf"), state_dir=tmp_path, timeout_s=120)
    assert not (tmp_path / STATE_FILE).exists()
    assert (tmp_path / LOG_FILE).stat().st_size > 0


@pytest.mark.slow
@needs_server
def test_real_server_answers_chat_and_grammar_then_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # llama.cpp's server reads HOST and PORT from the environment; the child must not inherit them
    monkeypatch.setenv("HOST", "0.0.0.0")
    monkeypatch.setenv("PORT", "1")
    with running_server("bundled:smollm2", state_dir=tmp_path, timeout_s=120) as handle:
        assert handle.base_url.startswith("http://127.0.0.1:") and handle.base_url.endswith("/v1")
        assert handle.model == "bundled:smollm2"
        state = json.loads((tmp_path / STATE_FILE).read_text())
        assert state["pid"] == handle.pid and state["url"] == handle.base_url
        assert server_status(tmp_path) == handle

        backend = OpenAICompatibleBackend(handle.base_url, handle.model, max_retries=0)
        request = ChatRequest.of(
            None, "Name one colour.", max_tokens=8, temperature=0.0, json_mode=False
        )
        [answer] = backend.complete_many([request])
        backend.close()
        assert isinstance(answer, ChatResponse), answer
        assert answer.text.strip() and 0 < (answer.output_tokens or 0) <= 8

        with requests.Session() as http:
            http.trust_env = False
            body = {
                "model": handle.model,
                "messages": [{"role": "user", "content": "Is the sky green? Answer yes or no."}],
                "grammar": 'root ::= "yes" | "no"',
                "max_tokens": 4,
                "temperature": 0.0,
            }
            reply = http.post(f"{handle.base_url}/chat/completions", json=body, timeout=120)
        assert reply.status_code == 200
        assert reply.json()["choices"][0]["message"]["content"] in ("yes", "no")
    assert not running(handle.pid)
    assert not (tmp_path / STATE_FILE).exists()
    assert server_status(tmp_path) is None


@pytest.mark.slow
@needs_server
def test_cli_start_prints_only_the_url_and_stop_ends_the_server(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "synthdeid", "serve-llm"]
    state = ["--state-dir", str(tmp_path / "llm")]
    start = subprocess.run(
        [*command, "start", *state, "--timeout", "300"], capture_output=True, text=True, timeout=360
    )
    try:
        assert start.returncode == 0, start.stderr
        url = start.stdout.strip()
        assert start.stdout == url + "\n" and url.startswith("http://127.0.0.1:")
        pid = json.loads((tmp_path / "llm" / STATE_FILE).read_text())["pid"]
        # the start command has exited; the server keeps running on its own
        with requests.Session() as http:
            http.trust_env = False
            models = http.get(f"{url}/models", timeout=10).json()
        assert [m["id"] for m in models["data"]] == ["bundled:smollm2"]
        again = subprocess.run([*command, "start", *state], capture_output=True, text=True)
        assert again.returncode == 2 and "already runs there" in again.stderr
        status = subprocess.run([*command, "status", *state], capture_output=True, text=True)
        assert status.returncode == 0 and status.stdout == url + "\n"
    finally:
        stop = subprocess.run([*command, "stop", *state], capture_output=True, text=True)
    assert stop.returncode == 0 and stop.stdout == ""
    assert not running(pid)
    assert not (tmp_path / "llm" / STATE_FILE).exists()
