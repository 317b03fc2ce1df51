"""Write the canary and outlier notes planted in the language model's training set.

``synthdeid plant-canaries --count K --seed S [--outliers M --outlier-seed T]
--out canaries.parquet``

Canaries are note-like texts, each with one improbable distinctive phrase,
from a seeded generator (:mod:`synthdeid.dplm.canaries`); outliers are
clinically plausible ICU notes, each with one rare but realistic clinical
combination, from another (:mod:`synthdeid.dplm.outliers`; Zecevic et al.,
sec. 4.6). Neither contains real data. One table holds both (column
``kind``): both the DP and the non-DP model train on every row, and the
memorization audit checks whether samples reproduce the canaries and
regenerate the outliers.
"""

from __future__ import annotations

import argparse
import logging

import pyarrow as pa

from synthdeid.artifacts import make_provenance, write_parquet_atomic
from synthdeid.cli_types import non_negative_int, output_file, positive_int
from synthdeid.dplm.canaries import CANARIES_SCHEMA, make_canaries
from synthdeid.dplm.outliers import make_outliers
from synthdeid.errors import ConfigError

log = logging.getLogger(__name__)


def register_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--count", required=True, type=positive_int, help="number of canaries (K)")
    parser.add_argument("--seed", type=int, default=7, help="canary generator seed")
    parser.add_argument(
        "--outliers", type=non_negative_int, default=0, help="number of outliers (M; 0: none)"
    )
    parser.add_argument("--outlier-seed", type=int, default=11, help="outlier generator seed")
    parser.add_argument("--out", required=True, type=output_file, help="canaries.parquet to write")


def run(args: argparse.Namespace) -> None:
    if args.count < 0:
        raise ConfigError(f"--count must be >= 0, got {args.count}")
    planted = make_canaries(args.count, args.seed) + make_outliers(args.outliers, args.outlier_seed)
    table = pa.Table.from_pylist([c.to_json() for c in planted], schema=CANARIES_SCHEMA)
    provenance = make_provenance(
        "plant-canaries",
        {
            "count": args.count,
            "seed": args.seed,
            "outliers": args.outliers,
            "outlier_seed": args.outlier_seed,
        },
    )
    write_parquet_atomic(table, args.out, provenance)
    log.info("wrote %d canaries and %d outliers to %s", args.count, args.outliers, args.out)
