"""Draw the stratified, frequency-weighted subsample of synthetic rows to verbalize (Lorenzo et al. 2026, sec. 2.3).

All samples of the chosen synthesizer are pooled (Lorenzo et al. 2026 generate 4,000
rows and keeps a representative 1,000) and cut by completeness quartile and
the joint frequency of two strata variables (:mod:`synthdeid.tabular.subsample`).
"""

from __future__ import annotations

import argparse
import logging

import pyarrow as pa

from synthdeid.artifacts import make_provenance, write_json_atomic
from synthdeid.cli_types import input_file, output_file, positive_int
from synthdeid.tabular.spec import load_spec
from synthdeid.tabular.subsample import PAPER_QUOTAS, stratified_subsample
from synthdeid.tabular.tables import read_table, write_table

log = logging.getLogger(__name__)


def register_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--samples", required=True, type=input_file, help="a synthesizer's samples")
    parser.add_argument("--spec", required=True, type=input_file, help="variable spec (YAML)")
    parser.add_argument("--strata", required=True, nargs=2, metavar="VARIABLE")
    parser.add_argument("--size", required=True, type=positive_int, help="rows to keep")
    parser.add_argument("--quotas", nargs="+", type=int, default=list(PAPER_QUOTAS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True, type=output_file, help="subsample.parquet to write")
    parser.add_argument("--stats", required=True, type=output_file, help="stats JSON to write")


def run(args: argparse.Namespace) -> None:
    spec = load_spec(args.spec)
    samples, sample_provenance = read_table(args.samples, spec, ("sample",))
    chosen, stats = stratified_subsample(
        samples,
        spec,
        strata=(args.strata[0], args.strata[1]),
        size=args.size,
        quotas=args.quotas,
        seed=args.seed,
    )
    params = {
        "strata": args.strata,
        "size": args.size,
        "quotas": args.quotas,
        "seed": args.seed,
        "synthesizer": sample_provenance.get("params", {}).get("synthesizer"),
    }
    provenance = make_provenance("subsample-tabular", params, {"samples": args.samples})
    write_table(chosen, spec, args.out, provenance, {"sample": pa.int32()})
    write_json_atomic({"stats": stats, "provenance": provenance}, args.stats)
    log.info("subsample: %d of %d synthetic rows", len(chosen), len(samples))
