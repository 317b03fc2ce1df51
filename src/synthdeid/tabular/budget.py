"""Epsilon bookkeeping for DP tabular synthesizers: what the config says is what is spent.

SmartNoise splits one budget between a preprocessor and the synthesizer:
the table transformer may spend epsilon inferring what it does not know
(bounds of continuous columns), and the synthesizer subtracts whatever the
transformer's odometer shows. Getting this wrong is silent (smartnoise-sdk
bug 485): pass the total to both and the data is charged twice. Here the
plan is explicit: ``total = preprocessor + synthesizer``; the preprocessor
share is configured, the synthesizer gets the rest, and after fitting the
record is checked against the transformer's odometer and the library's own
accountant where it reports one. The discretized tables of this pipeline
take every category from the spec (public), so their preprocessor needs no
budget and a configured share for it is refused rather than wasted.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from synthdeid.errors import ConfigError, StepError

TOLERANCE = 1e-9


@dataclass(frozen=True)
class EpsilonBudget:
    """One DP synthesizer's budget: ``total`` split into a preprocessor and a synthesizer share."""

    total: float
    preprocessor: float = 0.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.total) and self.total > 0):
            raise ConfigError(f"epsilon must be a positive number, got {self.total}")
        if not 0 <= self.preprocessor < self.total:
            raise ConfigError(
                f"preprocessor_epsilon must be in [0, epsilon={self.total}), got {self.preprocessor}"
            )

    @property
    def synthesizer(self) -> float:
        return self.total - self.preprocessor


def plan_budget(
    total: float, preprocessor: float, preprocessor_needs_budget: bool
) -> EpsilonBudget:
    """The budget for a fit; a preprocessor share that would be spent on nothing is an error."""
    budget = EpsilonBudget(float(total), float(preprocessor))
    if budget.preprocessor > 0 and not preprocessor_needs_budget:
        raise ConfigError(
            f"preprocessor_epsilon is {budget.preprocessor} but the table's preprocessor needs no "
            "budget (the spec fixes every variable's domain): set it to 0 so the synthesizer gets "
            f"the whole epsilon {budget.total}"
        )
    if budget.preprocessor == 0 and preprocessor_needs_budget:
        raise ConfigError(
            "the table's preprocessor must learn bounds from the data, which costs epsilon: "
            "set preprocessor_epsilon > 0 (it is taken from the total) or give the bounds"
        )
    return budget


@dataclass(frozen=True)
class EpsilonRecord:
    """What a DP fit spent, for privacy.json.

    ``epsilon_total`` is the configured budget, the ceiling. ``epsilon_accounted``
    is what the fit is accounted to have spent: the preprocessor's spend plus
    the synthesizer's own accountant's final figure where it reports one
    (DP-CTGAN's RDP accountant stops at the epochs configured, often below its
    budget), else the synthesizer's share (MST and AIM spend exactly theirs).
    """

    epsilon_total: float
    preprocessor_epsilon_planned: float
    preprocessor_epsilon_spent: float
    synthesizer_epsilon: float
    delta: float | None
    library_reported_epsilon: float | None

    @property
    def epsilon_accounted(self) -> float:
        return _accounted(
            self.preprocessor_epsilon_spent, self.synthesizer_epsilon, self.library_reported_epsilon
        )

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "epsilon_accounted": self.epsilon_accounted, "sums_to_total": True}


def accounted_epsilon(privacy: dict[str, Any]) -> float | None:
    """A tabular fit's accounted epsilon from its privacy.json; None for a non-DP fit.

    privacy.json files written before the accounted figure was recorded give it
    from their parts, as :attr:`EpsilonRecord.epsilon_accounted` does.
    """
    if not privacy.get("dp"):
        return None
    if privacy.get("epsilon_accounted") is not None:
        return float(privacy["epsilon_accounted"])
    preprocessor = float(privacy.get("preprocessor_epsilon_spent") or 0.0)
    synthesizer = privacy.get("synthesizer_epsilon")
    synthesizer = (
        float(privacy["epsilon_total"]) - preprocessor if synthesizer is None else synthesizer
    )
    return _accounted(preprocessor, float(synthesizer), privacy.get("library_reported_epsilon"))


def _accounted(preprocessor: float, synthesizer: float, library_reported: float | None) -> float:
    """The preprocessor's spend plus the synthesizer's accountant's figure, else its share."""
    return preprocessor + (synthesizer if library_reported is None else float(library_reported))


def settle(
    budget: EpsilonBudget,
    *,
    preprocessor_spent: float,
    synthesizer_epsilon: float,
    delta: float | None,
    library_reported: float | None,
    what: str,
) -> EpsilonRecord:
    """Check a finished fit against its plan; any overspend is a :class:`StepError`.

    ``synthesizer_epsilon`` is the epsilon the synthesizer ran with after the
    library's own subtraction of the preprocessor's spend; ``library_reported``
    is the synthesizer's own accountant's final figure when it has one (it
    must not exceed ``synthesizer_epsilon``).
    """
    if preprocessor_spent > budget.preprocessor + TOLERANCE:
        raise StepError(
            f"{what}: the preprocessor spent epsilon {preprocessor_spent:.6g}, more than its "
            f"planned share {budget.preprocessor}"
        )
    total = preprocessor_spent + synthesizer_epsilon
    if abs(total - budget.total) > TOLERANCE:
        raise StepError(
            f"{what}: preprocessor {preprocessor_spent:.6g} + synthesizer "
            f"{synthesizer_epsilon:.6g} = {total:.6g}, not the configured epsilon {budget.total}"
        )
    if library_reported is not None and library_reported > synthesizer_epsilon + TOLERANCE:
        raise StepError(
            f"{what}: the synthesizer's accountant reports epsilon {library_reported:.6g}, over "
            f"its budget {synthesizer_epsilon:.6g}"
        )
    return EpsilonRecord(
        epsilon_total=budget.total,
        preprocessor_epsilon_planned=budget.preprocessor,
        preprocessor_epsilon_spent=float(preprocessor_spent),
        synthesizer_epsilon=float(synthesizer_epsilon),
        delta=delta,
        library_reported_epsilon=library_reported,
    )
