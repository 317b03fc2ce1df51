"""Reading and writing discretized tables (Parquet, explicit all-string schema).

A discretized table holds ``record_id`` (str), one string column per spec
variable and, depending on the artifact, ``split`` (``train`` / ``holdout``:
the prepared real table) or ``sample`` (int32: which of the independent
synthetic samples a row belongs to). Every value is checked against the
spec's domain when read, so a synthesizer's stray output never reaches the
metrics or a language model unnoticed.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from synthdeid.artifacts import read_parquet_with_provenance, require_columns, write_parquet_atomic
from synthdeid.errors import ConfigError, InputError
from synthdeid.tabular.spec import TableSpec, check_categories

TRAIN = "train"
HOLDOUT = "holdout"
SPLITS = (TRAIN, HOLDOUT)


def table_schema(spec: TableSpec, extra: Mapping[str, pa.DataType]) -> pa.Schema:
    """``record_id``, the ``extra`` columns, then every variable as a string column."""
    return pa.schema(
        [
            pa.field("record_id", pa.string(), nullable=False),
            *(pa.field(name, kind, nullable=False) for name, kind in extra.items()),
            *(pa.field(name, pa.string(), nullable=False) for name in spec.names),
        ]
    )


def write_table(
    frame: pd.DataFrame,
    spec: TableSpec,
    path: str | Path,
    provenance: Mapping[str, Any],
    extra: Mapping[str, pa.DataType],
) -> None:
    """Write ``frame`` with the explicit schema (checked against the spec first), atomically."""
    check_categories(frame, spec, path)
    schema = table_schema(spec, extra)
    table = pa.Table.from_pandas(frame[schema.names], schema=schema, preserve_index=False)
    write_parquet_atomic(table, path, provenance)


def read_table(
    path: str | Path, spec: TableSpec, extra: tuple[str, ...] = ()
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """A discretized table and its provenance; every value is checked against the spec."""
    table, provenance = read_parquet_with_provenance(path)
    expected = ["record_id", *extra, *spec.names]
    require_columns(path, table.column_names, expected, f"a discretized {spec.name} table")
    frame = table.to_pandas()
    check_categories(frame, spec, path)
    return frame, provenance


def split_parts(frame: pd.DataFrame, path: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The train and holdout rows of a prepared table (both must be non-empty)."""
    parts = []
    for name in SPLITS:
        part = frame[frame["split"] == name].reset_index(drop=True)
        if part.empty:
            raise InputError(path, None, f"the prepared table has no {name!r} rows")
        parts.append(part)
    return parts[0], parts[1]


def split_labels(n: int, holdout_fraction: float, seed: int) -> list[str]:
    """``train`` / ``holdout`` per record: a seeded permutation, holdout = round(fraction * n)."""
    if not 0 < holdout_fraction < 1:
        raise ConfigError(f"holdout_fraction must be in (0, 1), got {holdout_fraction}")
    n_holdout = round(holdout_fraction * n)
    if n_holdout < 1 or n_holdout >= n:
        raise ConfigError(f"{n} records cannot be split with holdout_fraction {holdout_fraction}")
    order = np.random.default_rng(seed).permutation(n)
    labels = np.full(n, TRAIN, dtype=object)
    labels[order[:n_holdout]] = HOLDOUT
    return labels.tolist()
