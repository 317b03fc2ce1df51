"""DP-SGD privacy settings, the noise plan, and the record written beside the model.

Exactly one of ``target_epsilon`` and ``noise_multiplier`` is given:

- ``target_epsilon``: the noise multiplier is the smallest one with which
  Opacus' accountant reaches ``(target_epsilon, delta)`` after the planned
  number of steps at the sample rate; a plan that needs more noise than
  ``max_noise_multiplier`` (or more than Opacus can search) is refused
  before training, with the numbers in the message;
- ``noise_multiplier``: epsilon is whatever the accountant says at the end.

``delta`` defaults to ``1 / (N ln N)`` for N training notes (Zecevic et al.,
eq. 2). After training, the accountant's epsilon for the steps actually
taken is recomputed; if it exceeds the target (beyond Opacus' search
tolerance) the run is refused and nothing is written.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from synthdeid.errors import ConfigError, StepError
from synthdeid.settings import settings_from_mapping

ACCOUNTANTS = ("rdp", "prv")
CLIPPING_MODES = ("flat", "ghost")
# Opacus' get_noise_multiplier stops its search within this distance of the target
EPSILON_TOLERANCE = 0.01


class PrivacyRefused(StepError):
    """The configured privacy target cannot be met: the run is refused."""


@dataclass(frozen=True)
class PrivacyConfig:
    target_epsilon: float | None = None
    noise_multiplier: float | None = None
    delta: float | None = None  # None: 1 / (N ln N)
    max_grad_norm: float = 1.0
    accountant: str = "rdp"
    poisson: bool = True
    clipping: str = "flat"  # flat: per-sample gradients (hooks); ghost: ghost clipping
    secure_mode: bool = False
    max_noise_multiplier: float = 50.0

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> PrivacyConfig:
        config = settings_from_mapping(cls, data, "synth.dplm.privacy")
        config.check()
        return config

    def check(self) -> None:
        if (self.target_epsilon is None) == (self.noise_multiplier is None):
            raise ConfigError(
                "synth.dplm.privacy: give exactly one of target_epsilon and noise_multiplier "
                f"(got target_epsilon={self.target_epsilon}, "
                f"noise_multiplier={self.noise_multiplier})"
            )
        if self.target_epsilon is not None and self.target_epsilon <= 0:
            raise ConfigError(
                f"synth.dplm.privacy.target_epsilon must be > 0, got {self.target_epsilon}"
            )
        if self.noise_multiplier is not None and self.noise_multiplier < 0:
            raise ConfigError(
                f"synth.dplm.privacy.noise_multiplier must be >= 0, got {self.noise_multiplier}"
            )
        if self.delta is not None and not 0 < self.delta < 1:
            raise ConfigError(f"synth.dplm.privacy.delta must be in (0, 1), got {self.delta}")
        if self.max_grad_norm <= 0:
            raise ConfigError(
                f"synth.dplm.privacy.max_grad_norm must be > 0, got {self.max_grad_norm}"
            )
        if self.accountant not in ACCOUNTANTS:
            raise ConfigError(f"synth.dplm.privacy.accountant must be one of {list(ACCOUNTANTS)}")
        if self.clipping not in CLIPPING_MODES:
            raise ConfigError(f"synth.dplm.privacy.clipping must be one of {list(CLIPPING_MODES)}")
        if self.secure_mode:
            try:
                import torchcsprng  # noqa: F401
            except ImportError:
                raise ConfigError(
                    "synth.dplm.privacy.secure_mode needs the torchcsprng package (Opacus' "
                    "cryptographically secure noise), which is not installed here"
                ) from None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def default_delta(n: int) -> float:
    """``1 / (N ln N)`` (Zecevic et al., eq. 2)."""
    if n < 2:
        raise ConfigError(f"delta = 1/(N ln N) needs at least 2 training notes, got {n}")
    return 1.0 / (n * math.log(n))


def accountant_epsilon(
    accountant: str, noise_multiplier: float, sample_rate: float, steps: int, delta: float
) -> float:
    """Epsilon of ``steps`` subsampled Gaussian steps, computed directly by an Opacus accountant."""
    from opacus.accountants import create_accountant

    if steps == 0 or noise_multiplier == 0:
        return 0.0 if steps == 0 else math.inf
    acct = create_accountant(mechanism=accountant)
    acct.history = [(noise_multiplier, sample_rate, steps)]
    return float(acct.get_epsilon(delta=delta))


@dataclass(frozen=True)
class PrivacyPlan:
    """The noise multiplier to train with, and the accounting inputs it was computed for."""

    noise_multiplier: float
    delta: float
    sample_rate: float
    steps: int
    n: int
    target_epsilon: float | None
    accountant: str

    def epsilon(self, steps: int | None = None) -> float:
        """The accountant's epsilon after ``steps`` steps (default: the planned number)."""
        return accountant_epsilon(
            self.accountant,
            self.noise_multiplier,
            self.sample_rate,
            self.steps if steps is None else steps,
            self.delta,
        )


def plan_privacy(config: PrivacyConfig, *, n: int, sample_rate: float, steps: int) -> PrivacyPlan:
    """The noise plan for ``steps`` steps at ``sample_rate`` over ``n`` notes, or a refusal."""
    delta = config.delta if config.delta is not None else default_delta(n)
    if config.noise_multiplier is not None:
        return PrivacyPlan(
            config.noise_multiplier, delta, sample_rate, steps, n, None, config.accountant
        )
    from opacus.accountants.utils import get_noise_multiplier

    assert config.target_epsilon is not None
    why = (
        f"target epsilon {config.target_epsilon} at delta {delta:.3g} over {steps} steps at "
        f"sample rate {sample_rate:.4f} ({n} notes)"
    )
    hint = (
        "fewer steps (epochs or max_steps), a smaller logical batch (sample rate), "
        "more training notes or a larger target epsilon"
    )
    try:
        sigma = get_noise_multiplier(
            target_epsilon=config.target_epsilon,
            target_delta=delta,
            sample_rate=sample_rate,
            steps=steps,
            accountant=config.accountant,
            epsilon_tolerance=EPSILON_TOLERANCE,
        )
    except ValueError as exc:
        raise PrivacyRefused(f"refused: {why} cannot be reached ({exc}); use {hint}") from None
    if sigma > config.max_noise_multiplier:
        raise PrivacyRefused(
            f"refused: {why} needs noise multiplier {sigma:.2f}, above max_noise_multiplier "
            f"{config.max_noise_multiplier} (training would learn nothing); use {hint}"
        )
    return PrivacyPlan(
        sigma, delta, sample_rate, steps, n, config.target_epsilon, config.accountant
    )


def check_spent(plan: PrivacyPlan, epsilon: float) -> None:
    """Refuse a finished run whose accountant epsilon exceeds the target."""
    if plan.target_epsilon is not None and epsilon > plan.target_epsilon + EPSILON_TOLERANCE:
        raise PrivacyRefused(
            f"refused: the accountant's epsilon after training is {epsilon:.3f}, above the "
            f"target {plan.target_epsilon}; the model is not written"
        )


def privacy_record(
    *,
    enabled: bool,
    config: PrivacyConfig | None,
    plan: PrivacyPlan | None,
    epsilon: float | None,
    steps: int,
    sample_rate: float,
    n: int,
    expected_batch_size: int,
    empty_batches: int,
    unit: str = "note",
    caveats: list[str] | None = None,
) -> dict[str, Any]:
    """What privacy.json holds (the same keys with and without DP)."""
    caveats = list(caveats or [])
    if enabled and epsilon is not None and not math.isfinite(epsilon):
        caveats.append("noise multiplier 0: no privacy guarantee (epsilon is infinite)")
        epsilon = None
    return {
        "dp": enabled,
        "epsilon": epsilon if enabled else None,
        "delta": plan.delta if plan else None,
        "target_epsilon": plan.target_epsilon if plan else None,
        "noise_multiplier": plan.noise_multiplier if plan else None,
        "max_grad_norm": config.max_grad_norm if (enabled and config) else None,
        "sample_rate": sample_rate,
        "steps": steps,
        "expected_batch_size": expected_batch_size,
        "empty_batches": empty_batches,
        "accountant": config.accountant if (enabled and config) else None,
        "clipping": config.clipping if (enabled and config) else None,
        "poisson_sampling": bool(config.poisson) if config else True,
        "secure_mode": bool(config.secure_mode) if (enabled and config) else False,
        "N": n,
        "unit": unit,
        "caveats": caveats,
    }
