"""Where local-only artifacts live, and how they are marked.

Some artifacts hold real PHI or what reveals it: the mask step's removed
values (original surfaces), the surrogate step's original offsets (the length
of every original value) and its leftovers (original surfaces still in the
output). They are needed on the machine that made them (the request guard,
the seed-PHI screen, carrying annotation layers over) and must never be
released. Every one of them sits in a ``local/`` folder of its step's results
(``results/<rule>/<corpus>/local/``), which the report and any export never
read, and carries ``synthdeid.local_only = true`` in its Parquet metadata or a
``"local_only": true`` key in its JSON. A stage refuses a path given for such an
artifact that does not lie in a ``local/`` folder (:func:`require_local_path`),
judged on where the path really leads, not on how it is spelled.
"""

from __future__ import annotations

from pathlib import Path

from synthdeid.errors import ConfigError

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
    """Whether ``path`` lies in a ``local/`` folder (relative or absolute).

    Judged on the folder the file would really be written to: ``..`` normalised
    and the symlinks of its folder resolved (``pub/local/../x`` is ``pub/x``;
    ``local/link/x`` with ``link`` leading out of ``local/`` is not local). Of a
    path under the working folder only the part below it counts, so a working
    folder that happens to be called ``local`` makes nothing local.
    """
    folder = Path(path).parent.resolve()
    working = Path.cwd().resolve()
    if folder.is_relative_to(working):  # else the whole path counts
        folder = folder.relative_to(working)
    return LOCAL_DIR in folder.parts


def require_local_path(path: str | Path, argument: str, holds: str) -> None:
    """ConfigError unless ``path`` (given as ``argument``, an artifact that ``holds``
    PHI or what reveals it) lies in a ``local/`` folder (:func:`is_local_path`)."""
    if not is_local_path(path):
        raise ConfigError(
            f"{argument} {path}: must lie in a {LOCAL_DIR}/ folder (it holds {holds}); "
            f"write it under results/<rule>/<corpus>/{LOCAL_DIR}/"
        )
