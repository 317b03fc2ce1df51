"""Writing artifacts atomically, with provenance.

Every artifact is written to a temporary file in the destination folder and
renamed into place, so a failed step never leaves a half-written output for
Snakemake (or a person) to mistake for a result. Provenance (step, parameters,
code version, input digests) travels in the Parquet key-value metadata under
``synthdeid.provenance``, or in a JSON sidecar for other files.

Temporary files and staging folders are named ``.<output name>.synthdeid-tmp-
<host>-<pid>-<random>``: they may hold PHI (the mask step's removed values),
so they are removed when a step fails or is stopped by a signal
(``synthdeid.cli`` turns SIGTERM, SIGHUP and SIGINT into an exception), and a
step removes the ones a killed run left for its outputs before it starts
(:func:`remove_stale_temporaries`).
"""

from __future__ import annotations

import glob
import hashlib
import json
import logging
import os
import re
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
import pyarrow.parquet as pq

import synthdeid
from synthdeid.code_identity import running_code_digest
from synthdeid.errors import ConfigError, InputError, read_error_detail
from synthdeid.termination import raise_if_stopped, stops_deferred

log = logging.getLogger(__name__)

PROVENANCE_KEY = b"synthdeid.provenance"
# which shard of which set a shard artifact is (synthdeid.shards); readers refuse one
SHARD_KEY = b"synthdeid.shard"
TEMP_MARKER = ".synthdeid-tmp-"
MAX_LISTED_COLUMNS = 8  # missing columns named in an error, at most
HOST_TAG = re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname())[:32] or "host"
_OWNER = re.compile(re.escape(TEMP_MARKER) + r"(?P<host>.+)-(?P<pid>\d+)-[^-]+$")


def temporary_prefix(target: Path) -> str:
    """The name prefix of this process's temporary files for ``target``."""
    return f".{target.name}{TEMP_MARKER}{HOST_TAG}-{os.getpid()}-"


def _owner_alive(name: str) -> bool | None:
    """Whether the process that made temporary entry ``name`` still runs; None: unknown.

    Unknown when the name does not say, or when it was made on another host.
    This process counts as not running: it has written nothing yet when it
    cleans up, so an entry with its pid is from an earlier process.
    """
    owner = _OWNER.search(name)
    if owner is None or owner["host"] != HOST_TAG:
        return None
    pid = int(owner["pid"])
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it to ``path`` on success.

    On any exception (a stopping signal included, see :mod:`synthdeid.termination`)
    the temporary file and the folders made for it are removed, and ``path``
    is left as it was (absent if it did not exist).
    """
    target = Path(path)
    created: list[Path] = []
    tmp: Path | None = None
    done = False
    try:
        with stops_deferred():  # a stop waits until the cleanup below knows what to remove
            created = make_parents(target)
            fd, tmp_name = tempfile.mkstemp(prefix=temporary_prefix(target), dir=target.parent)
            tmp = Path(tmp_name)
            try:
                # mkstemp creates 0600; give the artifact the permissions of an ordinary file
                # (through the descriptor: a link put in the temporary's place is not followed)
                os.fchmod(fd, 0o666 & ~_umask())
            finally:
                os.close(fd)
        yield tmp
        raise_if_stopped()
        os.replace(tmp, target)
        done = True
    finally:
        if tmp is not None and not done:
            tmp.unlink(missing_ok=True)
        if not done:
            remove_empty_folders(created)


@contextmanager
def atomic_directory(path: str | Path) -> Iterator[Path]:
    """Yield a fresh staging directory beside ``path``; it replaces ``path`` on success.

    A crash (any exception) removes the staging directory and the folders made
    for it and leaves ``path`` as it was, so a half-written model directory
    never appears.
    """
    target = Path(path)
    created: list[Path] = []
    staging: Path | None = None
    done = False
    try:
        with stops_deferred():  # a stop waits until the cleanup below knows what to remove
            created = make_parents(target)
            staging = Path(tempfile.mkdtemp(prefix=temporary_prefix(target), dir=target.parent))
        # mkdtemp creates 0700; give the directory the permissions of an ordinary one
        staging.chmod(0o777 & ~_umask())
        yield staging
        raise_if_stopped()
        if target.exists():
            shutil.rmtree(target)
        os.replace(staging, target)
        done = True
    finally:
        if staging is not None and not done:
            shutil.rmtree(staging, ignore_errors=True)
        if not done:
            remove_empty_folders(created)


def _umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


def make_parents(target: Path) -> list[Path]:
    """Create ``target``'s missing parent folders; returns them, deepest first."""
    missing = []
    parent = target.parent.absolute()
    while not parent.exists():
        missing.append(parent)
        parent = parent.parent
    target.parent.mkdir(parents=True, exist_ok=True)
    return missing


def remove_empty_folders(folders: list[Path]) -> None:
    """Remove the folders a failed write made (deepest first), where still empty."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:  # not empty (another output went there) or gone
            return


def remove_stale_temporaries(outputs: Iterable[str | Path]) -> int:
    """Remove the temporary files and staging folders stopped runs left for ``outputs``.

    Beside each output, every ``.<name>.synthdeid-tmp-*`` entry unless a live
    process on this host made it (an output belongs to one step, so any other
    is stale). Inside an output folder, the temporary entries of finished
    processes of this host: another step may write there at the same time.
    Returns how many were removed and logs the count per output (names only,
    never content). Call it before the step writes anything.
    """
    removed = 0
    for output in outputs:
        target = Path(output)
        stale = []
        if target.parent.is_dir():
            beside = target.parent.glob(f".{glob.escape(target.name)}{TEMP_MARKER}*")
            stale += [p for p in sorted(beside) if _owner_alive(p.name) is not True]
        if target.is_dir():
            stale += [p for p in _temporaries_inside(target) if _owner_alive(p.name) is False]
        for entry in stale:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink(missing_ok=True)
        if stale:
            log.info("removed %d stale temporary file(s) of %s", len(stale), target)
        removed += len(stale)
    return removed


def _temporaries_inside(folder: Path) -> list[Path]:
    found = []
    for root, dirs, files in os.walk(folder):
        for name in sorted(files + dirs):
            if name.startswith(".") and TEMP_MARKER in name:
                found.append(Path(root, name))
        dirs[:] = [d for d in dirs if not (d.startswith(".") and TEMP_MARKER in d)]
    return found


@contextmanager
def atomic_text(path: str | Path) -> Iterator[IO[str]]:
    """Open a text file for writing that appears at ``path`` only when complete."""
    with (
        atomic_path(path) as tmp,
        open(tmp, "w", encoding="utf-8", newline="\n", opener=_open_no_follow) as handle,
    ):
        yield handle


def _open_no_follow(path: str, flags: int) -> int:
    """``os.open`` that refuses (ELOOP) a symbolic link put in place of the temporary file."""
    return os.open(path, flags | os.O_NOFOLLOW, 0o666)


@contextmanager
def reading_record(path: Path, what: str) -> Iterator[None]:
    """Read a JSON record inside this block: an unreadable file, bad JSON or a
    missing or ill-typed field becomes an InputError naming ``path`` and ``what``,
    told by :func:`~synthdeid.errors.read_error_detail` (never the file's bytes).
    An InputError or ConfigError raised inside passes as it is."""
    try:
        yield
    except (InputError, ConfigError):
        raise
    except OSError as exc:
        raise InputError(path, None, f"unreadable {what}: {exc}") from exc
    except (KeyError, TypeError, ValueError) as exc:  # JSONDecodeError is a ValueError
        raise InputError(path, None, f"not a valid {what}: {read_error_detail(exc)}") from None


def write_json_atomic(obj: Any, path: str | Path) -> None:
    with atomic_text(path) as handle:
        write_json(obj, handle)


def write_json(obj: Any, handle: IO[str]) -> None:
    """``obj`` as every JSON artifact is written: indented, keys sorted, UTF-8."""
    json.dump(obj, handle, indent=2, sort_keys=True, ensure_ascii=False)
    handle.write("\n")


def write_parquet_atomic(
    table: pa.Table,
    path: str | Path,
    provenance: Mapping[str, Any] | None = None,
    *,
    metadata: Mapping[bytes, bytes] | None = None,
) -> None:
    with parquet_writer(path, table.schema, provenance, metadata=metadata) as writer:
        writer.write(table)


ROW_GROUP_ROWS = 8192  # rows per Parquet row group: what a reader holds at once


class RowGroupWriter:
    """Appends tables to an open Parquet file in row groups of exactly ``row_group_rows`` rows.

    The row groups depend only on the rows written, in order, not on how they
    were cut into tables; so a table written whole and the same rows written
    piece by piece (a streamed step, the gather of shards) give the same bytes.
    """

    def __init__(self, writer: pq.ParquetWriter, schema: pa.Schema, row_group_rows: int) -> None:
        self._writer = writer
        self._schema = schema
        self._rows = row_group_rows
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        self.rows_written = 0

    def write(self, table: pa.Table) -> None:
        self._pending.append(table.select(self._schema.names).cast(self._schema))
        self._pending_rows += table.num_rows
        while self._pending_rows >= self._rows:
            self._flush(self._rows)

    def _flush(self, rows: int) -> None:
        buffered = pa.concat_tables(self._pending)
        # one contiguous chunk per column: page boundaries then depend on the values only
        self._writer.write_table(buffered.slice(0, rows).combine_chunks(), row_group_size=rows)
        rest = buffered.slice(rows)
        self._pending = [rest] if rest.num_rows else []
        self._pending_rows = rest.num_rows
        self.rows_written += rows

    def close(self) -> None:
        """Write the last, shorter row group (an empty table: one empty row group)."""
        if self._pending_rows or not self.rows_written:
            last = pa.concat_tables([self._schema.empty_table(), *self._pending]).combine_chunks()
            self._writer.write_table(last, row_group_size=max(last.num_rows, 1))
            self.rows_written += last.num_rows
            self._pending, self._pending_rows = [], 0


def _as_read_back(data_type: pa.DataType) -> pa.DataType:
    """``data_type`` as Parquet gives it back: list items named ``element``, at every depth."""
    if pa.types.is_list(data_type):
        item = data_type.value_field
        return pa.list_(item.with_name("element").with_type(_as_read_back(item.type)))
    if pa.types.is_struct(data_type):
        return pa.struct(
            [
                f.with_type(_as_read_back(f.type))
                for f in (data_type.field(i) for i in range(data_type.num_fields))
            ]
        )
    return data_type


def _schema_with_provenance(
    schema: pa.Schema, provenance: Mapping[str, Any] | None, extra: Mapping[bytes, bytes]
) -> pa.Schema:
    # the schema a reader gets back, so that rows read from one artifact and written
    # to another give the same file as rows written first-hand
    schema = pa.schema([f.with_type(_as_read_back(f.type)) for f in schema], schema.metadata)
    metadata = dict(schema.metadata or {})
    if provenance is not None:
        metadata[PROVENANCE_KEY] = json.dumps(provenance, sort_keys=True).encode()
    metadata.update(extra)
    return schema.with_metadata(metadata)


@contextmanager
def parquet_writer(
    path: str | Path,
    schema: pa.Schema,
    provenance: Mapping[str, Any] | None = None,
    *,
    metadata: Mapping[bytes, bytes] | None = None,
    row_group_rows: int = ROW_GROUP_ROWS,
) -> Iterator[RowGroupWriter]:
    """Write a Parquet artifact table by table, atomically, in fixed-size row groups.

    ``provenance`` goes in the file's metadata as :func:`write_parquet_atomic`
    puts it, ``metadata`` beside it. Memory holds at most one row group.
    """
    full_schema = _schema_with_provenance(schema, provenance, metadata or {})
    with (
        atomic_path(path) as tmp,
        pq.ParquetWriter(tmp, full_schema, compression="zstd") as writer,
    ):
        rows = RowGroupWriter(writer, full_schema, row_group_rows)
        yield rows
        rows.close()


def iter_row_range(
    source: pq.ParquetFile,
    rows: range | None = None,
    *,
    columns: list[str] | None = None,
    batch_rows: int = ROW_GROUP_ROWS,
) -> Iterator[tuple[int, pa.Table]]:
    """``(first row number, table)`` pieces of ``rows`` (default: all), at most ``batch_rows`` each.

    Only the row groups that overlap ``rows`` are read, one at a time, so a
    shard of a large table costs its own rows, not the rows before it.
    """
    wanted = range(source.metadata.num_rows) if rows is None else rows
    group_start = 0
    for group in range(source.metadata.num_row_groups):
        group_rows = source.metadata.row_group(group).num_rows
        group_stop = group_start + group_rows
        start, stop = max(wanted.start, group_start), min(wanted.stop, group_stop)
        if start < stop:
            table = source.read_row_group(group, columns=columns)
            for first in range(start, stop, batch_rows):
                last = min(first + batch_rows, stop)
                yield first, table.slice(first - group_start, last - first)
        group_start = group_stop
        if group_start >= wanted.stop:
            break


def open_parquet(path: str | Path, *, shard_artifact: bool = False) -> pq.ParquetFile:
    """Open a Parquet file for reading (whole or batch by batch), with clear errors.

    A shard artifact (:data:`SHARD_KEY` in its metadata: some rows of a sharded
    step's output) is refused, wherever it lies, unless ``shard_artifact``: only
    the gather of shards, and a step reading back its own shard, read one.
    """
    try:
        source = pq.ParquetFile(path)
    except FileNotFoundError:
        raise InputError(path, None, "file not found") from None
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputError(path, None, f"not a readable Parquet file: {exc}") from exc
    record = (source.schema_arrow.metadata or {}).get(SHARD_KEY)
    if record is not None and not shard_artifact:
        raise InputError(
            path,
            None,
            f"a shard artifact{_shard_label(record)}, not a whole table",
            "gather the shards with synthdeid gather-shards",
        )
    return source


def _shard_label(record: bytes) -> str:
    """`` (shard K-of-N)`` from a shard record, or nothing where the record does not say."""
    try:
        fields = json.loads(record)
        index, count = fields["index"], fields["count"]
    except (ValueError, TypeError, KeyError):
        return ""
    numbers = isinstance(index, int) and isinstance(count, int)
    return f" (shard {index}-of-{count})" if numbers else ""


def read_parquet_with_provenance(path: str | Path) -> tuple[pa.Table, dict[str, Any]]:
    """Read a Parquet artifact and its provenance (empty if it has none)."""
    table = open_parquet(path).read()
    raw = (table.schema.metadata or {}).get(PROVENANCE_KEY)
    return table, (json.loads(raw) if raw else {})


def require_columns(
    path: str | Path,
    present: Iterable[str],
    expected: Iterable[str],
    table: str,
    hint: str | None = None,
) -> None:
    """Refuse a table that lacks any of the ``expected`` columns.

    ``present``: the table's column names; ``table``: what it should be
    (``"a notes table"``). The :class:`InputError` names the file, what was
    expected and the missing columns, in ``expected`` order (the first
    :data:`MAX_LISTED_COLUMNS`, then how many more).
    """
    names = set(present)
    missing = [name for name in expected if name not in names]
    if not missing:
        return
    listed = str(missing[:MAX_LISTED_COLUMNS])
    if len(missing) > MAX_LISTED_COLUMNS:
        listed += f" and {len(missing) - MAX_LISTED_COLUMNS} more"
    raise InputError(path, None, f"not {table}: missing columns {listed}", hint)


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

    The code is the package version and the digest of the running stage's code
    (:mod:`synthdeid.code_identity`), not the git commit: rerun on unchanged code, a
    step writes the same bytes, so its dependants stay up to date. Inputs are recorded by name, path and content digest (files; a folder's
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
        "code_version": synthdeid.__version__,
        "code_digest": running_code_digest(),
        "inputs": recorded_inputs,
    }
