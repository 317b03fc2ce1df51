"""Model files pinned by size and SHA-256, assembled once into the model cache.

Some bundled models ship in pip packages as pieces that are put together on
first use: the ``bundled-mpnet`` encoder as split zip volumes
(:mod:`synthdeid.encoders`), the larger bundled chat models as split GGUF
files (:mod:`synthdeid.llm.models`). Both keep the result under
:func:`model_cache_root` in a folder named after the pins, hold
:func:`assembly_lock` while one process assembles (the others wait, then
reuse the result), check every byte against a :class:`PinnedFile` as it is
copied (:func:`copy_hashed`), and write :data:`ASSEMBLED_MARKER` into the
folder when it is complete.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from synthdeid.errors import ConfigError

ASSEMBLED_MARKER = "synthdeid_bundled.json"
CHUNK = 1 << 20


@dataclass(frozen=True)
class PinnedFile:
    """The size and SHA-256 (hex) a file must have."""

    size: int
    sha256: str


def model_cache_root() -> Path:
    """Where assembled and converted models are kept (``$SYNTHDEID_MODEL_CACHE``, default
    ``~/.cache/synthdeid/models``)."""
    configured = os.environ.get("SYNTHDEID_MODEL_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "synthdeid" / "models"


def manifest_digest(files: Mapping[str, PinnedFile]) -> str:
    """SHA-256 (hex) over the pinned names, sizes and hashes."""
    lines = "".join(f"{name}\t{pin.size}\t{pin.sha256}\n" for name, pin in sorted(files.items()))
    return hashlib.sha256(lines.encode()).hexdigest()


@contextmanager
def assembly_lock(target: Path) -> Iterator[None]:
    """Hold the lock file ``.<name>.lock`` beside ``target``: one process assembles it at a
    time, the others wait here (then find it done). A cache folder that cannot be written
    is a ConfigError."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        lock = open(target.parent / f".{target.name}.lock", "a")  # noqa: SIM115 - held below
    except OSError as error:
        raise ConfigError(
            f"cannot write the model cache {target.parent} ({error}); point "
            "SYNTHDEID_MODEL_CACHE at a writable folder"
        ) from error
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def copy_hashed(source: IO[bytes], out: IO[bytes], *also: Callable[[bytes], object]) -> PinnedFile:
    """Copy ``source`` to ``out`` in chunks; the size and SHA-256 of what was copied
    (``also`` get every chunk too, e.g. the ``update`` of a digest over several copies)."""
    digest = hashlib.sha256()
    size = 0
    while chunk := source.read(CHUNK):
        digest.update(chunk)
        for update in also:
            update(chunk)
        size += len(chunk)
        out.write(chunk)
    return PinnedFile(size, digest.hexdigest())
