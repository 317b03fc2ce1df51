"""A response cache on disk: one JSON file per request hash.

A pipeline rerun with the same requests (same prompts, settings, model) must
not pay for, or wait on, the same answers twice, and a crashed run must not
lose the answers it already had. Each successful answer is stored at
``<directory>/<key[:2]>/<key>.json``, written atomically, as soon as it
arrives. A file that cannot be read or parsed is a miss (logged, then
overwritten by the next answer). The cache holds model output only, never the
request text.

Jobs may share a cache (the shards of a teacher or of template generation):
an entry is written to a temporary name of its own process and renamed into
place, so a reader sees a whole entry or none, and a folder is never removed
once made.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

from synthdeid.artifacts import write_json_atomic
from synthdeid.llm.base import ChatResponse

log = logging.getLogger(__name__)

_KEY_RE = re.compile(r"[0-9a-f]{16,128}")


class ResponseCache:
    """Cached :class:`ChatResponse` objects by request hash (see :func:`request_hash`)."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.hits = 0
        self.misses = 0

    def path(self, key: str) -> Path:
        if not _KEY_RE.fullmatch(key):
            raise ValueError(f"not a request hash: {key!r}")
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> ChatResponse | None:
        """The cached answer (``cached=True``), or None when absent or unreadable."""
        path = self.path(key)
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            response = ChatResponse(
                text=_string(record["text"]),
                model=_string(record["model"]),
                input_tokens=_optional_int(record.get("input_tokens")),
                output_tokens=_optional_int(record.get("output_tokens")),
                cached=True,
            )
            if record.get("key") != key:
                raise ValueError("the file holds another key")
        except FileNotFoundError:
            self.misses += 1
            return None
        except (OSError, ValueError, KeyError, TypeError) as error:
            log.warning(
                "response cache: unreadable entry %s (%s); treated as a miss",
                path,
                type(error).__name__,
            )
            self.misses += 1
            return None
        self.hits += 1
        return response

    def put(self, key: str, response: ChatResponse) -> None:
        record = {
            "key": key,
            "text": response.text,
            "model": response.model,
            "input_tokens": response.input_tokens,
            "output_tokens": response.output_tokens,
        }
        path = self.path(key)
        # made here, not by the atomic write: a write that fails removes the folders it
        # made, and another job sharing the cache (a shard) may be writing into this one
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(record, path)


def _string(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value


def _optional_int(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"token count must be an integer, got {type(value).__name__}")
    return value
