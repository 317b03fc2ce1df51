"""The NER runs of ``ner.runs``, expanded: arms, the reference, and each run's kind.

A run is *trained* (a mixture and a model of its own), an *ensemble* (``members``:
trained runs whose token probabilities it averages) or *stacked* (``base``: a
trained run with lexicons stacked over its token probabilities). A trained run
with ``distill_from`` also learns a teacher run's soft labels on its training notes.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from typing import Any

from synthdeid.errors import ConfigError
from synthdeid.ner.sweeps import ARM, arms, expand_runs
from synthdeid.workflow.outputs import Output, RuleOutputs
from synthdeid.workflow.pools import from_dp_language_model


def reference_arm(
    configured: str | None, runs: Mapping[str, Mapping[str, Any]], run_arms: Mapping[str, Any]
) -> str:
    """The arm ``ner.reference_run`` names (a run names its arm); the first arm when unset."""
    arm = configured or next(iter(run_arms))
    if arm in runs:
        arm = runs[arm].get(ARM) or arm
    if arm not in run_arms:
        raise ConfigError(
            f"ner.reference_run {arm!r} is neither a run nor an arm: runs "
            f"{sorted(runs)}, arms {sorted(run_arms)}"
        )
    return arm


@dataclass(frozen=True)
class NerRuns:
    """Every configured run with its sweep and training seeds expanded into named runs."""

    runs: dict[str, dict[str, Any]]
    # arm -> its runs (one per training seed); compare_ner aggregates each arm over them
    arms: dict[str, list[str]]
    reference_arm: str
    # ner.training: the settings a run's own `training` overrides
    training_defaults: dict[str, Any]

    @classmethod
    def from_config(cls, ner: Mapping[str, Any]) -> NerRuns:
        """The runs of config["ner"]; ConfigError for a bad sweep, name or reference run."""
        try:
            expanded = expand_runs(ner["runs"], ner["training_seeds"], ner["arm_seeds"])
        except ConfigError as exc:
            raise ConfigError(f"config: {exc}") from None
        runs = {run["name"]: run for run in expanded}
        run_arms = arms(expanded)
        return cls(
            runs=runs,
            arms=run_arms,
            reference_arm=reference_arm(ner["reference_run"], runs, run_arms),
            training_defaults=dict(ner["training"]),
        )

    @property
    def reference_run(self) -> str:
        """The run-level reference: the reference arm's first training seed."""
        return self.arms[self.reference_arm][0]

    @property
    def ensembles(self) -> dict[str, list[str]]:
        """Runs that average trained runs' token probabilities: name -> members."""
        return {name: run["members"] for name, run in self.runs.items() if "members" in run}

    @property
    def stacked(self) -> dict[str, str]:
        """Runs that stack lexicons over a trained run's token probabilities: name -> base."""
        return {name: run["base"] for name, run in self.runs.items() if "base" in run}

    @property
    def trained(self) -> list[str]:
        """Runs with a mixture and a model of their own (neither ensembles nor stacked)."""
        return [
            name for name, run in self.runs.items() if "members" not in run and "base" not in run
        ]

    def model_dir(self, run: str, corpus: str, outputs: RuleOutputs) -> str:
        """Where a run's model directory is: trained (train_ner), combined
        (ensemble_ner) or stacked over lexicons (stack_lexicons)."""
        entry = self.runs[run]
        if "base" in entry:
            step = "stack_lexicons"
        else:
            step = "ensemble_ner" if "members" in entry else "train_ner"
        return outputs.path(Output(step, "model"), corpus=corpus, run=run)

    def training(self, run: str) -> dict[str, Any]:
        """ner.training with the run's own overrides on top."""
        return {**self.training_defaults, **self.runs[run].get("training", {})}

    def operating_point(self, run: str) -> dict[str, Any]:
        """The run's operating-point rule: its own, else ner.training's."""
        rule = self.runs[run].get("operating_point") or self.training_defaults.get(
            "operating_point", {}
        )
        return dict(rule)

    def named_run(self, name: str | None) -> str | None:
        """The run a name gives: a run, or an arm's first training seed (None: neither)."""
        if name in self.runs:
            return name
        return self.arms[name][0] if name in self.arms else None

    def distill_teacher(self, run: str) -> str | None:
        """The run whose soft labels a run learns (``distill_from``, a run or an arm's first
        training seed); None for a run without ``distill_from`` or naming no run."""
        return self.named_run(self.runs[run].get("distill_from"))

    def built_upon(self) -> set[str]:
        """Runs other runs build on: ensemble members, stacked bases, distillation teachers."""
        members = {member for group in self.ensembles.values() for member in group}
        teachers = {self.distill_teacher(run) for run in self.runs}
        return members | set(self.stacked.values()) | {t for t in teachers if t is not None}

    def in_plan_order(self) -> list[str]:
        """The trained runs, the reference arm's first, then in config order."""
        reference = self.arms[self.reference_arm]
        return [
            *[r for r in reference if r in self.trained],
            *[r for r in self.trained if r not in reference],
        ]

    def without_arms(self, dropped: Collection[str]) -> NerRuns:
        """These runs less the arms in ``dropped`` and their runs (degenerate arms)."""
        if self.reference_arm in dropped:
            raise ConfigError(f"the reference arm {self.reference_arm!r} cannot be dropped")
        gone = {run for arm in dropped for run in self.arms.get(arm, [])}
        return replace(
            self,
            runs={name: run for name, run in self.runs.items() if name not in gone},
            arms={arm: runs for arm, runs in self.arms.items() if arm not in dropped},
        )

    def dp_model_runs(self) -> list[str]:
        """Runs whose training data passed through the DP language model: its pools, or tapt: dplm."""
        return [
            run
            for run, entry in self.runs.items()
            if entry.get("tapt") == "dplm"
            or any(from_dp_language_model(p) for p in entry.get("pools", []))
        ]
