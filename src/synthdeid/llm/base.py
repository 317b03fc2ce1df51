"""The chat-model interface every LLM backend implements.

A backend takes a batch of :class:`ChatRequest` and returns, in the same
order, one :class:`ChatResponse` or :class:`ChatFailure` per request: a
failed request (refused, timed out, malformed answer) never raises and never
costs the rest of the batch. Backends built on :class:`CachedChatBackend`
look every request up in an optional :class:`~synthdeid.llm.cache.ResponseCache`
first, keyed by :func:`request_hash`, so a rerun with the same requests sends
nothing, and store each answer the moment it arrives, so a run stopped halfway
through a batch keeps the answers it already had. ``describe()`` is what
goes into provenance: backend, model, endpoint and generation defaults, never
a secret.
"""

from __future__ import annotations

import hashlib
import json
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from synthdeid.llm.constraints import NoteShape

if TYPE_CHECKING:
    from synthdeid.llm.cache import ResponseCache

log = logging.getLogger(__name__)

ROLES = ("system", "user", "assistant")
HASH_VERSION = 1  # bump when the meaning of a cached answer changes


@dataclass(frozen=True)
class ChatMessage:
    """One chat turn: ``role`` is system, user or assistant."""

    role: str
    content: str

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"chat message role must be one of {ROLES}, not {self.role!r}")


@dataclass(frozen=True)
class ChatRequest:
    """A chat completion request: messages and sampling settings.

    ``json_mode`` asks the model for a JSON object (``response_format`` for
    OpenAI-compatible servers). ``shape`` asks for more: an answer of that
    :class:`~synthdeid.llm.constraints.NoteShape`, enforced while decoding by
    backends that can (a llama.cpp grammar, a transformers logits processor)
    and otherwise asked for as JSON. ``seed`` makes sampling reproducible where
    the backend supports it.
    """

    messages: tuple[ChatMessage, ...]
    temperature: float = 0.7
    top_p: float = 0.95
    max_tokens: int = 1024
    seed: int | None = None
    json_mode: bool = True
    shape: NoteShape | None = None

    def __post_init__(self) -> None:
        if not self.messages:
            raise ValueError("a chat request needs at least one message")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be positive, not {self.max_tokens}")
        if self.temperature < 0 or not 0 < self.top_p <= 1:
            raise ValueError(
                f"temperature must be >= 0 and top_p in (0, 1], not {self.temperature}, {self.top_p}"
            )

    @classmethod
    def of(cls, system: str | None, user: str, **settings: Any) -> ChatRequest:
        """A request of an optional system message and one user message."""
        messages = (ChatMessage("system", system),) if system else ()
        return cls(messages=(*messages, ChatMessage("user", user)), **settings)

    def text(self) -> str:
        """All message contents, one after another: what the request guard scans."""
        return "\n".join(message.content for message in self.messages)

    def canonical(self) -> dict[str, Any]:
        """Everything about the request that determines the answer, JSON-ready."""
        return {
            "messages": [[m.role, m.content] for m in self.messages],
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_tokens,
            "seed": self.seed,
            "json_mode": self.json_mode,
            # only when set, so that unshaped requests keep their cache keys
            **({"shape": self.shape.canonical()} if self.shape is not None else {}),
        }

    def with_system_folded(self) -> ChatRequest:
        """The same request with its system messages folded into the first user turn.

        For chat templates that drop or refuse a system role (Gemma's): the
        system text comes first, then a blank line, then the user's message.
        """
        return replace(self, messages=fold_system_messages(self.messages))


def fold_system_messages(messages: Sequence[ChatMessage]) -> tuple[ChatMessage, ...]:
    """``messages`` without system turns, whose texts open the first user turn."""
    system = [m.content for m in messages if m.role == "system"]
    rest = [m for m in messages if m.role != "system"]
    if not system:
        return tuple(messages)
    preamble = "\n\n".join(system)
    for i, message in enumerate(rest):
        if message.role == "user":
            rest[i] = ChatMessage("user", f"{preamble}\n\n{message.content}")
            return tuple(rest)
    return (ChatMessage("user", preamble), *rest)


@dataclass(frozen=True)
class ChatResponse:
    """A model's answer; token counts when the backend knows them."""

    text: str
    model: str
    input_tokens: int | None
    output_tokens: int | None
    cached: bool = False


@dataclass(frozen=True)
class ChatFailure:
    """A request that got no answer, and why (never containing a secret or PHI)."""

    reason: str


ChatResult = ChatResponse | ChatFailure


def request_hash(
    backend_name: str,
    model: str,
    request: ChatRequest,
    extra: Mapping[str, Any] | None = None,
) -> str:
    """SHA-256 (hex) of the canonical JSON of everything that determines the answer.

    ``extra`` carries what else a backend knows to matter (a local model's
    weights fingerprint); it must be JSON-serialisable.
    """
    payload = {
        "version": HASH_VERSION,
        "backend": backend_name,
        "model": model,
        "request": request.canonical(),
        "extra": dict(extra or {}),
    }
    canonical = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


class ChatBackend(ABC):
    """A chat model: many requests in, one result per request out, order kept."""

    name: str
    model: str

    @abstractmethod
    def complete_many(
        self, requests: Sequence[ChatRequest], *, progress: bool = False
    ) -> list[ChatResult]:
        """One result per request, in request order; failures are results, not exceptions."""

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """Provenance: backend, model, endpoint, generation defaults; never a secret."""

    def complete(self, request: ChatRequest) -> ChatResult:
        return self.complete_many([request])[0]

    def close(self) -> None:  # noqa: B027 - optional hook, nothing to release by default
        """Release connections or memory; the backend may not be used afterwards."""


class CachedChatBackend(ChatBackend):
    """A backend that consults a response cache before generating.

    Subclasses implement :meth:`_complete_uncached`; successful answers are
    stored as each arrives, failures never are (a rerun tries them again).
    """

    def __init__(self, cache: ResponseCache | None = None) -> None:
        self.cache = cache

    def cache_extra(self) -> Mapping[str, Any]:
        """What besides name, model and request determines an answer (for the cache key)."""
        return {}

    def complete_many(
        self, requests: Sequence[ChatRequest], *, progress: bool = False
    ) -> list[ChatResult]:
        results: list[ChatResult | None] = [None] * len(requests)
        keys: list[str] = []
        if self.cache is not None:
            extra = self.cache_extra()
            keys = [request_hash(self.name, self.model, r, extra) for r in requests]
            for i, key in enumerate(keys):
                results[i] = self.cache.get(key)
        todo = [i for i, result in enumerate(results) if result is None]
        if len(todo) < len(requests):
            log.info(
                "%s: %d of %d answers from the cache",
                self.name,
                len(requests) - len(todo),
                len(requests),
            )

        def store(j: int, result: ChatResult) -> None:
            # now, not after the batch: a run stopped later keeps this answer
            if self.cache is not None and isinstance(result, ChatResponse):
                self.cache.put(keys[todo[j]], result)

        fresh = (
            self._complete_uncached([requests[i] for i in todo], progress=progress, on_result=store)
            if todo
            else []
        )
        for i, result in zip(todo, fresh, strict=True):
            results[i] = result
        return [r for r in results if r is not None]

    @abstractmethod
    def _complete_uncached(
        self,
        requests: Sequence[ChatRequest],
        *,
        progress: bool,
        on_result: Callable[[int, ChatResult], None],
    ) -> list[ChatResult]:
        """Generate answers for requests the cache did not have, in order.

        ``on_result(i, answer)`` is called once for each request ``i`` as soon as its
        answer (or failure) is known, before the next batch is generated or sent.
        """
