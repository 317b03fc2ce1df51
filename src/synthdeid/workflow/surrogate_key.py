"""The surrogate key as the workflow sees it: its fingerprint, and the demo key's refusal."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from synthdeid.errors import ConfigError
from synthdeid.surrogate.keying import (
    DEMO_CORPUS_FILE,
    DEMO_SOURCE,
    SurrogateKey,
    demo_key_refusal,
    is_demo_key,
    load_key,
    read_key_file,
)


def key_fingerprint(key_file: str | None, rule: str) -> str:
    """Fingerprint of the surrogate key (never the key), for ``rule``'s params.

    The key comes from ``key_file``, else ``$SYNTHDEID_SECRET``; a missing or
    weak one is refused with the rule named.
    """
    try:
        return load_key(key_file).fingerprint()
    except ConfigError as exc:
        raise ConfigError(f"{rule}: {exc}") from None


def uses_embedded_demo_corpus(corpus: Mapping[str, Any]) -> bool:
    """Whether the corpus is the synthetic demo corpus shipped in resources/demo/."""
    return (
        not corpus.get("path_env")
        and corpus.get("source") == DEMO_SOURCE
        and Path(corpus.get("path") or "").resolve() == Path(DEMO_CORPUS_FILE).resolve()
    )


def check_demo_key(corpus: Mapping[str, Any], key_file: str | None) -> None:
    """The public demo key is refused for any corpus but the embedded demo corpus.

    Named configs merge over config.yaml, so one that does not reset
    surrogate.key_file inherits the demo key file; it is recognised by its
    fingerprint, wherever it lies.
    """
    if not key_file or uses_embedded_demo_corpus(corpus):
        return
    try:
        demo = is_demo_key(SurrogateKey(read_key_file(key_file)))
    except ConfigError:
        return  # unreadable: the rules that need the key say why
    if demo:
        raise ConfigError(demo_key_refusal("surrogate.key_file", f"corpus {corpus['name']!r}"))
