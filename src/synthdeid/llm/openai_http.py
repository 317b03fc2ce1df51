"""A client for OpenAI-compatible chat-completions servers (vLLM, llama.cpp, TGI, OpenAI).

Requests go to ``POST {base_url}/chat/completions`` with ``requests``, at most
``concurrency`` at a time; results come back in request order. Transient
failures (connection errors, timeouts, HTTP 429 and 5xx) are retried up to
``max_retries`` times with exponential backoff and jitter, or after the
server's ``Retry-After`` when it sends one (capped at
:data:`MAX_RETRY_AFTER_S`); other HTTP errors and malformed answers fail the
request at once. A failed request is a :class:`ChatFailure`, never an
exception that costs the rest of the batch. Redirects are never followed
(a 3xx answer fails the request): a request, and its key, goes to
``base_url`` or nowhere. ``use_env_proxies`` (default True) lets ``requests``
take proxies from ``HTTP(S)_PROXY``; the teacher turns it off, so that raw
notes go straight to the trusted host.

A server's error body may echo the prompt, and so carry PHI: failure reasons
and log lines name the status, an error class and the body's length
(``HTTP 500 (InternalServerError), body 183 chars``), never the body's text,
and an exception only by its class.

A request with a :class:`~synthdeid.llm.constraints.NoteShape` carries the
shape's GBNF grammar in a ``grammar`` field when the server takes one
(``grammar: true``; llama.cpp's server does), and is sent in JSON mode
otherwise. ``fold_system: true`` folds system messages into the first user
turn, for models whose chat template drops them.

The API key is read once, from the environment variable the configuration
names (never from the configuration itself), and only ever goes into the
``Authorization`` header: not into :meth:`describe`, logs or failure reasons.
"""

from __future__ import annotations

import email.utils
import logging
import os
import queue
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import requests
from tqdm import tqdm

from synthdeid.errors import ConfigError
from synthdeid.llm.base import CachedChatBackend, ChatFailure, ChatRequest, ChatResponse, ChatResult
from synthdeid.llm.cache import ResponseCache

log = logging.getLogger(__name__)

MAX_RETRY_AFTER_S = 300.0
# error classes by HTTP status (the names the OpenAI client library gives them)
_ERROR_CLASSES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    403: "PermissionDeniedError",
    404: "NotFoundError",
    409: "ConflictError",
    422: "UnprocessableEntityError",
    429: "RateLimitError",
}


@dataclass(frozen=True)
class _Retry:
    """A transient failure: why, and how long the server asked us to wait (if it did)."""

    reason: str
    retry_after_s: float | None = None


class OpenAICompatibleBackend(CachedChatBackend):
    """Chat completions over HTTP from an OpenAI-compatible server.

    ``base_url`` is the API root (``http://127.0.0.1:8000/v1``);
    ``api_key_env`` names the environment variable holding the key (None:
    no key, as for a local server). ``max_retries`` counts retries after the
    first attempt.
    """

    name = "openai"

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str | None = None,
        timeout_s: float = 60.0,
        max_retries: int = 3,
        backoff_s: float = 1.0,
        concurrency: int = 4,
        cache: ResponseCache | None = None,
        extra_headers: Mapping[str, str] | None = None,
        max_backoff_s: float = 60.0,
        grammar: bool = False,
        fold_system: bool = False,
    ) -> None:
        super().__init__(cache)
        for option, value in (("grammar", grammar), ("fold_system", fold_system)):
            if not isinstance(value, bool):
                raise ConfigError(f"{option} must be true or false, not {value!r}")
        self.grammar = grammar
        self.fold_system = fold_system
        self.base_url = _checked_base_url(base_url)
        self.use_env_proxies = True
        self.model = _checked_model(model)
        _check_numbers(timeout_s, max_retries, backoff_s, concurrency)
        self.api_key_env = api_key_env
        self.timeout_s = float(timeout_s)
        self.max_retries = int(max_retries)
        self.backoff_s = float(backoff_s)
        self.max_backoff_s = float(max_backoff_s)
        self.concurrency = int(concurrency)
        self.endpoint = f"{self.base_url}/chat/completions"
        self._headers = {"Content-Type": "application/json", **(extra_headers or {})}
        if api_key_env is not None:
            self._headers["Authorization"] = f"Bearer {_api_key(api_key_env)}"
        self._idle_sessions: queue.SimpleQueue[requests.Session] = queue.SimpleQueue()
        self._all_sessions: list[requests.Session] = []
        self._lock = threading.Lock()
        self._rng = random.Random()

    def cache_extra(self) -> Mapping[str, Any]:
        # what changes an answer besides the request; absent when off, so old keys hold
        return {
            k: True
            for k, on in (("grammar", self.grammar), ("fold_system", self.fold_system))
            if on
        }

    def describe(self) -> dict[str, Any]:
        return {
            "backend": self.name,
            "model": self.model,
            "base_url": self.base_url,
            "api_key_env": self.api_key_env,
            "timeout_s": self.timeout_s,
            "max_retries": self.max_retries,
            "backoff_s": self.backoff_s,
            "concurrency": self.concurrency,
            "grammar": self.grammar,
            "fold_system": self.fold_system,
            "extra_header_names": sorted(k for k in self._headers if k != "Authorization"),
        }

    def payload(self, request: ChatRequest) -> dict[str, Any]:
        """The JSON body sent for ``request``."""
        messages = request.with_system_folded().messages if self.fold_system else request.messages
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": m.role, "content": m.content} for m in messages],
            "temperature": request.temperature,
            "top_p": request.top_p,
            "max_tokens": request.max_tokens,
        }
        if request.seed is not None:
            body["seed"] = request.seed
        if request.shape is not None and self.grammar:
            body["grammar"] = request.shape.gbnf()
        elif request.json_mode or request.shape is not None:
            body["response_format"] = {"type": "json_object"}
        return body

    def close(self) -> None:
        with self._lock:
            for session in self._all_sessions:
                session.close()
            self._all_sessions.clear()

    # -- sending -------------------------------------------------------------

    def _complete_uncached(
        self,
        requests_: Sequence[ChatRequest],
        *,
        progress: bool,
        on_result: Callable[[int, ChatResult], None],
    ) -> list[ChatResult]:
        results: list[ChatResult] = [ChatFailure("not sent")] * len(requests_)
        workers = max(1, min(self.concurrency, len(requests_)))
        bar = tqdm(total=len(requests_), desc=f"{self.name}:{self.model}", disable=not progress)
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="llm-http")
        try:
            with bar:
                futures = {pool.submit(self._complete_one, r): i for i, r in enumerate(requests_)}
                for future in as_completed(futures):
                    index = futures[future]
                    results[index] = future.result()
                    on_result(index, results[index])
                    bar.update(1)
        except BaseException:
            # stopped (a signal, Ctrl-C) or failed: send nothing more; the requests in
            # flight finish in their threads, their answers unused
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown(wait=True)
        return results

    def _complete_one(self, request: ChatRequest) -> ChatResult:
        body = self.payload(request)
        attempts = self.max_retries + 1
        for attempt in range(attempts):
            outcome = self._attempt(body)
            if not isinstance(outcome, _Retry):
                return outcome
            if attempt + 1 == attempts:
                tries = f"{attempts} attempt" + ("s" if attempts != 1 else "")
                return ChatFailure(f"{outcome.reason} after {tries}")
            delay = self._delay(attempt, outcome.retry_after_s)
            log.warning(
                "%s: %s; retry %d of %d in %.2f s",
                self.name,
                outcome.reason,
                attempt + 1,
                self.max_retries,
                delay,
            )
            time.sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    def _delay(self, attempt: int, retry_after_s: float | None) -> float:
        if retry_after_s is not None:
            return min(max(retry_after_s, 0.0), MAX_RETRY_AFTER_S)
        base: float = min(self.max_backoff_s, self.backoff_s * 2**attempt)
        with self._lock:
            return base * self._rng.uniform(0.5, 1.0)

    def _attempt(self, body: Mapping[str, Any]) -> ChatResult | _Retry:
        try:
            with self._session() as session:
                response = session.post(
                    self.endpoint,
                    json=body,
                    headers=self._headers,
                    timeout=self.timeout_s,
                    allow_redirects=False,
                )
        except requests.Timeout:
            return _Retry(f"timeout after {self.timeout_s:g} s")
        except requests.ConnectionError:
            return _Retry("connection error")
        except requests.RequestException as error:
            return ChatFailure(f"request failed: {type(error).__name__}")
        status = response.status_code
        if status == 429 or status >= 500:
            retry_after = _retry_after(response.headers.get("Retry-After"))
            return _Retry(http_error_reason(response), retry_after)
        if status >= 400:
            return ChatFailure(http_error_reason(response))
        if 300 <= status < 400:
            # never forwarded: a redirect could carry the request (and its key) to another host
            return ChatFailure(f"{http_error_reason(response)}: redirect not followed")
        return self._parse(response)

    def _parse(self, response: requests.Response) -> ChatResult:
        try:
            body = response.json()
        except ValueError:
            return ChatFailure(
                f"malformed response: body is not JSON "
                f"(HTTP {response.status_code}, body {len(response.text)} chars)"
            )
        try:
            content = body["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            return ChatFailure("malformed response: no choices[0].message.content")
        if not isinstance(content, str):
            return ChatFailure(f"malformed response: message content is {type(content).__name__}")
        usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
        model = body.get("model")
        return ChatResponse(
            text=content,
            model=model if isinstance(model, str) and model else self.model,
            input_tokens=_count(usage.get("prompt_tokens")),
            output_tokens=_count(usage.get("completion_tokens")),
        )

    @contextmanager
    def _session(self) -> Iterator[requests.Session]:
        """A session no other thread is using (at most ``concurrency`` are ever made)."""
        try:
            session = self._idle_sessions.get_nowait()
        except queue.Empty:
            session = requests.Session()
            session.trust_env = self.use_env_proxies
            with self._lock:
                self._all_sessions.append(session)
        try:
            yield session
        finally:
            self._idle_sessions.put(session)


def _api_key(variable: str) -> str:
    if not variable or not isinstance(variable, str):
        raise ConfigError(f"api_key_env must name an environment variable, not {variable!r}")
    key = os.environ.get(variable)
    if not key:
        raise ConfigError(
            f"environment variable {variable} (named by api_key_env) is not set or empty; "
            "export the API key there, or leave api_key_env out for a server without a key"
        )
    return key


def _checked_base_url(base_url: str) -> str:
    if not isinstance(base_url, str):
        raise ConfigError(f"base_url must be a URL string, not {base_url!r}")
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"base_url must be an http(s) URL such as http://127.0.0.1:8000/v1, not {base_url!r}"
        )
    if parts.username or parts.password:
        raise ConfigError(
            "base_url must not carry credentials; name the key's variable in api_key_env"
        )
    return base_url.rstrip("/")


def _checked_model(model: str) -> str:
    if not isinstance(model, str) or not model.strip():
        raise ConfigError(f"model must be a non-empty string, not {model!r}")
    return model


def _check_numbers(timeout_s: float, max_retries: int, backoff_s: float, concurrency: int) -> None:
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or timeout_s <= 0:
        raise ConfigError(f"timeout_s must be a positive number of seconds, not {timeout_s!r}")
    if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
        raise ConfigError(f"max_retries must be an integer >= 0, not {max_retries!r}")
    if isinstance(backoff_s, bool) or not isinstance(backoff_s, int | float) or backoff_s < 0:
        raise ConfigError(f"backoff_s must be a number of seconds >= 0, not {backoff_s!r}")
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ConfigError(f"concurrency must be an integer >= 1, not {concurrency!r}")


def _retry_after(value: str | None) -> float | None:
    """Seconds to wait from a Retry-After header (seconds or an HTTP date), or None."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def error_class(status: int) -> str:
    """A fixed name for an HTTP error status (never text the server sent)."""
    if status in _ERROR_CLASSES:
        return _ERROR_CLASSES[status]
    if status >= 500:
        return "InternalServerError"
    if 300 <= status < 400:
        return "Redirect"
    return "APIStatusError"


def http_error_reason(response: requests.Response) -> str:
    """Status, error class and body length of an unsuccessful answer: never the body's text.

    A server's error message may quote the request, which may hold PHI.
    """
    status = response.status_code
    return f"HTTP {status} ({error_class(status)}), body {len(response.text)} chars"


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
