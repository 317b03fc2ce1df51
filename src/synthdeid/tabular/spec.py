"""The variable spec of a clinical table, and discretization by it (Lorenzo et al. 2026, section 2.1).

A spec (YAML; ``resources/tabular/breast_cancer.yaml`` is the demo's) lists the
variables taken from the source table. Each is either

- ``categorical``: raw values mapped to categories (``merge`` consolidates
  fine-grained values into broader classes; a value already equal to a
  category stays as is), or
- ``binned``: a number cut into clinically meaningful ranges ``[low, high)``
  (the last range includes its high end).

The spec also says how a variable reads in text (``label``, ``unit``, the
``mentions`` a report uses for it and, for categories, their ``phrases``),
which the verbalizer and the faithfulness checker share. The categories of
every variable come from the spec, never from the data, so a DP synthesizer
spends no privacy budget learning the domain. Columns of the source table
that the spec does not name are never read past loading: nothing but the
listed variables reaches a synthesizer or a language model.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from synthdeid.artifacts import require_columns
from synthdeid.errors import ConfigError, InputError

CATEGORICAL = "categorical"
BINNED = "binned"
KINDS = (CATEGORICAL, BINNED)
MISSING = "unknown"
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]*$")
VARIABLE_KEYS = {
    "name",
    "column",
    "kind",
    "label",
    "unit",
    "mentions",
    "categories",
    "merge",
    "phrases",
    "bins",
    "allow_missing",
    "decimals",
}


@dataclass(frozen=True)
class Bin:
    """One range of a binned variable: ``[low, high)``, or ``[low, high]`` for the last."""

    low: float
    high: float

    @property
    def label(self) -> str:
        return f"{format_number(self.low)}-{format_number(self.high)}"


@dataclass(frozen=True)
class Variable:
    """One variable of the spec (see the module docstring)."""

    name: str
    column: str
    kind: str
    label: str
    unit: str = ""
    mentions: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    merge: Mapping[str, str] = field(default_factory=dict)
    phrases: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    bins: tuple[Bin, ...] = ()
    allow_missing: bool = False
    decimals: int = 2

    @property
    def domain(self) -> tuple[str, ...]:
        """Every value the discretized column can take, in spec order."""
        values = self.categories if self.kind == CATEGORICAL else tuple(b.label for b in self.bins)
        return (*values, MISSING) if self.allow_missing else values

    def bin_of(self, label: str) -> Bin:
        for candidate in self.bins:
            if candidate.label == label:
                return candidate
        raise KeyError(f"{self.name}: no bin labelled {label!r}")

    def phrases_of(self, category: str) -> tuple[str, ...]:
        """Surface forms of a category in text (default: the category, underscores as spaces)."""
        return self.phrases.get(category) or (category.replace("_", " "),)

    def discretize(self, value: Any) -> str | None:
        """The category of one raw value, or None when the spec cannot place it."""
        if _is_missing(value):
            return MISSING if self.allow_missing else None
        if self.kind == CATEGORICAL:
            key = _category_key(value)
            category = self.merge.get(key, key)
            return category if category in self.categories else None
        try:
            number = float(value)
        except (TypeError, ValueError):
            return None
        for i, candidate in enumerate(self.bins):
            last = i == len(self.bins) - 1
            if candidate.low <= number < candidate.high or (last and number == candidate.high):
                return candidate.label
        return None


@dataclass(frozen=True)
class TableSpec:
    """The variables of one table, as the spec file lists them."""

    name: str
    variables: tuple[Variable, ...]
    record_id_prefix: str = "row"
    source: str = ""
    report_title: str = ""

    @property
    def names(self) -> list[str]:
        return [v.name for v in self.variables]

    def variable(self, name: str) -> Variable:
        for candidate in self.variables:
            if candidate.name == name:
                return candidate
        raise KeyError(f"spec {self.name!r} has no variable {name!r}; known: {self.names}")

    def domains(self) -> dict[str, tuple[str, ...]]:
        return {v.name: v.domain for v in self.variables}


def format_number(value: float) -> str:
    """A bin edge as written in labels and text: no trailing zeros (12, 0.085)."""
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.6g}"


def number_text(value: float, decimals: int) -> str:
    """A number as a report states it, with ``decimals`` places (0: an integer)."""
    return f"{value:.{decimals}f}" if decimals > 0 else str(round(value))


def _is_missing(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, float) and math.isnan(value):
        return True
    return isinstance(value, str) and value.strip() == ""


def _category_key(value: Any) -> str:
    """Raw values as merge keys: 1.0 and 1 both read "1", strings are stripped."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ConfigError(f"{where} must be a list of strings")
    items = tuple(str(item) for item in value)
    if any(not item.strip() for item in items):
        raise ConfigError(f"{where} has an empty entry")
    return items


def _bins(value: Any, where: str) -> tuple[Bin, ...]:
    if not isinstance(value, Sequence) or isinstance(value, str) or len(value) < 2:
        raise ConfigError(f"{where} must list at least two [low, high] ranges")
    bins: list[Bin] = []
    for i, entry in enumerate(value):
        if not isinstance(entry, Sequence) or isinstance(entry, str) or len(entry) != 2:
            raise ConfigError(f"{where}[{i}] must be [low, high], got {entry!r}")
        try:
            low, high = float(entry[0]), float(entry[1])
        except (TypeError, ValueError):
            raise ConfigError(f"{where}[{i}] must be two numbers, got {entry!r}") from None
        if not low < high:
            raise ConfigError(f"{where}[{i}]: low {low} must be below high {high}")
        if bins and bins[-1].high != low:
            raise ConfigError(
                f"{where}[{i}] starts at {low} but the previous range ends at {bins[-1].high}: "
                "ranges must be contiguous"
            )
        bins.append(Bin(low, high))
    return tuple(bins)


def parse_variable(entry: Mapping[str, Any], where: str) -> Variable:
    """One variable from its spec mapping; every problem is a ConfigError naming ``where``."""
    if not isinstance(entry, Mapping):
        raise ConfigError(f"{where} must be a mapping")
    unknown = sorted(set(entry) - VARIABLE_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown keys {unknown}; known: {sorted(VARIABLE_KEYS)}")
    name = entry.get("name")
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise ConfigError(f"{where}: name must be lower_snake_case, got {name!r}")
    where = f"{where} ({name})"
    kind = entry.get("kind")
    if kind not in KINDS:
        raise ConfigError(f"{where}: kind must be one of {list(KINDS)}, got {kind!r}")
    common: dict[str, Any] = {
        "name": name,
        "column": str(entry.get("column", name)),
        "kind": kind,
        "label": str(entry.get("label", name.replace("_", " "))),
        "unit": str(entry.get("unit", "")),
        "mentions": _strings(entry.get("mentions"), f"{where}.mentions"),
        "allow_missing": entry.get("allow_missing", False),
        "decimals": entry.get("decimals", 2),
    }
    if not isinstance(common["allow_missing"], bool):
        raise ConfigError(f"{where}.allow_missing must be true or false")
    if isinstance(common["decimals"], bool) or not isinstance(common["decimals"], int):
        raise ConfigError(f"{where}.decimals must be an integer, got {common['decimals']!r}")
    if common["decimals"] < 0:
        raise ConfigError(f"{where}.decimals must be >= 0")
    if kind == BINNED:
        for key in ("categories", "merge", "phrases"):
            if key in entry:
                raise ConfigError(f"{where}: {key!r} is for categorical variables")
        return Variable(**common, bins=_bins(entry.get("bins"), f"{where}.bins"))
    if "bins" in entry:
        raise ConfigError(f"{where}: 'bins' is for binned variables")
    categories = _strings(entry.get("categories"), f"{where}.categories")
    if not categories:
        raise ConfigError(f"{where}: a categorical variable needs its categories")
    if len(set(categories)) != len(categories):
        raise ConfigError(f"{where}.categories has duplicates")
    if MISSING in categories:
        raise ConfigError(f"{where}: {MISSING!r} is the missing value; use allow_missing: true")
    merge_map = entry.get("merge") or {}
    if not isinstance(merge_map, Mapping):
        raise ConfigError(f"{where}.merge must map raw values to categories")
    merge = {_category_key(k): str(v) for k, v in merge_map.items()}
    stray = sorted({v for v in merge.values() if v not in categories})
    if stray:
        raise ConfigError(f"{where}.merge maps to {stray}, which are not in categories")
    phrases_map = entry.get("phrases") or {}
    if not isinstance(phrases_map, Mapping):
        raise ConfigError(f"{where}.phrases must map categories to lists of phrases")
    phrases = {
        str(k): _strings(v, f"{where}.phrases.{k}") for k, v in phrases_map.items() if v is not None
    }
    stray = sorted(set(phrases) - set(categories))
    if stray:
        raise ConfigError(f"{where}.phrases names {stray}, which are not in categories")
    return Variable(**common, categories=categories, merge=merge, phrases=phrases)


def parse_spec(mapping: Mapping[str, Any], source: str) -> TableSpec:
    """A :class:`TableSpec` from a parsed spec file; ``source`` names it in errors."""
    if not isinstance(mapping, Mapping):
        raise ConfigError(f"{source}: a table spec must be a mapping")
    entries = mapping.get("variables")
    if not isinstance(entries, Sequence) or isinstance(entries, str) or not entries:
        raise ConfigError(f"{source}: 'variables' must be a non-empty list")
    variables = tuple(
        parse_variable(entry, f"{source}: variables[{i}]") for i, entry in enumerate(entries)
    )
    names = [v.name for v in variables]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigError(f"{source}: variables named twice: {duplicates}")
    return TableSpec(
        name=str(mapping.get("name", Path(source).stem)),
        variables=variables,
        record_id_prefix=str(mapping.get("record_id_prefix", "row")),
        source=source,
        report_title=str(mapping.get("report_title", "")),
    )


def load_spec(path: str | Path) -> TableSpec:
    path = Path(path)
    try:
        mapping = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as error:
        raise ConfigError(f"cannot read table spec {path}: {error}") from None
    return parse_spec(mapping, str(path))


def discretize(frame: pd.DataFrame, spec: TableSpec, source: str | Path) -> pd.DataFrame:
    """The spec's variables of ``frame`` as category strings, one column per variable.

    A column the spec names but the table lacks, or a value the spec cannot
    place (an unknown category, a number outside every range, a missing value
    where none is allowed), is an :class:`InputError` naming the table, the
    row and the value.
    """
    require_columns(
        source,
        frame.columns,
        [v.column for v in spec.variables],
        f"a table with the columns the spec {spec.source} names",
    )
    columns: dict[str, list[str]] = {}
    for variable in spec.variables:
        values = []
        for i, raw in enumerate(frame[variable.column].tolist()):
            category = variable.discretize(raw)
            if category is None:
                raise InputError(
                    source,
                    f"row {i}",
                    f"{variable.column!r} = {raw!r} does not fit variable {variable.name!r} "
                    f"(domain {list(variable.domain)})",
                    hint="extend its ranges or categories in the spec, or allow_missing: true",
                )
            values.append(category)
        columns[variable.name] = values
    return pd.DataFrame(columns, index=range(len(frame)))


def check_categories(frame: pd.DataFrame, spec: TableSpec, source: str | Path) -> None:
    """Refuse a discretized table with a value outside a variable's domain (e.g. a stray NaN)."""
    require_columns(source, frame.columns, spec.names, f"a discretized {spec.name} table")
    for variable in spec.variables:
        column = frame[variable.name]
        bad = ~column.isin(variable.domain)
        if bad.any():
            i = int(bad.to_numpy().nonzero()[0][0])
            raise InputError(
                source,
                f"row {i}",
                f"{variable.name} = {column.iloc[i]!r} is outside its domain {list(variable.domain)}",
            )
