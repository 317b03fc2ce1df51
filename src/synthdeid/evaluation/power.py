"""What a study design can detect, projected from its reference arm before the arms train.

The test of an arm against the reference (:func:`synthdeid.evaluation.arms.arm_paired_test`)
resamples documents and, independently, each arm's training seeds. Its standard
error has two parts, both measurable on the reference arm's runs alone:

* **documents**: for two single runs scored on the same notes, the bootstrap SE
  of their difference (``document_se``; what both runs get wrong alike cancels).
  The run-specific part, of variance ``v = document_se**2 / 2`` per run, is left.
  The mean of ``k`` runs drawn with replacement from ``k`` has variance
  ``v / k`` from the runs and ``v (k - 1) / k**2`` from the draw, so an arm adds
  ``v (2 k - 1) / k**2``;
* **seeds**: the SD of the metric over training seeds (``seed_sd``). The seed
  bootstrap draws ``k`` of ``k`` runs with replacement, so the variance of its
  mean is the plug-in ``seed_sd**2 * (k - 1) / k**2`` (0 for one seed: with one
  seed the test is the document bootstrap alone, and overstates its precision).

:func:`projected_se` adds them for a null arm (an arm that differs from the
reference only by its seeds) and :func:`projected_mde` turns that into the minimum
detectable effect the study table will report for it, Bonferroni-adjusted over
``arms`` tests as the table is. :func:`noise_components` measures the two parts
on a set of runs; :func:`split_check` compares the projection with the real test
on disjoint subsets of those runs, so a reader sees how far to trust it.
:func:`pairing_check` measures, once an arm has trained, what pairing the
training seeds it shares with the reference would gain over the unpaired test.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from synthdeid.errors import InputError
from synthdeid.evaluation.archive import read_archives
from synthdeid.evaluation.arms import RunScores, arm_paired_test, per_resample
from synthdeid.evaluation.compare import load_runs
from synthdeid.ner.sweeps import training_seed_of
from synthdeid.stats import (
    ALPHA,
    MDE_POWER,
    bootstrap_se,
    minimum_detectable_effect,
    resample_weights,
    sample_sd,
)


def archived_scores(
    archives: Sequence[Path], arms: Sequence[str]
) -> dict[str, dict[str, RunScores]]:
    """Arm -> its runs in ``archives``, every run of ``arms`` scored on the same
    document resamples as compare-ner scores them (its default resamples and seed)."""
    records = [run for run in read_archives(archives) if run.arm in arms]
    for arm in arms:
        if not any(run.arm == arm for run in records):
            raise InputError(archives[0], None, f"the archives hold no run of arm {arm!r}")
    tables = load_runs([(run.name, run.folder) for run in records], records[0].name)
    n_docs = len(next(iter(tables.values())).note_ids)
    weights = resample_weights(n_docs)
    return {
        arm: {
            run.name: RunScores.of(tables[run.name], weights) for run in records if run.arm == arm
        }
        for arm in arms
    }


def archived_arm_scores(archives: Sequence[Path], arm: str) -> dict[str, RunScores]:
    """The runs of ``arm`` in ``archives`` (:func:`archived_scores`)."""
    return archived_scores(archives, [arm])[arm]


@dataclass(frozen=True)
class NoiseComponents:
    """The two sources of noise of one metric, measured on an arm's runs (module docstring)."""

    metric: str
    runs: int
    seed_sd: float  # SD over training seeds of the metric on all documents
    document_se: float  # bootstrap SE of the difference of two single runs on the same notes


def noise_components(runs: Mapping[str, RunScores], metric: str) -> NoiseComponents:
    """``seed_sd`` and ``document_se`` of ``metric`` over ``runs`` (two at least).

    ``document_se`` is the root mean square, over every pair of runs, of the
    bootstrap SE of the pair's per-resample difference.
    """
    if len(runs) < 2:
        raise ValueError(f"the noise of {metric} needs two runs at least, got {len(runs)}")
    scores = list(runs.values())
    seed_sd = sample_sd(np.array([run.point[metric] for run in scores], dtype=float))
    values = per_resample(scores, metric)
    variances = [
        bootstrap_se(values[a] - values[b]) ** 2
        for a, b in itertools.combinations(range(len(scores)), 2)
    ]
    return NoiseComponents(metric, len(scores), seed_sd, math.sqrt(float(np.mean(variances))))


def projected_se(noise: NoiseComponents, seeds: int, reference_seeds: int) -> float:
    """SE of the test of a null arm of ``seeds`` runs against ``reference_seeds`` runs."""
    if seeds < 1 or reference_seeds < 1:
        raise ValueError(f"an arm needs a seed at least, got {seeds} and {reference_seeds}")

    def drawn(k: int) -> float:  # the variance factor of the drawn mean of k runs
        return (2 * k - 1) / k**2

    def spread(k: int) -> float:  # the plug-in variance factor of k seeds' mean
        return (k - 1) / k**2

    documents = noise.document_se**2 / 2 * (drawn(seeds) + drawn(reference_seeds))
    seed_part = noise.seed_sd**2 * (spread(seeds) + spread(reference_seeds))
    return math.sqrt(documents + seed_part)


def projected_mde(
    noise: NoiseComponents,
    seeds: int,
    reference_seeds: int,
    *,
    arms: int = 1,
    alpha: float = ALPHA,
    power: float = MDE_POWER,
) -> float:
    """The MDE the study table would show for such an arm, Bonferroni over ``arms`` tests."""
    if arms < 1:
        raise ValueError(f"arms must be at least 1, got {arms}")
    se = projected_se(noise, seeds, reference_seeds)
    return minimum_detectable_effect(se, alpha / arms, power)


@dataclass(frozen=True)
class SplitCheck:
    """The real test's SE on one split of the runs into a pseudo-arm and a pseudo-reference."""

    arm_runs: tuple[str, ...]
    reference_runs: tuple[str, ...]
    measured_se: float
    projected_se: float


def split_se(
    runs: Mapping[str, RunScores],
    arm_runs: Sequence[str],
    reference_runs: Sequence[str],
    metric: str,
    rng_seed: int = 0,
) -> float:
    """The SE of the real test of ``arm_runs`` against ``reference_runs`` (seeds unpaired)."""
    return arm_paired_test(
        "split",
        {name: runs[name] for name in arm_runs},
        "rest",
        {name: runs[name] for name in reference_runs},
        metric=metric,
        rng_seed=rng_seed,
    ).se


def split_check(
    runs: Mapping[str, RunScores], metric: str, arm_seeds: int, rng_seed: int = 0
) -> list[SplitCheck]:
    """For every split of ``runs`` into ``arm_seeds`` runs and the rest, the SE of
    :func:`~synthdeid.evaluation.arms.arm_paired_test` (seeds unpaired) beside the
    projection from the components of all ``runs``. Two null arms of the same
    recipe: what the projection should reproduce."""
    names = sorted(runs)
    if not 1 <= arm_seeds < len(names):
        raise ValueError(f"a split of {len(names)} runs needs 1 to {len(names) - 1} arm seeds")
    noise = noise_components(runs, metric)
    checks = []
    for chosen in itertools.combinations(names, arm_seeds):
        rest = tuple(name for name in names if name not in chosen)
        measured = split_se(runs, chosen, rest, metric, rng_seed)
        checks.append(
            SplitCheck(chosen, rest, measured, projected_se(noise, len(chosen), len(rest)))
        )
    return checks


def seeds_for_mde(
    noise: NoiseComponents,
    target: float,
    *,
    reference_seeds: int | None,
    arms: int = 1,
    limit: int = 1000,
) -> int | None:
    """The fewest seeds per arm whose projected MDE is at most ``target``.

    ``reference_seeds``: the reference's seeds, fixed; None: the reference has as
    many seeds as each arm. None where no count up to ``limit`` reaches ``target``
    (with a fixed reference, the reference's own noise is a floor).
    """
    for seeds in range(1, limit + 1):
        reference = seeds if reference_seeds is None else reference_seeds
        if projected_mde(noise, seeds, reference, arms=arms) <= target:
            return seeds
    return None


def projection_rows(
    noise: NoiseComponents,
    seed_counts: Sequence[int],
    reference_seeds: int,
    arms: int,
) -> list[dict[str, float | int]]:
    """One row per seed count: projected SE and MDE against the fixed reference and
    against a reference with as many seeds, unadjusted and over ``arms`` tests."""
    rows: list[dict[str, float | int]] = []
    for seeds in seed_counts:
        rows.append(
            {
                "seeds": seeds,
                "se": projected_se(noise, seeds, reference_seeds),
                "mde": projected_mde(noise, seeds, reference_seeds),
                "mde_bonferroni": projected_mde(noise, seeds, reference_seeds, arms=arms),
                "se_equal": projected_se(noise, seeds, seeds),
                "mde_equal_bonferroni": projected_mde(noise, seeds, seeds, arms=arms),
            }
        )
    return rows


@dataclass(frozen=True)
class PairingCheck:
    """Whether an arm's training seeds share their effect with the reference's seeds
    of the same number: the real test on the seeds both trained, paired and unpaired."""

    arm: str
    seeds: tuple[int, ...]  # the training seeds both arms trained
    correlation: float | None  # over those seeds, of the metric on all documents
    paired_se: float  # seed s of the arm drawn with seed s of the reference
    unpaired_se: float  # the two arms' seeds drawn apart


def pairing_check(
    arm: str,
    runs: Mapping[str, RunScores],
    reference: str,
    reference_runs: Mapping[str, RunScores],
    metric: str,
    rng_seed: int = 0,
) -> PairingCheck:
    """The test of ``arm`` against ``reference`` on the training seeds both have, with
    the seeds paired and with them drawn apart (runs are named ``<arm>-seed<n>``).

    Pairing lowers the SE only as far as a seed's effect is shared by the two arms
    (the same initialization and draw order helping or hurting both): a
    ``paired_se`` near ``unpaired_se`` says it is not, and a design that pairs the
    seeds arms share would detect no smaller effect.
    """
    by_seed = {training_seed_of(name, arm): name for name in runs}
    reference_by_seed = {training_seed_of(name, reference): name for name in reference_runs}
    seeds = sorted(s for s in by_seed.keys() & reference_by_seed.keys() if s is not None)
    if len(seeds) < 2:
        raise ValueError(
            f"arms {arm!r} and {reference!r} share {len(seeds)} training seeds; pairing needs 2"
        )
    chosen = {by_seed[s]: runs[by_seed[s]] for s in seeds}
    chosen_reference = {reference_by_seed[s]: reference_runs[reference_by_seed[s]] for s in seeds}

    def se(paired: bool) -> float:
        return arm_paired_test(
            arm,
            chosen,
            reference,
            chosen_reference,
            metric=metric,
            seeds=seeds if paired else None,
            reference_seeds=seeds,
            rng_seed=rng_seed,
        ).se

    a = np.array([run.point[metric] for run in chosen.values()], dtype=float)
    r = np.array([run.point[metric] for run in chosen_reference.values()], dtype=float)
    defined = len(seeds) >= 3 and a.std() > 0 and r.std() > 0 and not np.isnan(a + r).any()
    correlation = float(np.corrcoef(a, r)[0, 1]) if defined else None
    return PairingCheck(arm, tuple(seeds), correlation, se(True), se(False))
