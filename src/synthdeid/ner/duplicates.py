"""Degenerate arms: arms whose runs would train the same models as another arm's.

Two trained runs train the same model when their mixtures hold the same notes in the
same order with the same validation notes (equal :func:`~synthdeid.ner.mixtures.mixture_digest`)
and their training settings are equal (seed included). A study sweep makes such
pairs easily: ``fixed_n`` with real share 1.0 at the size of the real train part is
``real_only``; an augmentation share the pools cap draws the same notes at every
larger share. An arm is *degenerate* when every run of it duplicates a run of one
single other arm (its *canonical* arm, the earlier in config order with the
reference arm first): it is reported once, as that arm, and not trained. A run that
duplicates another but whose arm is not wholly degenerate is still trained, so that
no arm loses a seed; the plan lists it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

PLAN_FORMAT = "synthdeid.run_plan/1"


def settings_digest(settings: Mapping[str, Any]) -> str:
    """SHA-256 of a run's training settings as canonical JSON (keys sorted)."""
    text = json.dumps(settings, sort_keys=True, separators=(",", ":"))
    return f"sha256:{hashlib.sha256(text.encode()).hexdigest()}"


@dataclass(frozen=True)
class TrainedRun:
    """What decides the model a run trains: its mixture digest and its settings digest."""

    run: str
    arm: str
    mixture_digest: str
    settings_digest: str

    @property
    def key(self) -> tuple[str, str]:
        return (self.mixture_digest, self.settings_digest)


@dataclass(frozen=True)
class RunPlan:
    """Duplicate runs (run -> the earlier run it repeats) and degenerate arms (arm -> its
    canonical arm); ``skipped`` are the runs of degenerate arms, which are not trained."""

    runs: tuple[TrainedRun, ...]
    duplicates: dict[str, str]
    degenerate_arms: dict[str, str]

    @property
    def skipped(self) -> list[str]:
        return [r.run for r in self.runs if r.arm in self.degenerate_arms]

    def as_dict(self) -> dict[str, Any]:
        return {
            "format": PLAN_FORMAT,
            "runs": {
                r.run: {
                    "arm": r.arm,
                    "mixture_digest": r.mixture_digest,
                    "settings_digest": r.settings_digest,
                }
                for r in self.runs
            },
            "duplicates": self.duplicates,
            "degenerate_arms": self.degenerate_arms,
            "skipped_runs": self.skipped,
        }


def plan_runs(runs: Sequence[TrainedRun], protected: Collection[str] = ()) -> RunPlan:
    """Find duplicate runs and degenerate arms among ``runs`` (in config order, the
    reference arm's runs first). Runs in ``protected`` (ones other runs build on:
    ensemble members, stacked bases, distillation teachers) never make their arm
    degenerate."""
    first: dict[tuple[str, str], TrainedRun] = {}
    duplicates: dict[str, str] = {}
    for run in runs:
        if run.key in first:
            duplicates[run.run] = first[run.key].run
        else:
            first[run.key] = run
    arm_of = {r.run: r.arm for r in runs}
    by_arm: dict[str, list[str]] = {}
    for r in runs:
        by_arm.setdefault(r.arm, []).append(r.run)
    degenerate: dict[str, str] = {}
    for arm, members in by_arm.items():
        if any(m not in duplicates or m in protected for m in members):
            continue
        canonical = {arm_of[duplicates[m]] for m in members}
        if len(canonical) == 1 and arm not in canonical:
            degenerate[arm] = canonical.pop()
    return RunPlan(tuple(runs), duplicates, degenerate)


def read_plan(data: Mapping[str, Any]) -> RunPlan:
    """A plan from its JSON (:meth:`RunPlan.as_dict`); ValueError naming what is wrong."""
    if data.get("format") != PLAN_FORMAT:
        raise ValueError(f"not a run plan: format {data.get('format')!r}, expected {PLAN_FORMAT}")
    try:
        runs = tuple(
            TrainedRun(name, str(e["arm"]), str(e["mixture_digest"]), str(e["settings_digest"]))
            for name, e in data["runs"].items()
        )
        return RunPlan(runs, dict(data["duplicates"]), dict(data["degenerate_arms"]))
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"run plan lacks or mistypes {exc}") from None
