"""Loading the source table of clinical variables: a file, or a scikit-learn dataset.

``{path: table.csv}`` (also ``.tsv``, ``.parquet``) reads a file; ``{sklearn:
breast_cancer}`` loads a dataset shipped inside scikit-learn (the demo: the
Wisconsin diagnostic breast cancer data, 569 real patients; nothing of it is
copied into this repository). Exactly one of the two keys holds a value: a
named config switches the source by setting the inherited key to null
(``{path: table.csv, sklearn: null}``), and :func:`chosen_source` drops it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from synthdeid.errors import ConfigError, InputError

if TYPE_CHECKING:  # pandas is imported when a table is read: the workflow parses this module
    import pandas as pd

SKLEARN_DATASETS = ("breast_cancer",)


def describe_source(source: Mapping[str, Any]) -> str:
    """How the source reads in logs and errors: the path, or ``sklearn:<name>``."""
    chosen = chosen_source(source)
    if "path" in chosen:
        return str(chosen["path"])
    return f"sklearn:{chosen['sklearn']}"


def chosen_source(source: Mapping[str, Any]) -> dict[str, Any]:
    """The source setting without its null keys: ``{"path": ...}`` or ``{"sklearn": ...}``.

    ConfigError unless exactly one of the two keys holds a value (a named config
    that switches the source sets the inherited key to null) and it is usable.
    """
    if not isinstance(source, Mapping):
        raise ConfigError(f"synth.tabular.table.source must be a mapping, got {source!r}")
    unknown = sorted(set(source) - {"path", "sklearn"})
    if unknown:
        raise ConfigError(f"synth.tabular.table.source: unknown keys {unknown}")
    chosen = {key: value for key, value in source.items() if value is not None}
    if len(chosen) != 1:
        raise ConfigError(
            "synth.tabular.table.source must give exactly one of 'path' (a CSV, TSV or Parquet "
            f"file) and 'sklearn' (one of {list(SKLEARN_DATASETS)}), got {sorted(chosen) or 'none'}; "
            "a named config that switches the source sets the other key to null"
        )
    if "sklearn" in chosen and chosen["sklearn"] not in SKLEARN_DATASETS:
        raise ConfigError(
            f"synth.tabular.table.source.sklearn must be one of {list(SKLEARN_DATASETS)}, "
            f"not {chosen['sklearn']!r}"
        )
    if "path" in chosen and not isinstance(chosen["path"], str):
        raise ConfigError("synth.tabular.table.source.path must be a file path (a string)")
    return chosen


def read_source_table(source: Mapping[str, Any]) -> pd.DataFrame:
    """The raw source table, one row per record, columns as the file or dataset names them."""
    import pandas as pd

    source = chosen_source(source)
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
