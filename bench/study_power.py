"""What the study can detect, projected from its reference arm's archived runs.

    python bench/study_power.py --archive docs/results/physionet-study-full-runs \\
        --arm real_only --arms 16 --target 0.02

Prints, for the headline metric: the two noise components measured on the
arm's runs (training-seed SD; bootstrap SE of the difference of two single
runs on the same notes), the real two-level test on every split of those runs
beside its projection (how far to trust it), and the projected minimum
detectable effect of an arm of k seeds against the reference, unadjusted and
Bonferroni-adjusted over ``--arms`` tests, as the study table would report it
(synthdeid.evaluation.power). With ``--pairing ARM ...``, for each arm the real
test on the training seeds it shares with the reference, seeds paired and
unpaired: whether pairing those seeds would make the design more precise
(it does only as far as a seed's effect is shared by the two arms). Reads the
archive only: no corpus, no model.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from synthdeid.evaluation.power import (
    archived_scores,
    noise_components,
    pairing_check,
    projection_rows,
    seeds_for_mde,
    split_check,
)
from synthdeid.evaluation.study_table import HEADLINE_METRIC, MDE_TARGET


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--archive", type=Path, nargs="+", required=True)
    parser.add_argument("--arm", default="real_only", help="the reference arm")
    parser.add_argument("--metric", default=HEADLINE_METRIC)
    parser.add_argument("--arms", type=int, default=1, help="arms tested (Bonferroni)")
    parser.add_argument("--target", type=float, default=MDE_TARGET)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 3, 5, 10, 20, 40])
    parser.add_argument(
        "--pairing", nargs="+", default=[], help="arms whose shared seeds to test paired"
    )
    args = parser.parse_args(argv)

    scores = archived_scores(args.archive, [args.arm, *args.pairing])
    runs = scores[args.arm]
    noise = noise_components(runs, args.metric)
    reference = len(runs)
    print(
        f"{args.metric} of arm {args.arm}, {reference} runs: training-seed SD "
        f"{noise.seed_sd:.4f}; bootstrap SE of a one-run difference {noise.document_se:.4f}"
    )
    print("\nthe real test on splits of these runs (seeds unpaired) against the projection:\n")
    print("| pseudo-arm seeds | reference seeds | splits | measured SE (range) | projected SE |")
    print("|---|---|---|---|---|")
    for k in range(1, reference):
        checks = split_check(runs, args.metric, k)
        measured = sorted(c.measured_se for c in checks)
        print(
            f"| {k} | {reference - k} | {len(checks)} | {sum(measured) / len(measured):.4f} "
            f"({measured[0]:.4f}-{measured[-1]:.4f}) | {checks[0].projected_se:.4f} |"
        )
    print(f"\nprojected, a null arm of k seeds (95%, power 0.8; Bonferroni over {args.arms}):\n")
    print(
        f"| k | SE vs {reference} ref. seeds | MDE | MDE Bonferroni | SE vs k ref. seeds "
        "| MDE Bonferroni vs k |"
    )
    print("|---|---|---|---|---|---|")
    for row in projection_rows(noise, args.seeds, reference, args.arms):
        print(
            f"| {row['seeds']} | {row['se']:.4f} | {row['mde']:.3f} | "
            f"{row['mde_bonferroni']:.3f} | {row['se_equal']:.4f} | "
            f"{row['mde_equal_bonferroni']:.3f} |"
        )
    for label, arms in (("unadjusted", 1), (f"Bonferroni over {args.arms}", args.arms)):
        fixed = seeds_for_mde(noise, args.target, reference_seeds=reference, arms=arms)
        equal = seeds_for_mde(noise, args.target, reference_seeds=None, arms=arms)
        print(
            f"\nMDE <= {args.target} ({label}): seeds per arm against the {reference}-seed "
            f"reference: {fixed if fixed is not None else 'none reaches it'}; with as many "
            f"reference seeds: {equal if equal is not None else 'none up to 1000'}"
        )
    if args.pairing:
        print(f"\nthe real test on the seeds each arm shares with {args.arm}:\n")
        print("| arm | shared seeds | arm | reference | correlation | SE paired | SE unpaired |")
        print("|---|---|---|---|---|---|---|")
    for arm in args.pairing:
        check = pairing_check(arm, scores[arm], args.arm, runs, args.metric)
        values = [
            " / ".join(f"{group[f'{name}-seed{s}'].point[args.metric]:.3f}" for s in check.seeds)
            for name, group in ((arm, scores[arm]), (args.arm, runs))
        ]
        correlation = "n/a" if check.correlation is None else f"{check.correlation:+.2f}"
        print(
            f"| {arm} | {' '.join(map(str, check.seeds))} | {values[0]} | {values[1]} | "
            f"{correlation} | {check.paired_se:.4f} | {check.unpaired_se:.4f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
