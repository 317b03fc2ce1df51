"""Benchmark the blocked, deduplicated novelty metrics against a naive full distance matrix.

    python bench/tabular_dcr.py [--rows 100000] [--columns 13] [--categories 6] [--seed 0]
                                [--no-skew] [--baseline-rows 5000] [--sdmetrics-rows 0]

Random categorical tables stand in for discretized clinical data: ``--rows``
synthetic rows, and training and holdout tables of ``rows / 2`` rows each
(``--train-rows``, ``--holdout-rows``), ``--columns`` columns of
``--categories`` values (one of them ``"unknown"``). By default the rows are
skewed like real discretized records: every row draws one of a few latent
profiles, and every profile has its own Dirichlet(0.3)-skewed distribution per
column, so columns are correlated and frequent patterns repeat (duplicate
rows); ``--no-skew`` draws every value uniformly (almost all rows distinct, the
worst case for the deduplication). Synthetic, training and holdout rows come
from the same distribution.

Measured, each in a fresh spawned process so that peak figures do not mix:

- ``novelty()`` of ``synthdeid.tabular.metrics`` at the full size (blocked
  one-hot distances over distinct rows, 64 MiB blocks);
- the same at the baseline size (``--baseline-rows`` synthetic rows, training
  and holdout scaled alike);
- the naive baseline at the baseline size: the same one-hot arithmetic on the
  full synthetic x training, synthetic x holdout and holdout x training float32
  distance matrices (no deduplication, no blocks), checked to give the same
  metrics;
- optionally SDMetrics' ``DCROverfittingProtection`` (pandas cross joins in
  1000 x 1000 chunks, no subsampling) at ``--sdmetrics-rows`` synthetic rows.

Printed per configuration: wall seconds (untraced run), the tracemalloc peak
of the measured call (Python and numpy allocations made during it, traced
run), the process's peak resident memory (``ru_maxrss``) and its growth over
the resident memory once the tables were built. Then the naive / blocked
ratios at the baseline size, and the naive figures extrapolated to the full
size (one synthetic x training float32 matrix = n_syn * n_train * 4 bytes).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import sys
import time
import tracemalloc
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

MIB = 2**20
PROFILES = 12


def make_tables(
    synthetic_rows: int,
    train_rows: int,
    holdout_rows: int,
    columns: int,
    categories: int,
    seed: int,
    skew: bool,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Training, holdout and synthetic tables drawn from one (skewed or uniform) distribution."""
    rng = np.random.default_rng(seed)
    values = np.array([f"v{i}" for i in range(categories - 1)] + ["unknown"], dtype=object)
    if skew:
        profile_weights = rng.dirichlet(np.full(PROFILES, 1.0))
        # per profile and column: a skewed distribution over the categories
        probabilities = rng.dirichlet(np.full(categories, 0.3), size=(PROFILES, columns))
        cumulative = probabilities.cumsum(axis=2)

    def draw(rows: int) -> pd.DataFrame:
        if not skew:
            codes = rng.integers(0, categories, size=(rows, columns))
        else:
            profile = rng.choice(PROFILES, size=rows, p=profile_weights)
            uniform = rng.random((rows, columns, 1))
            codes = (uniform > cumulative[profile]).sum(axis=2)
            codes = np.minimum(codes, categories - 1)
        return pd.DataFrame(values[codes], columns=[f"var{j:02d}" for j in range(columns)])

    return draw(train_rows), draw(holdout_rows), draw(synthetic_rows)


def naive_novelty(
    train: pd.DataFrame, holdout: pd.DataFrame, synthetic: pd.DataFrame
) -> dict[str, float]:
    """The same metrics from full float32 distance matrices (no dedup, no blocks)."""
    from synthdeid.tabular.metrics import _encode, dcr_overfitting_score, dcr_share, nndr

    columns = list(train.columns)
    (tr, ho, sy), cardinalities = _encode([train, holdout, synthetic], columns)
    offsets = np.concatenate([[0], np.cumsum(cardinalities)[:-1]])
    width = int(cardinalities.sum())

    def one_hot(codes: np.ndarray) -> np.ndarray:
        hot = np.zeros((len(codes), width), dtype=np.float32)
        hot[np.arange(len(codes))[:, None], codes + offsets] = 1.0
        return hot

    def two_nearest(query: np.ndarray, reference: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        distances = 1.0 - (one_hot(query) @ one_hot(reference).T) / np.float32(len(columns))
        smallest = np.partition(distances, 1, axis=1)[:, :2]
        # round float32 k / n back to the exact float64 k / n
        mismatches = np.rint(smallest.astype(np.float64) * len(columns))
        return mismatches[:, 0] / len(columns), mismatches[:, 1] / len(columns)

    d1_train, d2_train = two_nearest(sy, tr)
    d1_holdout, _ = two_nearest(sy, ho)
    h1, h2 = two_nearest(ho, tr)
    nndr_synthetic = float(nndr(d1_train, d2_train).mean())
    nndr_holdout = float(nndr(h1, h2).mean())
    return {
        "identical_match_share": float(np.mean(d1_train == 0.0)),
        "dcr_share": dcr_share(d1_train, d1_holdout),
        "dcr_closer_to_training": float(np.mean(d1_train < d1_holdout)),
        "dcr_overfitting_score": dcr_overfitting_score(d1_train, d1_holdout),
        "nndr_synthetic": nndr_synthetic,
        "nndr_holdout": nndr_holdout,
        "nndr_ratio": nndr_synthetic / nndr_holdout if nndr_holdout > 0 else float("nan"),
    }


def sdmetrics_overfitting(
    train: pd.DataFrame, holdout: pd.DataFrame, synthetic: pd.DataFrame
) -> dict[str, float]:
    from sdmetrics.single_table import DCROverfittingProtection

    metadata = {"columns": {c: {"sdtype": "categorical"} for c in train.columns}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = DCROverfittingProtection.compute_breakdown(
            train, synthetic, holdout, metadata, None, num_rows_subsample=None
        )
    return {
        "dcr_closer_to_training": float(result["synthetic_data_percentages"]["closer_to_training"]),
        "dcr_overfitting_score": float(result["score"]),
    }


def blocked_novelty(
    train: pd.DataFrame, holdout: pd.DataFrame, synthetic: pd.DataFrame
) -> dict[str, float]:
    from synthdeid.tabular.metrics import novelty

    return novelty(train, holdout, synthetic).as_dict()


METHODS = {"blocked": blocked_novelty, "naive": naive_novelty, "sdmetrics": sdmetrics_overfitting}


def measure(method: str, sizes: tuple[int, int, int], options: dict[str, Any]) -> dict[str, Any]:
    """Build the tables, time ``method`` (untraced), then trace its allocations in a second run."""
    train, holdout, synthetic = make_tables(*sizes, **options)
    rss_data = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    function = METHODS[method]
    start = time.perf_counter()
    metrics = function(train, holdout, synthetic)
    seconds = time.perf_counter() - start
    rss_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    tracemalloc.start()
    function(train, holdout, synthetic)
    _, traced_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    distinct = [len(t.drop_duplicates()) for t in (synthetic, train, holdout)]
    return {
        "method": method,
        "rows": list(sizes),  # synthetic, train, holdout
        "distinct": distinct,
        "seconds": seconds,
        "traced_peak_mib": traced_peak / MIB,
        "rss_peak_mib": rss_peak,
        "rss_growth_mib": rss_peak - rss_data,
        "metrics": metrics,
    }


def run_isolated(
    method: str, sizes: tuple[int, int, int], options: dict[str, Any]
) -> dict[str, Any]:
    """``measure`` in a fresh spawned interpreter (clean ru_maxrss)."""
    context = multiprocessing.get_context("spawn")
    with context.Pool(1) as pool:
        return pool.apply(measure, (method, sizes, options))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=100_000, help="synthetic rows")
    parser.add_argument("--train-rows", type=int, default=None, help="default: rows / 2")
    parser.add_argument("--holdout-rows", type=int, default=None, help="default: rows / 2")
    parser.add_argument("--columns", type=int, default=13)
    parser.add_argument("--categories", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-skew", action="store_true", help="uniform values")
    parser.add_argument("--baseline-rows", type=int, default=5_000, help="synthetic rows")
    parser.add_argument(
        "--sdmetrics-rows", type=int, default=0, help="also time SDMetrics at this size (0: skip)"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()

    options = {
        "columns": args.columns,
        "categories": args.categories,
        "seed": args.seed,
        "skew": not args.no_skew,
    }
    train_rows = args.train_rows if args.train_rows is not None else args.rows // 2
    holdout_rows = args.holdout_rows if args.holdout_rows is not None else args.rows // 2

    def scaled(rows: int) -> tuple[int, int, int]:
        factor = rows / args.rows
        return rows, max(2, round(train_rows * factor)), max(2, round(holdout_rows * factor))

    full = (args.rows, train_rows, holdout_rows)
    small = scaled(args.baseline_rows)
    runs = [
        ("blocked", full),
        ("blocked", small),
        ("naive", small),
    ]
    if args.sdmetrics_rows > 0:
        runs.append(("sdmetrics", scaled(args.sdmetrics_rows)))
    results = [run_isolated(method, sizes, options) for method, sizes in runs]

    full_blocked, small_blocked, small_naive = results[:3]
    agree = all(
        np.isclose(small_naive["metrics"][k], v, rtol=0, atol=1e-12, equal_nan=True)
        for k, v in small_blocked["metrics"].items()
    )
    print(
        f"{args.columns} columns x {args.categories} categories, "
        f"{'uniform' if args.no_skew else 'skewed (latent profiles)'}, seed {args.seed}"
    )
    print(
        f"{'method':<10} {'syn/train/holdout rows':>24} {'distinct syn/train/holdout':>28} "
        f"{'seconds':>8} {'traced MiB':>11} {'RSS MiB':>8} {'RSS +MiB':>9}"
    )
    for row in results:
        print(
            f"{row['method']:<10} {'/'.join(map(str, row['rows'])):>24} "
            f"{'/'.join(map(str, row['distinct'])):>28} {row['seconds']:>8.2f} "
            f"{row['traced_peak_mib']:>11.1f} {row['rss_peak_mib']:>8.0f} "
            f"{row['rss_growth_mib']:>9.0f}"
        )
    print("metrics at full size:")
    for key, value in full_blocked["metrics"].items():
        print(f"  {key:<24} {value:.4f}")
    print(f"naive and blocked metrics agree at the baseline size: {'yes' if agree else 'NO'}")
    if args.sdmetrics_rows > 0:
        sdm = results[3]["metrics"]
        print(
            f"sdmetrics at {results[3]['rows'][0]} rows: closer_to_training "
            f"{sdm['dcr_closer_to_training']:.4f}, score {sdm['dcr_overfitting_score']:.4f}"
        )
    print(
        f"at {small[0]} synthetic rows, naive / blocked: "
        f"time {small_naive['seconds'] / small_blocked['seconds']:.2f}x, "
        f"traced peak {small_naive['traced_peak_mib'] / small_blocked['traced_peak_mib']:.2f}x"
    )
    pairs_small = small[0] * small[1]
    pairs_full = full[0] * full[1]
    print(
        f"naive extrapolated to {full[0]} x {full[1]}: one float32 synthetic x training "
        f"matrix = {pairs_full * 4 / 2**30:.1f} GiB "
        f"(measured traced peak {small_naive['traced_peak_mib']:.0f} MiB at {small[0]} x {small[1]} "
        f"-> ~{small_naive['traced_peak_mib'] * pairs_full / pairs_small / 1024:.1f} GiB), "
        f"time ~{small_naive['seconds'] * pairs_full / pairs_small:.0f} s; "
        f"blocked measured: {full_blocked['seconds']:.1f} s, "
        f"{full_blocked['traced_peak_mib']:.0f} MiB traced peak"
    )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=float) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
