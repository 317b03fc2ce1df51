"""Sweeps and training seeds: one configured run expanded into named runs.

A trained run in ``ner.runs`` may list values to try (``sweep``) and the
training seeds to repeat it with (``training_seeds``, else ``ner.training_seeds``).
The workflow expands it, when it parses the config, into one run per
combination, each an ordinary run with its own branch of the DAG::

    - name: template
      pools: [template_pii]
      mixture: {regime: augmentation, seed: 1}
      sweep: {synthetic_fraction: [0.25, 0.5]}
      training_seeds: [1, 2]

becomes ``template-syn25-seed1``, ``template-syn25-seed2``, ``template-syn50-seed1``
and ``template-syn50-seed2``. A name is the run's name, then one part per swept
key in :data:`NAME_PARTS` order (its short prefix and value; fractions as
percentages, ``12p5`` for 12.5%), then the seed. Names depend only on a run's
own values, so adding a value or a seed adds runs and changes no existing one:
Snakemake reruns nothing that was already built.

Runs of one configuration except the training seed form an *arm*
(``template-syn25``); ``compare_ner`` aggregates an arm over its seeds. The
training seed sets ``training.seed`` (initialisation, window order, dropout);
the mixture is drawn with the run's ``mixture.seed`` for every training seed,
so the spread across seeds is the training noise alone, as with VetSynth's
training seeds. A run without sweep and seeds keeps its name and is its own arm.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from typing import Any

from synthdeid.errors import ConfigError
from synthdeid.ner.mixtures import MixtureSpec

# swept key -> the prefix of its part of a run name ("" for values that name themselves)
NAME_PARTS: dict[str, str] = {
    "pools": "",
    "tapt": "tapt",
    "regime": "",
    "synthetic_fraction": "syn",
    "real_fraction": "real",
    "pii_fraction": "pii",
    "total_notes": "n",
    "steps": "steps",
    "batch_size": "batch",
}
MIXTURE_KEYS = frozenset(NAME_PARTS) - {"pools", "tapt"}
FRACTIONS = frozenset({"synthetic_fraction", "real_fraction", "pii_fraction"})
# keys of an expanded run that record where it came from (not settings of its steps)
ARM = "arm"
TRAINING_SEED = "training_seed"
SWEPT = "swept"
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_+-]*$")


def value_part(key: str, value: Any) -> str:
    """How one swept value reads in a run name."""
    if key == "pools":
        return "+".join(value) if value else "nopools"
    if key == "tapt":
        return value or "none"
    if key in FRACTIONS:
        percent = f"{round(float(value) * 100, 6):g}"
        return percent.replace(".", "p")
    return str(value)


def arm_name(base: str, swept: Mapping[str, Any]) -> str:
    """``base`` followed by one part per swept key, in :data:`NAME_PARTS` order."""
    parts = [base]
    parts += [NAME_PARTS[key] + value_part(key, swept[key]) for key in NAME_PARTS if key in swept]
    return "-".join(parts)


def seed_name(arm: str, seed: int | None) -> str:
    return arm if seed is None else f"{arm}-seed{seed}"


def training_seed_of(run: str, arm: str) -> int | None:
    """The training seed in a run's name (``<arm>-seed<n>``), None for a run named as its arm."""
    suffix = run.removeprefix(f"{arm}-seed")
    return int(suffix) if suffix != run and suffix.isdigit() else None


def check_sweep(name: str, sweep: Mapping[str, Sequence[Any]]) -> None:
    for key, values in sweep.items():
        if key not in NAME_PARTS:
            raise ConfigError(
                f"ner run {name!r}: sweep key {key!r} cannot be swept; "
                f"sweepable keys: {', '.join(NAME_PARTS)}"
            )
        if not isinstance(values, list | tuple) or not values:
            raise ConfigError(f"ner run {name!r}: sweep.{key} must be a non-empty list")
        parts = [value_part(key, value) for value in values]
        repeated = sorted({p for p in parts if parts.count(p) > 1})
        if repeated:
            raise ConfigError(f"ner run {name!r}: sweep.{key} repeats values {repeated}")


def expand_run(
    run: Mapping[str, Any],
    default_seeds: Sequence[int] | None,
    arm_seeds: Mapping[str, Sequence[int]] | None = None,
) -> list[dict[str, Any]]:
    """The runs one configured run stands for (itself, unchanged, when nothing is swept).

    Seeds: ``arm_seeds[arm]``, else the run's ``training_seeds``, else ``default_seeds``.
    """
    name = run["name"]
    sweep = run.get("sweep") or {}
    seeds = run.get("training_seeds")
    if "members" in run:
        if sweep or seeds or name in (arm_seeds or {}):
            raise ConfigError(
                f"ner run {name!r} is an ensemble: sweep and training_seeds belong to "
                "trained runs (list the expanded member names in members)"
            )
        return [dict(run)]
    if "base" in run:
        if sweep or seeds or name in (arm_seeds or {}):
            raise ConfigError(
                f"ner run {name!r} stacks lexicons over a trained run: sweep and "
                "training_seeds belong to trained runs (name an expanded run as its base)"
            )
        return [dict(run)]
    check_sweep(name, sweep)
    if seeds is None:
        seeds = default_seeds
    keys = [key for key in NAME_PARTS if key in sweep]
    base = {k: v for k, v in run.items() if k not in ("sweep", "training_seeds")}
    expanded = []
    for values in itertools.product(*(sweep[key] for key in keys)):
        swept = dict(zip(keys, values, strict=True))
        arm = arm_name(name, swept)
        mixture = {**run["mixture"], **{k: v for k, v in swept.items() if k in MIXTURE_KEYS}}
        try:
            MixtureSpec.from_mapping(mixture)
        except ConfigError as exc:
            raise ConfigError(f"ner run {arm!r} (swept from {name!r}): {exc}") from None
        arm_seed_list = (arm_seeds or {}).get(arm, seeds)
        if arm_seed_list is not None and (
            not arm_seed_list or len(set(arm_seed_list)) != len(arm_seed_list)
        ):
            raise ConfigError(
                f"ner run {arm!r}: training seeds must be distinct, got {list(arm_seed_list)}"
            )
        for seed in arm_seed_list if arm_seed_list is not None else [None]:
            entry = {
                **base,
                "name": seed_name(arm, seed),
                "mixture": mixture,
                ARM: arm,
                TRAINING_SEED: seed,
                SWEPT: swept,
            }
            for key in ("pools", "tapt"):
                if key in swept:
                    entry[key] = swept[key]
            if seed is not None:
                entry["training"] = {**run.get("training", {}), "seed": seed}
            expanded.append(entry)
    return expanded


def expand_runs(
    runs: Sequence[Mapping[str, Any]],
    default_seeds: Sequence[int] | None = None,
    arm_seeds: Mapping[str, Sequence[int]] | None = None,
) -> list[dict[str, Any]]:
    """Every configured run expanded, in config order; names must come out unique.

    ``arm_seeds`` gives some arms their own training seeds (by arm name: a run's
    name, or its name with its sweep parts); every arm it names must exist.
    """
    expanded: list[dict[str, Any]] = []
    origin: dict[str, str] = {}
    arm_origin: dict[str, int] = {}
    for index, run in enumerate(runs):
        for entry in expand_run(run, default_seeds, arm_seeds):
            name = entry["name"]
            if not NAME_PATTERN.match(name):
                raise ConfigError(
                    f"ner run {run['name']!r} expands to the name {name!r}, which is not "
                    "a usable file name"
                )
            if name in origin:
                raise ConfigError(
                    f"ner runs {origin[name]!r} and {run['name']!r} both expand to a run "
                    f"named {name!r}; rename one"
                )
            arm = entry.get(ARM) or name
            if arm_origin.setdefault(arm, index) != index:
                raise ConfigError(
                    f"ner runs {runs[arm_origin[arm]]['name']!r} and {run['name']!r} are both "
                    f"named like the arm {arm!r}; rename one"
                )
            origin[name] = run["name"]
            expanded.append(entry)
    unknown = sorted(set(arm_seeds or {}) - set(arm_origin))
    if unknown:
        raise ConfigError(
            f"arm_seeds names arms no run expands to: {unknown}; arms: {sorted(arm_origin)}"
        )
    return expanded


def arms(runs: Sequence[Mapping[str, Any]]) -> dict[str, list[str]]:
    """Arm -> its runs (expanded names, in order); a run without an arm is its own."""
    out: dict[str, list[str]] = {}
    for run in runs:
        out.setdefault(run.get(ARM) or run["name"], []).append(run["name"])
    return out
