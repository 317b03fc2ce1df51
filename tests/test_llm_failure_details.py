"""Failure reasons and log lines of the LLM clients carry no text the server or the
model sent back: a server's error body may echo the prompt, and so the note's PHI.

Every name and note here is invented."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

import llm_server
from llm_server import ScriptedChatServer, last_user_message
from lm_helpers import tiny_causal_lm_dir
from ner_helpers import note_from_pieces
from synthdeid.cli import main
from synthdeid.llm import ChatFailure, ChatRequest, OpenAICompatibleBackend
from synthdeid.llm.transformers_local import TransformersBackend
from synthdeid.notes import write_notes

chat_server = llm_server.chat_server  # the fixture

FAKE_NAME = "Philomena Drazkowski"
PROMPT = f"Patient {FAKE_NAME}, seen for chest pain. Rewrite this note."


def error_body(request_json: Any) -> dict[str, Any]:
    """An OpenAI-shaped error whose message quotes the prompt, as some servers do."""
    quoted = last_user_message(request_json)
    return {"error": {"message": f"cannot process: {quoted}", "type": "invalid_request_error"}}


def sent_length(body: dict[str, Any] | str) -> int:
    """The length of the body as the scripted server sends it."""
    return len(body if isinstance(body, str) else json.dumps(body))


def leaked(text: str) -> bool:
    lowered = text.casefold()
    return any(word.casefold() in lowered for word in FAKE_NAME.split())


def all_log_text(caplog: pytest.LogCaptureFixture) -> str:
    """Every captured record: message, arguments and any exception text."""
    parts = []
    for record in caplog.records:
        parts.append(record.getMessage())
        parts.append(repr(record.args))
        if record.exc_info and record.exc_info[1] is not None:
            parts.append(repr(record.exc_info[1]))
    return "\n".join(parts)


@pytest.mark.parametrize(
    ("status", "retried", "error_class"),
    [
        (400, False, "BadRequestError"),
        (401, False, "AuthenticationError"),
        (404, False, "NotFoundError"),
        (422, False, "UnprocessableEntityError"),
        (418, False, "APIStatusError"),
        (429, True, "RateLimitError"),
        (500, True, "InternalServerError"),
        (503, True, "InternalServerError"),
    ],
)
def test_error_bodies_stay_out_of_reasons_and_logs(
    chat_server: ScriptedChatServer,
    caplog: pytest.LogCaptureFixture,
    status: int,
    retried: bool,
    error_class: str,
) -> None:
    caplog.set_level(logging.DEBUG)
    bodies: list[int] = []

    def handler(request_json: Any) -> tuple[int, Any, dict[str, str]]:
        body = error_body(request_json)
        bodies.append(sent_length(body))
        return status, body, {}

    chat_server.handler = handler
    client = OpenAICompatibleBackend(chat_server.url, "m", max_retries=1, backoff_s=0.0)
    [result] = client.complete_many([ChatRequest.of(None, PROMPT)])
    assert isinstance(result, ChatFailure)
    expected = f"HTTP {status} ({error_class}), body {bodies[-1]} chars"
    assert result.reason == (f"{expected} after 2 attempts" if retried else expected)
    assert chat_server.count == (2 if retried else 1)
    assert not leaked(result.reason)
    assert not leaked(all_log_text(caplog))
    if retried:
        assert f"HTTP {status} ({error_class})" in caplog.text  # the retry was logged


@pytest.mark.parametrize(
    ("status", "body", "reason"),
    [
        (307, f"moved: {PROMPT}", "HTTP 307 (Redirect), body {n} chars: redirect not followed"),
        (
            200,
            f"<html>proxy error for {PROMPT}</html>",
            "malformed response: body is not JSON (HTTP 200, body {n} chars)",
        ),
        (500, f"internal error while reading {PROMPT}", "HTTP 500 (InternalServerError), body {n} chars after 1 attempt"),
    ],
    ids=["redirect", "not-json", "server-error"],
)  # fmt: skip
def test_plain_text_bodies_stay_out_of_reasons_and_logs(
    chat_server: ScriptedChatServer,
    caplog: pytest.LogCaptureFixture,
    status: int,
    body: str,
    reason: str,
) -> None:
    caplog.set_level(logging.DEBUG)
    chat_server.push(status, body)
    client = OpenAICompatibleBackend(chat_server.url, "m", max_retries=0)
    [result] = client.complete_many([ChatRequest.of(None, PROMPT)])
    assert result == ChatFailure(reason.format(n=len(body)))
    assert not leaked(result.reason) and not leaked(all_log_text(caplog))


def test_generation_errors_are_reported_by_class_only(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A generation error whose message quotes the prompt (injected into a real model)."""
    caplog.set_level(logging.DEBUG)
    local = TransformersBackend(str(tiny_causal_lm_dir(tmp_path)), device="cpu", batch_size=2)
    local.load()

    def failing_generate(**kwargs: Any) -> Any:
        prompt_text = local._tokenizer.decode(kwargs["input_ids"][0])
        raise RuntimeError(f"shape mismatch while generating from {prompt_text!r}")

    local._lm.generate = failing_generate
    results = local.complete_many([ChatRequest.of(None, PROMPT), ChatRequest.of(None, "Hi")])
    assert results == [ChatFailure("generation failed: RuntimeError")] * 2
    assert "generation failed: RuntimeError" in caplog.text
    assert not leaked(all_log_text(caplog))


def test_teacher_metadata_and_log_carry_no_error_body(
    chat_server: ScriptedChatServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    notes = [
        note_from_pieces(
            "n1", "p1", ["Seen by Dr. ", (FAKE_NAME, "DOCTOR"), " on ", ("3/14", "DATE")], "seed"
        ),
        note_from_pieces("n2", "p2", ["Daughter ", (FAKE_NAME, "PATIENT"), " visited."], "seed"),
    ]
    notes_path = tmp_path / "notes.parquet"
    write_notes(notes, notes_path)
    chat_server.handler = lambda body: (500, error_body(body), {})
    settings = {
        "kind": "llm",
        "backend": {
            "kind": "openai",
            "base_url": chat_server.url,
            "model": "scripted",
            "max_retries": 1,
            "backoff_s": 0.0,
        },
        "trusted_hosts": ["127.0.0.1"],
    }
    log_file = tmp_path / "label.log"
    out = tmp_path / "out"
    argv = ["--log", str(log_file), "--verbose", "label-teacher", "--notes", str(notes_path)]
    argv += ["--parts", "seed", "--teacher", "llm", "--settings", json.dumps(settings)]
    assert main([*argv, "--out-dir", str(out)]) == 0
    assert chat_server.count == 4
    assert all(FAKE_NAME in last_user_message(r) for r in chat_server.requests)  # it was echoed
    rows = pq.read_table(out / "metadata.parquet").to_pylist()
    assert {r["status"] for r in rows} == {"request_failed"}
    for row in rows:
        assert row["detail"].startswith("HTTP 500 (InternalServerError), body ")
        assert not leaked(row["detail"])
    log_text = log_file.read_text(encoding="utf-8")
    assert "HTTP 500 (InternalServerError)" in log_text  # the retries were logged
    assert not leaked(log_text)
    captured = capsys.readouterr()
    assert not leaked(captured.err) and not leaked(captured.out)
    for artifact in ("summary.json", "ledger.json"):
        assert not leaked((out / artifact).read_text(encoding="utf-8"))
