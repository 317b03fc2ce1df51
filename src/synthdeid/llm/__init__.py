"""Language-model backends for template synthesis, behind a request guard.

:class:`ChatBackend` is the interface (:mod:`.base`); backends are an
OpenAI-compatible HTTP client (:mod:`.openai_http`) and a local transformers
causal LM (:mod:`.transformers_local`), both with an optional on-disk
response cache (:mod:`.cache`). :class:`GuardedBackend` (:mod:`.guard`)
refuses, before sending, any request that contains a seed PHI surface or an
identifier-like string. :func:`build_backend` (:mod:`.factory`) builds one
from the configuration. ``TransformersBackend`` is imported on first use
(it brings torch in).
"""

from __future__ import annotations

from typing import Any

from synthdeid.llm.base import (
    CachedChatBackend,
    ChatBackend,
    ChatFailure,
    ChatMessage,
    ChatRequest,
    ChatResponse,
    ChatResult,
    request_hash,
)
from synthdeid.llm.cache import ResponseCache
from synthdeid.llm.factory import build_backend
from synthdeid.llm.guard import GuardedBackend, GuardFinding, RequestGuard, load_phi_surfaces
from synthdeid.llm.openai_http import OpenAICompatibleBackend

__all__ = [
    "CachedChatBackend",
    "ChatBackend",
    "ChatFailure",
    "ChatMessage",
    "ChatRequest",
    "ChatResponse",
    "ChatResult",
    "GuardFinding",
    "GuardedBackend",
    "OpenAICompatibleBackend",
    "RequestGuard",
    "ResponseCache",
    "TransformersBackend",
    "build_backend",
    "load_phi_surfaces",
    "request_hash",
]


def __getattr__(name: str) -> Any:
    if name == "TransformersBackend":
        from synthdeid.llm.transformers_local import TransformersBackend

        return TransformersBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
