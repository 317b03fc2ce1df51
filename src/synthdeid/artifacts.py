"""Writing artifacts atomically, with provenance.

Every artifact is written to a temporary file in the destination folder and
renamed into place, so a failed step never leaves a half-written output for
Snakemake (or a person) to mistake for a result. Provenance (step, parameters,
code version, input digests) travels in the Parquet key-value metadata under
``synthdeid.provenance``, or in a JSON sidecar for other files.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
import pyarrow.parquet as pq

import synthdeid
from synthdeid.errors import InputError

PROVENANCE_KEY = b"synthdeid.provenance"


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it to ``path`` on success.

    On any exception the temporary file is removed and ``path`` is left as it
    was (absent if it did not exist).
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    # mkstemp creates 0600; give the artifact the permissions of an ordinary file
    umask = os.umask(0)
    os.umask(umask)
    tmp.chmod(0o666 & ~umask)
    try:
        yield tmp
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()


@contextmanager
def atomic_directory(path: str | Path) -> Iterator[Path]:
    """Yield a fresh staging directory beside ``path``; it replaces ``path`` on success.

    A crash (any exception) removes the staging directory and leaves ``path``
    as it was, so a half-written model directory never appears.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    # mkdtemp creates 0700; give the directory the permissions of an ordinary one
    umask = os.umask(0)
    os.umask(umask)
    staging.chmod(0o777 & ~umask)
    try:
        yield staging
        if target.exists():
            shutil.rmtree(target)
        os.replace(staging, target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


@contextmanager
def atomic_text(path: str | Path) -> Iterator[IO[str]]:
    """Open a text file for writing that appears at ``path`` only when complete."""
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8", newline="\n") as handle:
        yield handle


def write_json_atomic(obj: Any, path: str | Path) -> None:
    with atomic_text(path) as handle:
        json.dump(obj, handle, indent=2, sort_keys=True, ensure_ascii=False)
        handle.write("\n")


def write_parquet_atomic(
    table: pa.Table, path: str | Path, provenance: Mapping[str, Any] | None = None
) -> None:
    if provenance is not None:
        metadata = dict(table.schema.metadata or {})
        metadata[PROVENANCE_KEY] = json.dumps(provenance, sort_keys=True).encode()
        table = table.replace_schema_metadata(metadata)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd")


def open_parquet(path: str | Path) -> pq.ParquetFile:
    """Open a Parquet file for reading (whole or batch by batch), with clear errors."""
    try:
        return pq.ParquetFile(path)
    except FileNotFoundError:
        raise InputError(path, None, "file not found") from None
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputError(path, None, f"not a readable Parquet file: {exc}") from exc


def read_parquet_with_provenance(path: str | Path) -> tuple[pa.Table, dict[str, Any]]:
    """Read a Parquet artifact and its provenance (empty if it has none)."""
    table = open_parquet(path).read()
    raw = (table.schema.metadata or {}).get(PROVENANCE_KEY)
    return table, (json.loads(raw) if raw else {})


def file_digest(path: str | Path) -> str:
    """SHA-256 of a file's bytes, as ``sha256:<hex>``."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return f"sha256:{digest.hexdigest()}"


def files_digest(paths: list[Path], root: Path) -> str:
    """One digest over several files: their names relative to ``root`` and contents."""
    digest = hashlib.sha256()
    for path in sorted(paths):
        digest.update(f"{path.relative_to(root) if path != root else path.name}\0".encode())
        digest.update(file_digest(path).encode())
    return f"sha256:{digest.hexdigest()}"


def code_version() -> str:
    """Package version plus the git commit of the source tree when there is one."""
    version = synthdeid.__version__
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return version
    return f"{version}+g{commit}" if commit else version


def make_provenance(
    step: str,
    params: Mapping[str, Any],
    inputs: Mapping[str, str | Path] | None = None,
) -> dict[str, Any]:
    """Provenance record for an artifact: step, parameters, code version, inputs.

    Inputs are recorded by name, path and content digest (files; a folder's
    digest is added by the caller, see :func:`files_digest`), so two artifacts
    can be compared without trusting file names. Secrets never belong in ``params``.
    """
    recorded_inputs = {}
    for name, value in (inputs or {}).items():
        p = Path(value)
        recorded_inputs[name] = {"path": str(p), "digest": file_digest(p) if p.is_file() else None}
    return {
        "step": step,
        "params": dict(params),
        "code_version": code_version(),
        "inputs": recorded_inputs,
    }
