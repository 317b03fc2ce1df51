"""One privacy ledger per corpus: every DP release, what it touched, and the composed total.

Each DP step records its own spend (``privacy.json``: the DP language model's
DP-SGD, each DP tabular fit); nothing else adds them up. The ledger lists each
*release*, its mechanism, epsilon and delta and the *population* it was computed
from (the corpus's seed part for the language model, the table's train half for a
tabular fit), and what is derived from it: samples, pools made of them, an
encoder adapted to them (TAPT), reports verbalized from them. What is derived is
post-processing and spends nothing more; releases on one population compose.
The total per population is basic sequential composition, the sum of epsilons and
of deltas: an upper bound that holds for any mechanisms (an RDP accountant over
both would give less). A configured budget per population refuses a run whose
planned spend exceeds it (when the config is read) and a ledger whose measured
spend does (when the releases are done: a noise multiplier's epsilon is known
only after training).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from synthdeid.errors import ConfigError, StepError
from synthdeid.reporting import NOT_AVAILABLE, markdown_table

FORMAT = "synthdeid.privacy_ledger/1"


@dataclass(frozen=True)
class Release:
    """One DP release: its step, mechanism, population, spend, and what derives from it."""

    name: str
    mechanism: str
    population: str
    epsilon: float
    delta: float
    derived: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not (math.isfinite(self.epsilon) and self.epsilon > 0):
            raise ValueError(f"release {self.name!r}: epsilon must be positive, not {self.epsilon}")
        if not (0 <= self.delta < 1):
            raise ValueError(f"release {self.name!r}: delta must lie in [0, 1), not {self.delta}")


@dataclass(frozen=True)
class PopulationTotal:
    """The composed spend on one population, against its budget (None: none set)."""

    population: str
    releases: tuple[str, ...]
    epsilon: float
    delta: float
    budget: float | None

    @property
    def over_budget(self) -> bool:
        return self.budget is not None and self.epsilon > self.budget + 1e-9


def compose(
    releases: Sequence[Release], budgets: Mapping[str, float | None] | None = None
) -> list[PopulationTotal]:
    """The basic-composition total per population, in order of first release."""
    budgets = budgets or {}
    order: dict[str, list[Release]] = {}
    for release in releases:
        order.setdefault(release.population, []).append(release)
    return [
        PopulationTotal(
            population,
            tuple(r.name for r in group),
            sum(r.epsilon for r in group),
            sum(r.delta for r in group),
            budgets.get(population),
        )
        for population, group in order.items()
    ]


def check_budgets(totals: Sequence[PopulationTotal], when: str) -> None:
    """ConfigError (planned) or StepError (measured) naming each population over budget."""
    over = [t for t in totals if t.over_budget]
    if not over:
        return
    listed = "; ".join(
        f"{t.population}: epsilon {t.epsilon:.3g} over the budget {t.budget:g} "
        f"({', '.join(t.releases)})"
        for t in over
    )
    message = f"privacy budget exceeded ({when}): {listed}; lower an epsilon or drop a release"
    raise (ConfigError if when == "planned" else StepError)(message)


def release_from_record(spec: Mapping[str, Any], record: Mapping[str, Any]) -> Release:
    """A release from its workflow spec (name, mechanism, population, derived) and the
    step's privacy.json (``epsilon`` and ``delta``; a tabular fit's ``epsilon_total``)."""
    epsilon = record.get("epsilon", record.get("epsilon_total"))
    if not isinstance(epsilon, int | float):
        raise ValueError("records no epsilon")
    delta = record.get("delta") or 0.0
    return Release(
        name=str(spec["name"]),
        mechanism=str(spec["mechanism"]),
        population=str(spec["population"]),
        epsilon=float(epsilon),
        delta=float(delta),
        derived=tuple(str(d) for d in spec.get("derived", ())),
    )


def ledger_record(releases: Sequence[Release], totals: Sequence[PopulationTotal]) -> dict[str, Any]:
    """The ledger as JSON: releases and the total per population."""
    return {
        "format": FORMAT,
        "composition": "basic (sum of epsilons and of deltas per population; an upper bound)",
        "releases": [
            {
                "name": r.name,
                "mechanism": r.mechanism,
                "population": r.population,
                "epsilon": r.epsilon,
                "delta": r.delta,
                "derived": list(r.derived),
            }
            for r in releases
        ],
        "populations": [
            {
                "population": t.population,
                "releases": list(t.releases),
                "epsilon": t.epsilon,
                "delta": t.delta,
                "budget": t.budget,
            }
            for t in totals
        ],
    }


TITLE = "Privacy ledger"


def ledger_markdown(record: dict[str, Any]) -> str:
    """The ledger (:func:`ledger_record`) as Markdown: every release, then each population's
    composed total against its budget."""
    lines = [
        f"# {TITLE}",
        "",
        "Every differentially private release of this workflow, the population it was "
        "computed from, and what is derived from it (post-processing: no further spend). "
        f"Totals per population: {record['composition']}.",
        "",
    ]
    lines += markdown_table(
        ["release", "mechanism", "population", "epsilon", "delta", "derived from it"],
        [
            [
                r["name"],
                r["mechanism"],
                r["population"],
                f"{r['epsilon']:.3f}",
                f"{r['delta']:.2g}",
                "; ".join(r["derived"]),
            ]
            for r in record["releases"]
        ],
    )
    lines += ["", "## Per population", ""]
    lines += markdown_table(
        ["population", "releases", "epsilon (composed)", "delta (composed)", "budget"],
        [
            [
                t["population"],
                str(len(t["releases"])),
                f"{t['epsilon']:.3f}",
                f"{t['delta']:.2g}",
                NOT_AVAILABLE if t["budget"] is None else f"{t['budget']:g}",
            ]
            for t in record["populations"]
        ],
    )
    return "\n".join([*lines, ""])
