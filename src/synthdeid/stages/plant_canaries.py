"""Write the canary notes planted in the language model's training set.

``synthdeid plant-canaries --count K --seed S --out canaries.parquet``

Canaries are note-like texts, each with one distinctive phrase, from a
seeded generator (:mod:`synthdeid.dplm.canaries`); they contain no real
data. Both the DP and the non-DP model train on them, and the memorization
audit checks whether samples reproduce them.
"""

from __future__ import annotations

import argparse
import logging

import pyarrow as pa

from synthdeid.artifacts import make_provenance, write_parquet_atomic
from synthdeid.cli_types import output_file, positive_int
from synthdeid.dplm.canaries import CANARIES_SCHEMA, make_canaries
from synthdeid.errors import ConfigError

log = logging.getLogger(__name__)


def register_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--count", required=True, type=positive_int, help="number of canaries (K)")
    parser.add_argument("--seed", type=int, default=7, help="generator seed")
    parser.add_argument("--out", required=True, type=output_file, help="canaries.parquet to write")


def run(args: argparse.Namespace) -> None:
    if args.count < 0:
        raise ConfigError(f"--count must be >= 0, got {args.count}")
    canaries = make_canaries(args.count, args.seed)
    table = pa.Table.from_pylist([c.to_json() for c in canaries], schema=CANARIES_SCHEMA)
    provenance = make_provenance("plant-canaries", {"count": args.count, "seed": args.seed})
    write_parquet_atomic(table, args.out, provenance)
    log.info("wrote %d canaries to %s", len(canaries), args.out)
