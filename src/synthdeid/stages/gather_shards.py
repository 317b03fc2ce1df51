"""Join the shards of a sharded step into the artifact one job would have written.

``synthdeid gather-shards OUT SHARD...``: Parquet shards (``.parquet``) are
concatenated in shard order, JSON summaries (``.json``) merged (counts add
up); both only when the shards are one complete set from one run. What is
checked and why the result equals the unsharded artifact: :mod:`synthdeid.shards`.
"""

from __future__ import annotations

import argparse
import logging

from synthdeid.cli_types import input_file, output_file
from synthdeid.errors import ConfigError
from synthdeid.shards import gather_json, gather_parquet

log = logging.getLogger(__name__)


def register_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "output", type=output_file, help="the artifact to write (.parquet or .json)"
    )
    parser.add_argument(
        "shards", nargs="+", type=input_file, help="its shards, one per K of N, any order"
    )


def run(args: argparse.Namespace) -> None:
    suffix = args.output.suffix
    if any(shard.suffix != suffix for shard in args.shards):
        raise ConfigError(f"gather-shards: every shard must be a {suffix} file like {args.output}")
    if suffix == ".parquet":
        rows = gather_parquet(args.shards, args.output)
        log.info("gathered %d shards, %d rows -> %s", len(args.shards), rows, args.output)
    elif suffix == ".json":
        gather_json(args.shards, args.output)
        log.info("merged %d shard summaries -> %s", len(args.shards), args.output)
    else:
        raise ConfigError(f"gather-shards: {args.output} is neither .parquet nor .json")
