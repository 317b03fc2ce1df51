"""Building a chat backend from the ``llm`` section of the configuration.

``kind`` picks the backend: ``none`` (no language model: steps that need one
are off), ``openai`` (an OpenAI-compatible HTTP server) or ``transformers``
(a local causal LM, whose ``model`` is any form
:func:`synthdeid.llm.models.resolve_model` accepts: ``bundled:smollm2``, a
mapping ``{package, file}``, a GGUF file, a model directory or a hub id; it
is resolved here, so a missing package or file fails before any work).
Every other key must belong to the chosen kind; an unknown kind or key is a
:class:`ConfigError` that lists the allowed ones, so a typo never silently
falls back to a default. With ``kind: none`` the keys
of the other kinds may stay in place (switching a backend off should not
mean deleting its settings). Secrets never appear here: ``api_key_env``
names the environment variable that holds the key.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from synthdeid.errors import ConfigError
from synthdeid.llm.base import ChatBackend
from synthdeid.llm.cache import ResponseCache
from synthdeid.llm.guard import GuardedBackend, RequestGuard

log = logging.getLogger(__name__)

KINDS = ("none", "openai", "transformers")
OPENAI_KEYS = (
    "base_url",
    "model",
    "api_key_env",
    "timeout_s",
    "max_retries",
    "backoff_s",
    "concurrency",
    "grammar",
    "fold_system",
)
TRANSFORMERS_KEYS = ("model", "batch_size", "device", "dtype", "max_new_tokens", "fold_system")
REQUIRED = {"openai": ("base_url", "model"), "transformers": ("model",)}
ALLOWED = {
    "none": tuple(dict.fromkeys((*OPENAI_KEYS, *TRANSFORMERS_KEYS))),
    "openai": OPENAI_KEYS,
    "transformers": TRANSFORMERS_KEYS,
}


def build_backend(
    settings: Mapping[str, Any],
    *,
    cache_dir: str | Path | None = None,
    guard: RequestGuard | None = None,
    where: str = "llm",
) -> ChatBackend | None:
    """The backend ``settings`` describe (None for ``kind: none``).

    ``cache_dir``: where answers are cached (None: no cache). ``guard``: when
    given, the backend is wrapped in a :class:`GuardedBackend`. ``where``
    names the configuration section in error messages.
    """
    if not isinstance(settings, Mapping):
        raise ConfigError(
            f"{where} must be a mapping with a 'kind' key, not {type(settings).__name__}"
        )
    kind = settings.get("kind", "none")
    if kind not in KINDS:
        raise ConfigError(f"{where}.kind must be one of {list(KINDS)}, not {kind!r}")
    options = {k: v for k, v in settings.items() if k != "kind"}
    _check_keys(options, kind, where)
    if kind == "none":
        return None
    cache = ResponseCache(cache_dir) if cache_dir is not None else None
    try:
        backend = _build(kind, options, cache)
    except ConfigError as error:
        raise ConfigError(f"{where} ({kind}): {error}") from None
    log.info("LLM backend: %s", backend.describe())
    return GuardedBackend(backend, guard) if guard is not None else backend


def _check_keys(options: Mapping[str, Any], kind: str, where: str) -> None:
    allowed = ALLOWED[kind]
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {unknown} for kind {kind!r}; allowed: {['kind', *allowed]}"
        )
    missing = [key for key in REQUIRED.get(kind, ()) if options.get(key) in (None, "")]
    if missing:
        raise ConfigError(f"{where}: kind {kind!r} needs {missing}")


def _build(kind: str, options: Mapping[str, Any], cache: ResponseCache | None) -> ChatBackend:
    if kind == "openai":
        from synthdeid.llm.openai_http import OpenAICompatibleBackend

        return OpenAICompatibleBackend(cache=cache, **options)
    from synthdeid.llm.transformers_local import TransformersBackend

    return TransformersBackend(cache=cache, **options)
