"""Where local-only artifacts live, and how they are marked.

Some artifacts hold real PHI or what reveals it: the mask step's removed
values (original surfaces), the surrogate step's original offsets (the length
of every original value) and its leftovers (original surfaces still in the
output). They are needed on the machine that made them (the request guard,
the seed-PHI screen, carrying annotation layers over) and must never be
released. Every one of them sits in a ``local/`` folder of its step's results
(``results/<rule>/<corpus>/local/``), which the report and any export never
read, and carries ``synthdeid.local_only = true`` in its Parquet metadata or a
``"local_only": true`` key in its JSON.
"""

from __future__ import annotations

from pathlib import Path

LOCAL_DIR = "local"
LOCAL_ONLY_KEY = b"synthdeid.local_only"
LOCAL_ONLY_METADATA = {LOCAL_ONLY_KEY: b"true"}


def local_path(output: str | Path, suffix: str) -> Path:
    """The default local-only path that goes with a step's ``output``.

    ``results/x/demo/notes.parquet`` with suffix ``.leftovers.json`` gives
    ``results/x/demo/local/notes.leftovers.json``.
    """
    out = Path(output)
    stem = out.with_suffix("").name
    return out.parent / LOCAL_DIR / f"{stem}{suffix}"


def is_local_path(path: str | Path) -> bool:
    """Whether ``path`` lies in a ``local/`` folder (relative or absolute)."""
    return LOCAL_DIR in Path(path).parts[:-1]
