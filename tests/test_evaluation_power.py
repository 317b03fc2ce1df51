"""The projected minimum detectable effect of a study design (synthdeid.evaluation.power)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from synthdeid.errors import InputError
from synthdeid.evaluation.arms import RunScores
from synthdeid.evaluation.power import (
    NoiseComponents,
    archived_arm_scores,
    archived_scores,
    noise_components,
    pairing_check,
    projected_mde,
    projected_se,
    projection_rows,
    seeds_for_mde,
    split_check,
    split_se,
)
from synthdeid.stats import minimum_detectable_effect

METRIC = "span_overlap_f1"
ARCHIVE = Path(__file__).resolve().parents[1] / "docs" / "results" / "physionet-study-full-runs"


def simulated_runs(
    n_runs: int, *, seed_sd: float, common_sd: float, own_sd: float, resamples: int = 4000
) -> dict[str, RunScores]:
    """Runs of one recipe on the same notes: a training-seed offset each, document noise
    that every run shares (the same hard notes) and document noise of its own."""
    rng = np.random.default_rng(7)
    common = rng.normal(0.0, common_sd, resamples)
    runs = {}
    for k in range(n_runs):
        point = 0.84 + rng.normal(0.0, seed_sd)
        resampled = point + common + rng.normal(0.0, own_sd, resamples)
        runs[f"run{k:02d}"] = RunScores({METRIC: point}, {METRIC: resampled})
    return runs


def test_the_components_are_measured_as_simulated() -> None:
    runs = simulated_runs(40, seed_sd=0.02, common_sd=0.03, own_sd=0.01)
    noise = noise_components(runs, METRIC)
    assert noise.runs == 40
    assert noise.seed_sd == pytest.approx(0.02, rel=0.25)
    # the noise all runs share cancels in a difference; each run's own is left twice
    assert noise.document_se == pytest.approx(math.sqrt(2) * 0.01, rel=0.05)
    with pytest.raises(ValueError, match="two runs at least"):
        noise_components(dict(list(runs.items())[:1]), METRIC)


@pytest.mark.parametrize(("seeds", "reference_seeds"), [(1, 5), (3, 5), (3, 3), (5, 10)])
def test_the_projection_matches_the_real_test_on_disjoint_arms(
    seeds: int, reference_seeds: int
) -> None:
    runs = simulated_runs(60, seed_sd=0.02, common_sd=0.03, own_sd=0.012)
    noise = noise_components(runs, METRIC)
    names = sorted(runs)
    measured = []
    step = seeds + reference_seeds
    for start in range(0, len(names) - step + 1, step):
        arm, reference = names[start : start + seeds], names[start + seeds : start + step]
        measured.append(split_se(runs, arm, reference, METRIC, rng_seed=start) ** 2)
    # over many splits the real test's variance is the projection's (seed draws of finite
    # samples scatter it: the mean over splits, not each split)
    assert math.sqrt(np.mean(measured)) == pytest.approx(
        projected_se(noise, seeds, reference_seeds), rel=0.1
    )


def test_split_check_runs_the_real_test_on_every_split() -> None:
    runs = simulated_runs(5, seed_sd=0.02, common_sd=0.03, own_sd=0.012)
    checks = split_check(runs, METRIC, 2)
    assert len(checks) == 10  # 5 choose 2
    assert all(len(c.arm_runs) == 2 and len(c.reference_runs) == 3 for c in checks)
    assert all(not set(c.arm_runs) & set(c.reference_runs) for c in checks)
    assert all(c.measured_se > 0 and c.projected_se > 0 for c in checks)
    for bad in (0, 5):
        with pytest.raises(ValueError, match="needs 1 to 4 arm seeds"):
            split_check(runs, METRIC, bad)


def test_mde_by_hand_and_seeds_needed() -> None:
    noise = NoiseComponents(METRIC, 5, seed_sd=0.018, document_se=0.017)
    # 3 seeds against 5: documents 0.017^2/2 * (5/9 + 9/25), seeds 0.018^2 * (2/9 + 4/25)
    se = math.sqrt(0.017**2 / 2 * (5 / 9 + 9 / 25) + 0.018**2 * (2 / 9 + 4 / 25))
    assert projected_se(noise, 3, 5) == pytest.approx(se)
    assert projected_mde(noise, 3, 5) == pytest.approx(minimum_detectable_effect(se))
    assert projected_mde(noise, 3, 5, arms=16) > projected_mde(noise, 3, 5)
    # one seed each: the document part alone (the seed bootstrap of one run is no spread)
    assert projected_se(noise, 1, 1) == pytest.approx(0.017)
    # a fixed 5-seed reference is a floor that more arm seeds never pass
    floor = math.sqrt(0.017**2 / 2 * 9 / 25 + 0.018**2 * 4 / 25)
    assert minimum_detectable_effect(floor) > 0.02
    assert seeds_for_mde(noise, 0.02, reference_seeds=5) is None
    needed = seeds_for_mde(noise, 0.02, reference_seeds=None)
    assert needed is not None
    assert (
        projected_mde(noise, needed, needed) <= 0.02 < projected_mde(noise, needed - 1, needed - 1)
    )
    adjusted = seeds_for_mde(noise, 0.02, reference_seeds=None, arms=16)
    assert adjusted is not None and adjusted > needed
    rows = projection_rows(noise, [1, 3, 10], 5, 16)
    assert [r["seeds"] for r in rows] == [1, 3, 10]
    assert rows[1]["se"] == pytest.approx(se)
    assert all(r["mde_bonferroni"] > r["mde"] for r in rows)
    for bad in ((0, 5), (3, 0)):
        with pytest.raises(ValueError, match="a seed at least"):
            projected_se(noise, *bad)
    with pytest.raises(ValueError, match="arms must be"):
        projected_mde(noise, 3, 5, arms=0)


def test_the_reference_arm_of_the_committed_archive() -> None:
    runs = archived_arm_scores([ARCHIVE], "real_only")
    assert sorted(runs) == [f"real_only-seed{k}" for k in range(1, 6)]
    points = [run.point[METRIC] for run in runs.values()]
    noise = noise_components(runs, METRIC)
    assert noise.seed_sd == pytest.approx(float(np.std(points, ddof=1)))
    assert 0 < noise.document_se < 0.1
    with pytest.raises(InputError, match="no run of arm 'nope'"):
        archived_arm_scores([ARCHIVE], "nope")


def two_arms(shared: float, seeds: int = 40) -> tuple[dict[str, RunScores], dict[str, RunScores]]:
    """An arm and a reference of the same recipe, seeds 1..``seeds`` each: a seed's offset
    is ``shared`` of it the same in both arms (same initialization), the rest its own."""
    rng = np.random.default_rng(11)
    common = rng.normal(0.0, 0.03, 4000)
    arms: list[dict[str, RunScores]] = [{}, {}]
    for seed in range(1, seeds + 1):
        offset = rng.normal(0.0, 0.03)
        for index, arm in enumerate(("arm", "ref")):
            own = rng.normal(0.0, 0.03)
            point = 0.84 + math.sqrt(shared) * offset + math.sqrt(1 - shared) * own
            resampled = point + common + rng.normal(0.0, 0.005, 4000)
            arms[index][f"{arm}-seed{seed}"] = RunScores({METRIC: point}, {METRIC: resampled})
    return arms[0], arms[1]


def test_pairing_lowers_the_se_only_as_far_as_seed_effects_are_shared() -> None:
    arm, reference = two_arms(0.9)
    shared = pairing_check("arm", arm, "ref", reference, METRIC)
    arm, reference = two_arms(0.0)
    own = pairing_check("arm", arm, "ref", reference, METRIC)
    assert shared.seeds == own.seeds == tuple(range(1, 41))
    assert shared.correlation is not None and shared.correlation > 0.7
    assert own.correlation is not None and abs(own.correlation) < 0.4
    # shared effects cancel in the paired difference: SE about sqrt(1 - 0.9) of unpaired
    assert shared.paired_se < 0.5 * shared.unpaired_se
    assert own.paired_se == pytest.approx(own.unpaired_se, rel=0.3)


def test_pairing_uses_only_the_seeds_both_arms_trained() -> None:
    arm, reference = two_arms(0.5, seeds=5)
    arm = {name: run for name, run in arm.items() if name != "arm-seed5"}
    reference["ref-seed9"] = reference.pop("ref-seed1")
    check = pairing_check("arm", arm, "ref", reference, METRIC)
    assert check.seeds == (2, 3, 4)
    assert check.correlation is not None
    two = {name: arm[name] for name in ("arm-seed2", "arm-seed3")}
    assert pairing_check("arm", two, "ref", reference, METRIC).correlation is None
    with pytest.raises(ValueError, match="share 1 training seeds; pairing needs 2"):
        pairing_check("arm", {"arm-seed2": arm["arm-seed2"]}, "ref", reference, METRIC)


def test_archived_arms_are_scored_on_one_set_of_resamples() -> None:
    scores = archived_scores([ARCHIVE], ["real_only", "template-syn25"])
    alone = archived_arm_scores([ARCHIVE], "real_only")
    assert sorted(scores["real_only"]) == sorted(alone)
    first = "real_only-seed1"
    assert np.array_equal(
        scores["real_only"][first].resampled[METRIC], alone[first].resampled[METRIC]
    )
    check = pairing_check(
        "template-syn25", scores["template-syn25"], "real_only", scores["real_only"], METRIC
    )
    assert check.seeds[:2] == (1, 2) and check.paired_se > 0 and check.unpaired_se > 0
    with pytest.raises(InputError, match="no run of arm 'nope'"):
        archived_scores([ARCHIVE], ["real_only", "nope"])
