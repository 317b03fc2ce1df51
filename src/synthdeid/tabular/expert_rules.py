"""Expert rules applied to a synthetic row before it is verbalized (Lorenzo et al. 2026, section 3).

Two kinds, configured as a list under ``synth.tabular.verbalize.rules``:

- ``conditional_default``: a mandatory variable left ``unknown`` gets a value
  that depends on whether another variable is known. The
  diagnostic-test rule of Lorenzo et al. 2026: ``{kind: conditional_default, variable:
  diagnostic_test, if_present: tumor_size, then: lumpectomy, otherwise:
  biopsy}``.
- ``draw_within``: the report is given a concrete number drawn uniformly from
  a range instead of a category, e.g. a receptor positivity percentage when
  the receptor is positive (Lorenzo et al. 2026: "we provide the LLM with a random value
  drawn from a range of valid positivity percentages"): ``{kind:
  draw_within, variable: er_status, when: [positive], range: [1, 100],
  decimals: 0}``. For a binned variable ``range`` defaults to the row's bin.

Draws are seeded per record, so a rerun gives the same prompts.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from synthdeid.errors import ConfigError
from synthdeid.tabular.spec import BINNED, MISSING, TableSpec, number_text

KINDS = ("conditional_default", "draw_within")
RULE_KEYS = {
    "conditional_default": {"kind", "variable", "if_present", "then", "otherwise"},
    "draw_within": {"kind", "variable", "when", "range", "decimals"},
}


@dataclass(frozen=True)
class ExpertRule:
    kind: str
    variable: str
    if_present: str = ""
    then: str = ""
    otherwise: str = ""
    when: tuple[str, ...] = ()
    range: tuple[float, float] | None = None
    decimals: int = 0


@dataclass(frozen=True)
class RuledRow:
    """A row after the rules: its categories and the numbers drawn for some variables."""

    values: dict[str, str]
    drawn: dict[str, str]  # variable -> the number drawn, as text (the rule's decimals)
    applied: tuple[str, ...]


def parse_rules(entries: Sequence[Mapping[str, Any]], spec: TableSpec) -> tuple[ExpertRule, ...]:
    """The configured rules, each checked against the spec (unknown names fail here)."""
    rules = []
    for i, entry in enumerate(entries or ()):
        where = f"synth.tabular.verbalize.rules[{i}]"
        if not isinstance(entry, Mapping) or entry.get("kind") not in KINDS:
            raise ConfigError(f"{where}: kind must be one of {list(KINDS)}")
        kind = entry["kind"]
        unknown = sorted(set(entry) - RULE_KEYS[kind])
        if unknown:
            raise ConfigError(f"{where}: unknown keys {unknown}; known: {sorted(RULE_KEYS[kind])}")
        try:
            variable = spec.variable(str(entry.get("variable")))
        except KeyError as error:
            raise ConfigError(f"{where}: {error.args[0]}") from None
        if kind == "conditional_default":
            try:
                spec.variable(str(entry.get("if_present")))
            except KeyError as error:
                raise ConfigError(f"{where}: {error.args[0]}") from None
            for key in ("then", "otherwise"):
                if str(entry.get(key)) not in variable.domain:
                    raise ConfigError(
                        f"{where}.{key}: {entry.get(key)!r} is not a value of {variable.name} "
                        f"{list(variable.domain)}"
                    )
            rules.append(
                ExpertRule(
                    kind,
                    variable.name,
                    if_present=str(entry["if_present"]),
                    then=str(entry["then"]),
                    otherwise=str(entry["otherwise"]),
                )
            )
            continue
        when = tuple(str(v) for v in entry.get("when") or variable.domain)
        stray = sorted(set(when) - set(variable.domain))
        if stray:
            raise ConfigError(f"{where}.when: {stray} are not values of {variable.name}")
        bounds = _range(entry.get("range"), f"{where}.range")
        if bounds is None and variable.kind != BINNED:
            raise ConfigError(f"{where}: a categorical variable needs a range to draw from")
        decimals = entry.get("decimals", variable.decimals)
        if isinstance(decimals, bool) or not isinstance(decimals, int) or decimals < 0:
            raise ConfigError(f"{where}.decimals must be a non-negative integer, got {decimals!r}")
        rules.append(ExpertRule(kind, variable.name, when=when, range=bounds, decimals=decimals))
    return tuple(rules)


def _range(value: Any, where: str) -> tuple[float, float] | None:
    if value is None:
        return None
    if (
        not isinstance(value, Sequence)
        or isinstance(value, str)
        or len(value) != 2
        or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
        or not value[0] < value[1]
    ):
        raise ConfigError(
            f"{where} must be [low, high], two numbers with low < high; got {value!r}"
        )
    return float(value[0]), float(value[1])


def apply_rules(
    row: Mapping[str, str], rules: Sequence[ExpertRule], spec: TableSpec, rng: random.Random
) -> RuledRow:
    """The row after every rule, in order; draws come from ``rng``."""
    values = {name: str(row[name]) for name in spec.names}
    drawn: dict[str, str] = {}
    applied = []
    for rule in rules:
        if rule.kind == "conditional_default":
            if values[rule.variable] != MISSING:
                continue
            present = values[rule.if_present] != MISSING
            values[rule.variable] = rule.then if present else rule.otherwise
            applied.append(f"{rule.kind}:{rule.variable}")
            continue
        value = values[rule.variable]
        if value not in rule.when or value == MISSING:
            continue
        low, high = rule.range or _bin_range(spec, rule.variable, value)
        drawn[rule.variable] = number_text(rng.uniform(low, high), rule.decimals)
        applied.append(f"{rule.kind}:{rule.variable}")
    return RuledRow(values, drawn, tuple(applied))


def _bin_range(spec: TableSpec, name: str, label: str) -> tuple[float, float]:
    chosen = spec.variable(name).bin_of(label)
    return chosen.low, chosen.high
