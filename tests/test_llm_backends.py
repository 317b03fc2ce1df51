"""LLM backends: the OpenAI-compatible client against a real scripted server, the
response cache, the factory, and the local transformers backend on a tiny GPT-2."""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import llm_server
from llm_server import ScriptedChatServer, last_user_message, ok_body
from lm_helpers import tiny_causal_lm_dir
from synthdeid.errors import ConfigError
from synthdeid.llm import (
    ChatFailure,
    ChatMessage,
    ChatRequest,
    ChatResponse,
    GuardedBackend,
    OpenAICompatibleBackend,
    RequestGuard,
    ResponseCache,
    build_backend,
    request_hash,
)
from synthdeid.llm.openai_http import _retry_after
from synthdeid.llm.transformers_local import TransformersBackend

chat_server = llm_server.chat_server  # the fixture

KEY_ENV = "SYNTHDEID_TEST_LLM_KEY"
SECRET = "sk-test-3f9a1c77e2"


def backend(server: ScriptedChatServer, **options: Any) -> OpenAICompatibleBackend:
    settings: dict[str, Any] = {"timeout_s": 5.0, "backoff_s": 0.0, "max_retries": 3, **options}
    return OpenAICompatibleBackend(server.url, "scripted-model", **settings)


def request(text: str = "Write a note.", **settings: Any) -> ChatRequest:
    return ChatRequest.of("You write synthetic notes.", text, **settings)


# -- the OpenAI-compatible client -------------------------------------------------


def test_success_sends_the_request_and_reads_answer_and_usage(
    chat_server: ScriptedChatServer,
) -> None:
    chat_server.push(body=ok_body('{"note": "ok"}', prompt_tokens=21, completion_tokens=5))
    [result] = backend(chat_server).complete_many([request("Hello", seed=7, max_tokens=64)])
    assert result == ChatResponse('{"note": "ok"}', "scripted-model", 21, 5, cached=False)
    [recorded] = chat_server.recorded
    assert recorded.path == "/v1/chat/completions"
    assert recorded.body == {
        "model": "scripted-model",
        "messages": [
            {"role": "system", "content": "You write synthetic notes."},
            {"role": "user", "content": "Hello"},
        ],
        "temperature": 0.7,
        "top_p": 0.95,
        "max_tokens": 64,
        "seed": 7,
        "response_format": {"type": "json_object"},
    }
    assert "Authorization" not in recorded.headers


def test_no_seed_and_no_json_mode_leave_their_fields_out(chat_server: ScriptedChatServer) -> None:
    chat_server.push(body=ok_body("plain text", prompt_tokens=None, completion_tokens=None))
    [result] = backend(chat_server).complete_many([request(json_mode=False)])
    assert isinstance(result, ChatResponse)
    assert (result.input_tokens, result.output_tokens) == (None, None)
    body = chat_server.requests[0]
    assert "seed" not in body and "response_format" not in body


def test_server_errors_are_retried(chat_server: ScriptedChatServer) -> None:
    chat_server.push(500, {"error": {"message": "overloaded"}})
    chat_server.push(503, "busy")
    chat_server.push(body=ok_body("third time"))
    [result] = backend(chat_server).complete_many([request()])
    assert isinstance(result, ChatResponse) and result.text == "third time"
    assert chat_server.count == 3


def test_retries_run_out(chat_server: ScriptedChatServer) -> None:
    for _ in range(3):
        chat_server.push(500, {"error": {"message": "down"}})
    chat_server.push(body=ok_body("too late"))
    [result] = backend(chat_server, max_retries=2).complete_many([request()])
    body_chars = len(json.dumps({"error": {"message": "down"}}))
    assert result == ChatFailure(
        f"HTTP 500 (InternalServerError), body {body_chars} chars after 3 attempts"
    )
    assert chat_server.count == 3


def test_429_waits_for_retry_after(chat_server: ScriptedChatServer) -> None:
    chat_server.push(429, {"error": {"message": "slow down"}}, headers={"Retry-After": "0.4"})
    chat_server.push(body=ok_body("after the wait"))
    start = time.monotonic()
    [result] = backend(chat_server, backoff_s=0.0).complete_many([request()])
    elapsed = time.monotonic() - start
    assert isinstance(result, ChatResponse) and result.text == "after the wait"
    assert chat_server.count == 2
    assert 0.4 <= elapsed < 5


def test_retry_after_forms() -> None:
    assert _retry_after("3") == 3.0
    assert _retry_after("1.5") == 1.5
    assert _retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # a date in the past
    assert _retry_after("soon") is None
    assert _retry_after(None) is None


def test_client_errors_fail_at_once(chat_server: ScriptedChatServer) -> None:
    chat_server.push(400, {"error": {"message": "max_tokens is too large"}})
    [result] = backend(chat_server).complete_many([request()])
    body_chars = len(json.dumps({"error": {"message": "max_tokens is too large"}}))
    assert result == ChatFailure(f"HTTP 400 (BadRequestError), body {body_chars} chars")
    assert chat_server.count == 1


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("<html>gateway</html>", "malformed response: body is not JSON (HTTP 200, body 20 chars)"),
        ({"choices": []}, "malformed response: no choices[0].message.content"),
        ({"object": "chat.completion"}, "malformed response: no choices[0].message.content"),
        (
            {"choices": [{"message": {"content": None}}]},
            "malformed response: message content is NoneType",
        ),
    ],
)
def test_malformed_answers_fail_that_request_only(
    chat_server: ScriptedChatServer, body: Any, reason: str
) -> None:
    chat_server.push(200, body)
    chat_server.push(body=ok_body("fine"))
    results = backend(chat_server, concurrency=1).complete_many([request("a"), request("b")])
    assert results[0] == ChatFailure(reason)
    assert isinstance(results[1], ChatResponse) and results[1].text == "fine"
    assert chat_server.count == 2  # a malformed answer is not retried


def test_timeouts_are_retried_then_fail(chat_server: ScriptedChatServer) -> None:
    chat_server.push(delay_s=1.0)
    chat_server.push(delay_s=1.0)
    start = time.monotonic()
    [result] = backend(chat_server, timeout_s=0.2, max_retries=1).complete_many([request()])
    assert result == ChatFailure("timeout after 0.2 s after 2 attempts")
    assert chat_server.count == 2
    assert time.monotonic() - start < 1.5


def test_connection_errors_are_retried_then_fail() -> None:
    server = ScriptedChatServer().start()
    url = server.url
    server.stop()  # nothing listens on the port any more
    client = OpenAICompatibleBackend(url, "m", max_retries=1, backoff_s=0.0, timeout_s=2)
    assert client.complete_many([request()]) == [ChatFailure("connection error after 2 attempts")]


def test_concurrency_keeps_order_and_respects_the_limit(chat_server: ScriptedChatServer) -> None:
    lock = threading.Lock()
    state = {"now": 0, "peak": 0}

    def slow_echo(body: Any) -> tuple[int, Any, dict[str, str]]:
        n = int(last_user_message(body))
        with lock:
            state["now"] += 1
            state["peak"] = max(state["peak"], state["now"])
        time.sleep(0.02 * (10 - n))  # later requests finish first
        with lock:
            state["now"] -= 1
        return 200, ok_body(f"answer {n}"), {}

    chat_server.handler = slow_echo
    results = backend(chat_server, concurrency=3).complete_many(
        [request(str(i)) for i in range(10)]
    )
    assert [r.text for r in results if isinstance(r, ChatResponse)] == [
        f"answer {i}" for i in range(10)
    ]
    assert 1 < state["peak"] <= 3


def test_a_stop_signal_sends_no_further_request(chat_server: ScriptedChatServer) -> None:
    """SIGTERM mid-batch (as a stopped workflow job gets): the queued requests are
    cancelled, not sent one after the other while the step is meant to be ending."""
    import signal

    from synthdeid.termination import Terminated, signals_as_exceptions

    def slow_echo(body: Any) -> tuple[int, Any, dict[str, str]]:
        time.sleep(0.3)
        return 200, ok_body("answer"), {}

    chat_server.handler = slow_echo
    timer = threading.Timer(0.45, signal.raise_signal, args=(signal.SIGTERM,))
    started = time.perf_counter()
    with pytest.raises(Terminated), signals_as_exceptions():
        timer.start()
        backend(chat_server, concurrency=2).complete_many([request(str(i)) for i in range(20)])
    assert time.perf_counter() - started < 3.0  # not the 20 x 0.3 / 2 s of the whole batch
    time.sleep(0.4)  # the requests in flight finish
    assert chat_server.count <= 6


def test_api_key_goes_to_the_header_only(
    chat_server: ScriptedChatServer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv(KEY_ENV, SECRET)
    chat_server.push(500, {"error": {"message": "oops"}})
    chat_server.push(401, {"error": {"message": "bad key"}})
    caplog.set_level(logging.DEBUG)
    client = backend(chat_server, api_key_env=KEY_ENV)
    [result] = client.complete_many([request()])
    assert all(r.headers["Authorization"] == f"Bearer {SECRET}" for r in chat_server.recorded)
    assert chat_server.count == 2
    described = json.dumps(client.describe())
    assert SECRET not in described and KEY_ENV in described
    assert isinstance(result, ChatFailure) and SECRET not in result.reason
    assert SECRET not in caplog.text and "retry 1 of 3" in caplog.text


def test_missing_key_variable_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    with pytest.raises(ConfigError, match=KEY_ENV):
        OpenAICompatibleBackend("http://127.0.0.1:9/v1", "m", api_key_env=KEY_ENV)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"base_url": "127.0.0.1:8000/v1"}, "http"),
        ({"base_url": "http://user:pw@127.0.0.1/v1"}, "credentials"),
        ({"model": ""}, "model"),
        ({"concurrency": 0}, "concurrency"),
        ({"max_retries": -1}, "max_retries"),
        ({"timeout_s": 0}, "timeout_s"),
    ],
)
def test_bad_client_settings(options: dict[str, Any], message: str) -> None:
    settings = {"base_url": "http://127.0.0.1:8000/v1", "model": "m", **options}
    with pytest.raises(ConfigError, match=message):
        OpenAICompatibleBackend(**settings)


# -- cache ------------------------------------------------------------------------


def test_a_rerun_is_answered_from_the_cache(
    chat_server: ScriptedChatServer, tmp_path: Path
) -> None:
    requests = [request(f"note {i}", seed=i) for i in range(3)]
    first = backend(chat_server, cache=ResponseCache(tmp_path)).complete_many(requests)
    assert chat_server.count == 3 and not any(
        r.cached for r in first if isinstance(r, ChatResponse)
    )
    cache = ResponseCache(tmp_path)
    second = backend(chat_server, cache=cache).complete_many(requests)
    assert chat_server.count == 3  # nothing sent
    assert all(isinstance(r, ChatResponse) and r.cached for r in second)
    assert [r.text for r in second if isinstance(r, ChatResponse)] == [
        r.text for r in first if isinstance(r, ChatResponse)
    ]
    assert cache.hits == 3
    assert len(list(tmp_path.glob("*/*.json"))) == 3


def test_failures_are_not_cached(chat_server: ScriptedChatServer, tmp_path: Path) -> None:
    chat_server.handler = lambda body: (
        (400, {"error": {"message": "no"}}, {}) if "bad" in last_user_message(body) else
        (200, ok_body("yes"), {})
    )  # fmt: skip
    requests = [request("good"), request("bad")]
    first = backend(chat_server, cache=ResponseCache(tmp_path)).complete_many(requests)
    assert isinstance(first[0], ChatResponse) and isinstance(first[1], ChatFailure)
    chat_server.handler = None  # the server recovers
    second = backend(chat_server, cache=ResponseCache(tmp_path)).complete_many(requests)
    assert chat_server.count == 3  # only the failed request went again
    assert isinstance(second[0], ChatResponse) and second[0].cached
    assert isinstance(second[1], ChatResponse) and not second[1].cached


def test_answers_are_cached_as_they_arrive_not_after_the_batch(
    chat_server: ScriptedChatServer, tmp_path: Path
) -> None:
    """A run stopped halfway through a batch keeps the answers it already had."""
    release = threading.Event()

    def hold_the_third(body: Any) -> tuple[int, Any, dict[str, str]]:
        if last_user_message(body) == "note 2":
            release.wait(timeout=30)
        return 200, ok_body(f"answer to {last_user_message(body)}"), {}

    chat_server.handler = hold_the_third
    requests = [request(f"note {i}", seed=i) for i in range(3)]
    client = backend(chat_server, cache=ResponseCache(tmp_path), concurrency=1)
    batch = threading.Thread(target=client.complete_many, args=(requests,), daemon=True)
    batch.start()
    try:
        deadline = time.monotonic() + 10
        while len(list(tmp_path.glob("*/*.json"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        # the batch is still waiting on its third answer, and the first two are on disk
        assert batch.is_alive()
        assert len(list(tmp_path.glob("*/*.json"))) == 2
    finally:
        release.set()
        batch.join(timeout=10)
    cache = ResponseCache(tmp_path)
    again = backend(chat_server, cache=cache).complete_many(requests)
    assert chat_server.count == 3 and cache.hits == 3
    assert [r.text for r in again if isinstance(r, ChatResponse)] == [
        f"answer to note {i}" for i in range(3)
    ]


def test_a_corrupt_cache_entry_is_a_miss(
    chat_server: ScriptedChatServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    client = backend(chat_server, cache=ResponseCache(tmp_path))
    client.complete_many([request()])
    [entry] = tmp_path.glob("*/*.json")
    entry.write_text('{"text": "trunc', encoding="utf-8")
    [result] = client.complete_many([request()])
    assert isinstance(result, ChatResponse) and not result.cached
    assert chat_server.count == 2
    assert "unreadable entry" in caplog.text
    assert json.loads(entry.read_text(encoding="utf-8"))["text"] == result.text  # rewritten


def test_a_failed_cache_write_leaves_the_shared_folder(tmp_path: Path) -> None:
    """Another job sharing the cache may be writing into the folder a failed write made."""
    cache = ResponseCache(tmp_path)
    key = request_hash("openai", "m", request())
    text: Any = object()  # no JSON: the write fails after the folder was made
    unwritable = ChatResponse(text=text, model="m", input_tokens=1, output_tokens=1)
    with pytest.raises(TypeError):
        cache.put(key, unwritable)
    assert cache.path(key).parent.is_dir() and not any(cache.path(key).parent.iterdir())


def test_cache_round_trip_and_key_check(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path)
    key = request_hash("openai", "m", request())
    assert cache.get(key) is None
    cache.put(key, ChatResponse("t", "m", 3, 4))
    assert cache.get(key) == ChatResponse("t", "m", 3, 4, cached=True)
    other = request_hash("openai", "m", request("x"))
    cache.path(other).parent.mkdir(parents=True, exist_ok=True)
    cache.path(other).write_bytes(cache.path(key).read_bytes())  # a file under the wrong name
    assert cache.get(other) is None
    with pytest.raises(ValueError, match="not a request hash"):
        cache.path("../../etc/passwd")


def test_request_hash_covers_everything_that_changes_the_answer() -> None:
    base = request("note", seed=1)
    same = ChatRequest(
        messages=(ChatMessage("system", "You write synthetic notes."), ChatMessage("user", "note")),
        seed=1,
    )
    variants = [
        request("note ", seed=1),
        request("note", seed=2),
        request("note", seed=1, temperature=0.5),
        request("note", seed=1, top_p=0.5),
        request("note", seed=1, max_tokens=10),
        request("note", seed=1, json_mode=False),
        ChatRequest.of(None, "note", seed=1),
    ]
    digest = request_hash("openai", "m", base)
    assert request_hash("openai", "m", same) == digest
    assert len(digest) == 64
    hashes = {request_hash("openai", "m", v) for v in variants}
    hashes |= {request_hash("transformers", "m", base), request_hash("openai", "m2", base)}
    hashes.add(request_hash("openai", "m", base, {"model_fingerprint": "x"}))
    assert len(hashes) == len(variants) + 3 and digest not in hashes


def test_request_text_and_validation() -> None:
    assert request("hello").text() == "You write synthetic notes.\nhello"
    with pytest.raises(ValueError, match="role"):
        ChatMessage("tool", "x")
    with pytest.raises(ValueError, match="max_tokens"):
        request(max_tokens=0)


# -- factory ----------------------------------------------------------------------


def test_factory_builds_each_kind(chat_server: ScriptedChatServer, tmp_path: Path) -> None:
    assert build_backend({"kind": "none", "model": "left over"}, cache_dir=None) is None
    settings = {"kind": "openai", "base_url": chat_server.url, "model": "m", "max_retries": 0}
    client = build_backend(settings, cache_dir=tmp_path / "cache")
    assert isinstance(client, OpenAICompatibleBackend)
    assert client.describe()["base_url"] == chat_server.url
    assert isinstance(client.cache, ResponseCache)
    guarded = build_backend(
        settings, cache_dir=None, guard=RequestGuard(["Quackenbush"], None, placeholders=["DOCTOR"])
    )
    assert isinstance(guarded, GuardedBackend) and guarded.describe()["guard"]["phi_surfaces"] == 1
    local = build_backend(
        {"kind": "transformers", "model": "org/model", "batch_size": 2}, cache_dir=None
    )
    assert isinstance(local, TransformersBackend) and local.batch_size == 2


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"kind": "anthropic"}, r"kind must be one of \['none', 'openai', 'transformers'\]"),
        ({"kind": "openai", "base_url": "http://h/v1", "model": "m", "batch_size": 4}, "allowed"),
        ({"kind": "openai", "model": "m"}, "needs"),
        ({"kind": "transformers", "model": "m", "base_url": "http://h"}, "unknown key"),
        (
            {"kind": "openai", "base_url": "http://h/v1", "model": "m", "concurrency": "4"},
            "concurrency",
        ),
        ({"kind": "none", "colour": "blue"}, "colour"),
    ],
)
def test_factory_rejects_bad_settings(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_backend(settings, cache_dir=None)


# -- local transformers backend ---------------------------------------------------


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_causal_lm_dir(tmp_path_factory)


def count_generate_calls(local: TransformersBackend) -> list[int]:
    """Wrap the loaded model's generate; the list gets each call's batch size."""
    local.load()
    calls: list[int] = []
    generate = local._lm.generate

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(len(kwargs["input_ids"]))
        return generate(*args, **kwargs)

    local._lm.generate = counted
    return calls


def local_requests(seed: int = 7) -> list[ChatRequest]:
    return [
        ChatRequest.of(
            "You write notes.", "Write a short note about chest pain.", max_tokens=12, seed=seed
        ),
        ChatRequest.of(None, "Hi", max_tokens=12, seed=seed + 1),
    ]


def test_transformers_generates_in_batches(tiny_lm: Path) -> None:
    local = TransformersBackend(str(tiny_lm), device="cpu", batch_size=2)
    calls = count_generate_calls(local)
    results = local.complete_many(local_requests())
    assert calls == [2]
    for result in results:
        assert isinstance(result, ChatResponse) and isinstance(result.text, str)
        assert result.input_tokens is not None and result.input_tokens > 0
        assert result.output_tokens is not None and 0 < result.output_tokens <= 12
    assert results[0].input_tokens > results[1].input_tokens  # type: ignore[union-attr,operator]
    one_at_a_time = TransformersBackend(str(tiny_lm), device="cpu", batch_size=1)
    calls = count_generate_calls(one_at_a_time)
    one_at_a_time.complete_many(local_requests())
    assert calls == [1, 1]


def test_transformers_sampling_is_reproducible(tiny_lm: Path) -> None:
    first = TransformersBackend(str(tiny_lm), batch_size=2).complete_many(local_requests(7))
    again = TransformersBackend(str(tiny_lm), batch_size=2).complete_many(local_requests(7))
    other = TransformersBackend(str(tiny_lm), batch_size=2).complete_many(local_requests(99))
    assert first == again
    assert [r.text for r in first] != [r.text for r in other]  # type: ignore[union-attr]


def test_transformers_prompt_too_long_fails_alone(tiny_lm: Path) -> None:
    local = TransformersBackend(str(tiny_lm), batch_size=4)
    results = local.complete_many(
        [ChatRequest.of(None, "pain " * 400, max_tokens=4), local_requests()[1]]
    )
    assert isinstance(results[0], ChatFailure) and results[0].reason.startswith("prompt too long")
    assert isinstance(results[1], ChatResponse)


def test_transformers_cache_answers_without_loading(tiny_lm: Path, tmp_path: Path) -> None:
    TransformersBackend(str(tiny_lm), cache=ResponseCache(tmp_path)).complete_many(local_requests())
    again = TransformersBackend(str(tiny_lm), cache=ResponseCache(tmp_path))
    results = again.complete_many(local_requests())
    assert all(isinstance(r, ChatResponse) and r.cached for r in results)
    assert again._lm is None  # the model was never loaded


def test_transformers_caches_each_batch_before_the_next(
    tiny_lm: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stopped in its second batch, the backend has cached the first batch's answer."""
    local = TransformersBackend(str(tiny_lm), batch_size=1, cache=ResponseCache(tmp_path))
    generate = local._generate
    batches: list[int] = []

    def stopped_in_the_second(batch: list[Any]) -> list[Any]:
        batches.append(len(batch))
        if len(batches) == 2:
            raise KeyboardInterrupt
        return generate(batch)

    monkeypatch.setattr(local, "_generate", stopped_in_the_second)
    with pytest.raises(KeyboardInterrupt):
        local.complete_many(local_requests())
    assert len(list(tmp_path.glob("*/*.json"))) == 1
    cache = ResponseCache(tmp_path)
    results = TransformersBackend(str(tiny_lm), batch_size=1, cache=cache).complete_many(
        local_requests()
    )
    assert cache.hits == 1 and sum(r.cached for r in results if isinstance(r, ChatResponse)) == 1


def test_transformers_prompt_formats(tiny_lm: Path, tmp_path: Path) -> None:
    templated = TransformersBackend(str(tiny_lm))
    assert templated.prompt(local_requests()[0]) == (
        "<|bos|>system: You write notes.\nuser: Write a short note about chest pain.\nassistant:"
    )
    plain_dir = tiny_causal_lm_dir(tmp_path, chat_template=None)
    plain = TransformersBackend(str(plain_dir))
    assert plain.prompt(local_requests()[1]) == "user: Hi\nassistant:"
    [result] = plain.complete_many([local_requests()[1]])
    assert isinstance(result, ChatResponse)


def test_transformers_describe_and_bad_settings(tiny_lm: Path) -> None:
    described = TransformersBackend(str(tiny_lm)).describe()
    assert described["backend"] == "transformers" and described["device"] == "cpu"
    assert described["dtype"] == "float32" and described["model_fingerprint"].startswith("sha256:")
    with pytest.raises(ConfigError, match="batch_size"):
        TransformersBackend(str(tiny_lm), batch_size=0)
    with pytest.raises(ConfigError, match="device"):
        TransformersBackend(str(tiny_lm), device="tpu")
    with pytest.raises(ConfigError, match=r"model path .* does not exist"):
        TransformersBackend(str(tiny_lm / "missing"))
