"""A scripted OpenAI-compatible chat server for tests: a real HTTP server on 127.0.0.1.

:class:`ScriptedChatServer` listens on an ephemeral port in a background
thread, records every request (parsed JSON body, headers, path) and answers
``POST .../chat/completions`` from a queue of scripted responses, or from a
handler function when one is set, or else with an OpenAI-shaped success that
echoes the last user message. Use the ``chat_server`` fixture (started
before, stopped in teardown) or the class as a context manager.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

Body = Mapping[str, Any] | str
Handler = Callable[[Any], tuple[int, Body, Mapping[str, str]]]


def ok_body(
    content: str,
    *,
    prompt_tokens: int | None = 11,
    completion_tokens: int | None = 7,
    model: str = "scripted-model",
) -> dict[str, Any]:
    """An OpenAI chat-completions success body with ``content`` as the answer."""
    body: dict[str, Any] = {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
    }
    if prompt_tokens is not None or completion_tokens is not None:
        body["usage"] = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": (prompt_tokens or 0) + (completion_tokens or 0),
        }
    return body


def last_user_message(request_json: Any) -> str:
    messages = request_json.get("messages", []) if isinstance(request_json, dict) else []
    users = [m.get("content", "") for m in messages if m.get("role") == "user"]
    return users[-1] if users else ""


def echo_handler(request_json: Any) -> tuple[int, Body, Mapping[str, str]]:
    """Answers with the last user message (the default when nothing is scripted)."""
    return 200, ok_body(f"echo: {last_user_message(request_json)}"), {}


@dataclass(frozen=True)
class Scripted:
    """One scripted answer: status, body (dict as JSON, str as is), headers, delay first."""

    status: int = 200
    body: Body = field(default_factory=lambda: ok_body("{}"))
    headers: Mapping[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


@dataclass(frozen=True)
class Recorded:
    path: str
    headers: dict[str, str]
    body: Any  # parsed JSON, or the raw text when it is not JSON


class ScriptedChatServer:
    """The server: ``url`` is the API root (``http://127.0.0.1:<port>/v1``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: deque[Scripted] = deque()
        self.handler: Handler | None = None
        self.recorded: list[Recorded] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(self))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    @property
    def requests(self) -> list[Any]:
        """The parsed JSON bodies received so far, in arrival order."""
        with self._lock:
            return [r.body for r in self.recorded]

    @property
    def count(self) -> int:
        with self._lock:
            return len(self.recorded)

    def push(
        self,
        status: int = 200,
        body: Body | None = None,
        headers: Mapping[str, str] | None = None,
        delay_s: float = 0.0,
    ) -> None:
        """Queue one answer (the queue is served first in, first out)."""
        with self._lock:
            self._queue.append(
                Scripted(status, ok_body("{}") if body is None else body, headers or {}, delay_s)
            )

    def start(self) -> ScriptedChatServer:
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> ScriptedChatServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def answer(self, request_json: Any) -> Scripted:
        """The answer for a request: next queued, else the handler, else an echo."""
        with self._lock:
            if self._queue:
                return self._queue.popleft()
            handler = self.handler or echo_handler
        status, body, headers = handler(request_json)
        return Scripted(status, body, headers)

    def record(self, entry: Recorded) -> None:
        with self._lock:
            self.recorded.append(entry)


def _make_handler(server: ScriptedChatServer) -> type[BaseHTTPRequestHandler]:
    class ChatHandler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length).decode("utf-8", errors="replace")
            try:
                parsed: Any = json.loads(raw)
            except ValueError:
                parsed = raw
            server.record(Recorded(self.path, dict(self.headers.items()), parsed))
            if not self.path.endswith("/chat/completions"):
                self._send(Scripted(404, {"error": {"message": f"no route {self.path}"}}))
                return
            scripted = server.answer(parsed)
            if scripted.delay_s:
                time.sleep(scripted.delay_s)
            self._send(scripted)

        def _send(self, scripted: Scripted) -> None:
            body = scripted.body
            payload = (body if isinstance(body, str) else json.dumps(body)).encode("utf-8")
            try:
                self.send_response(scripted.status)
                content_type = "text/plain" if isinstance(body, str) else "application/json"
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(payload)))
                for name, value in scripted.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a timeout test)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep test output quiet

    return ChatHandler


@pytest.fixture
def chat_server() -> Iterator[ScriptedChatServer]:
    """A started :class:`ScriptedChatServer`, shut down and closed after the test."""
    server = ScriptedChatServer().start()
    try:
        yield server
    finally:
        server.stop()
