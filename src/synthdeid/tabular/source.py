"""Loading the source table of clinical variables: a file, or a scikit-learn dataset.

``{path: table.csv}`` (also ``.tsv``, ``.parquet``) reads a file; ``{sklearn:
breast_cancer}`` loads a dataset shipped inside scikit-learn (the demo: the
Wisconsin diagnostic breast cancer data, 569 real patients; nothing of it is
copied into this repository). Exactly one of the two keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from synthdeid.errors import ConfigError, InputError

SKLEARN_DATASETS = ("breast_cancer",)


def describe_source(source: Mapping[str, Any]) -> str:
    """How the source reads in logs and errors: the path, or ``sklearn:<name>``."""
    if "path" in source:
        return str(source["path"])
    return f"sklearn:{source.get('sklearn')}"


def check_source(source: Mapping[str, Any]) -> None:
    if not isinstance(source, Mapping) or len(set(source) & {"path", "sklearn"}) != 1:
        raise ConfigError(
            "synth.tabular.table.source must have exactly one of 'path' (a CSV, TSV or Parquet "
            f"file) and 'sklearn' (one of {list(SKLEARN_DATASETS)}); got {source!r}"
        )
    unknown = sorted(set(source) - {"path", "sklearn"})
    if unknown:
        raise ConfigError(f"synth.tabular.table.source: unknown keys {unknown}")
    if "sklearn" in source and source["sklearn"] not in SKLEARN_DATASETS:
        raise ConfigError(
            f"synth.tabular.table.source.sklearn must be one of {list(SKLEARN_DATASETS)}, "
            f"not {source['sklearn']!r}"
        )


def read_source_table(source: Mapping[str, Any]) -> pd.DataFrame:
    """The raw source table, one row per record, columns as the file or dataset names them."""
    check_source(source)
    if "sklearn" in source:
        from sklearn.datasets import load_breast_cancer

        return load_breast_cancer(as_frame=True).frame
    path = Path(source["path"])
    suffix = path.suffix.lower()
    try:
        if suffix == ".parquet":
            return pd.read_parquet(path)
        if suffix in (".csv", ".tsv"):
            return pd.read_csv(path, sep="\t" if suffix == ".tsv" else ",")
    except FileNotFoundError:
        raise InputError(path, None, "file not found") from None
    except (OSError, ValueError, pd.errors.ParserError) as error:
        raise InputError(path, None, f"not a readable table: {error}") from None
    raise InputError(path, None, f"unsupported table format {suffix!r}; use .csv, .tsv or .parquet")
