"""Discretize a table of clinical variables by its spec and split it 50/50 into train / holdout.

Lorenzo et al. 2026 (section 2.2) fit the synthesizers on one half of the records and
keeps the other half as the holdout the novelty metrics compare with. The
split is a seeded permutation of the records; only the spec's variables are
written (``record_id``, ``split``, one string column per variable).
"""

from __future__ import annotations

import argparse
import logging

import pyarrow as pa

from synthdeid.artifacts import make_provenance, write_json_atomic
from synthdeid.cli_types import input_file, json_object, output_file
from synthdeid.tabular.source import chosen_source, describe_source, read_source_table
from synthdeid.tabular.spec import discretize, load_spec
from synthdeid.tabular.tables import split_labels, write_table

log = logging.getLogger(__name__)


def register_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--source", required=True, type=json_object, help='JSON: {"path": ...} or {"sklearn": ...}'
    )
    parser.add_argument("--spec", required=True, type=input_file, help="variable spec (YAML)")
    parser.add_argument("--holdout-fraction", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True, type=output_file, help="prepared.parquet to write")
    parser.add_argument("--summary", required=True, type=output_file, help="summary.json to write")


def run(args: argparse.Namespace) -> None:
    spec = load_spec(args.spec)
    source = chosen_source(args.source)
    raw = read_source_table(source)
    where = describe_source(source)
    frame = discretize(raw, spec, where)
    frame.insert(0, "record_id", [f"{spec.record_id_prefix}-{i:06d}" for i in range(len(frame))])
    frame.insert(1, "split", split_labels(len(frame), args.holdout_fraction, args.seed))
    provenance = make_provenance(
        "prepare-tabular",
        {
            "source": where,
            "spec": spec.name,
            "holdout_fraction": args.holdout_fraction,
            "seed": args.seed,
        },
        {"spec": args.spec, **({"source": source["path"]} if "path" in source else {})},
    )
    write_table(frame, spec, args.out, provenance, {"split": pa.string()})
    counts = frame["split"].value_counts().to_dict()
    write_json_atomic(
        {
            "records": len(frame),
            "splits": counts,
            "variables": {v.name: list(v.domain) for v in spec.variables},
            "distinct_rows": int(frame[spec.names].drop_duplicates().shape[0]),
            "provenance": provenance,
        },
        args.summary,
    )
    log.info(
        "prepared %s: %d records (%s), %d variables",
        where,
        len(frame),
        ", ".join(f"{k} {v}" for k, v in sorted(counts.items())),
        len(spec.names),
    )
