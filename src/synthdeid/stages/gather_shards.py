"""Join the shards of a sharded step into the artifact one job would have written.

``synthdeid gather-shards --count N OUT...``: for each artifact ``OUT``, its
shards beside it (``notes.parquet`` <- ``notes.shard-K-of-N.parquet``) are
joined: Parquet shards concatenated in shard order, JSON summaries merged
(counts add up, derived figures such as rates, a teacher's token ledger and
the templates' acceptance rates recomputed); both only when the shards are one
complete set from one run, and the artifacts of one call come from one run.
Every set is checked before anything is written, and either every ``OUT`` is
written or none is. ``--count`` is at most :data:`synthdeid.shards.MAX_SHARDS`.
What is checked and why the result equals the unsharded artifact:
:mod:`synthdeid.shards`.
"""

from __future__ import annotations

import argparse
import logging

from synthdeid.cli_types import output_file, positive_int
from synthdeid.errors import ConfigError, InputError, listed
from synthdeid.shards import (
    MAX_LISTED_SHARDS,
    MAX_SHARDS,
    MERGE_RULES,
    Gather,
    ShardCount,
    check_together,
    plan_json,
    plan_parquet,
    shard_paths,
    write_gathered,
)
from synthdeid.synthesis.templates import SHARD_MERGE_RULES as TEMPLATE_MERGE_RULES
from synthdeid.teacher.outputs import SHARD_MERGE_RULES as TEACHER_MERGE_RULES

log = logging.getLogger(__name__)

# how the sharded steps' JSON merges: counts add up, derived figures are recomputed
JSON_MERGE_RULES = {**MERGE_RULES, **TEACHER_MERGE_RULES, **TEMPLATE_MERGE_RULES}


def register_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "outputs",
        nargs="+",
        type=output_file,
        metavar="OUT",
        help="artifacts to write (.parquet or .json), each from its shards beside it; "
        "the outputs of one run of a step",
    )
    parser.add_argument(
        "--count",
        required=True,
        type=positive_int,
        action=ShardCount,
        help=f"N, the shard count (at most {MAX_SHARDS})",
    )


def run(args: argparse.Namespace) -> None:
    for output in args.outputs:
        if output.suffix not in (".parquet", ".json"):
            raise ConfigError(f"gather-shards: {output} is neither .parquet nor .json")
    # every set is checked before any output is written: all of them are written, or none
    gathers: list[Gather] = []
    for output in args.outputs:
        shards = shard_paths(output, args.count)
        missing = [str(path) for path in shards if not path.is_file()]
        if missing:
            names = listed(missing, MAX_LISTED_SHARDS)
            raise InputError(output, None, f"its shards {names} are missing")
        if output.suffix == ".parquet":
            gathers.append(plan_parquet(shards, output))
        else:
            gathers.append(plan_json(shards, output, JSON_MERGE_RULES))
    check_together(gathers)
    write_gathered(gathers)
    for gather in gathers:
        if gather.schema is None:
            log.info("merged %d shard summaries -> %s", args.count, gather.out)
        else:
            log.info("gathered %d shards, %d rows -> %s", args.count, gather.rows, gather.out)
