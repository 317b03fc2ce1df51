"""Replace the labelled PHI of a notes table by keyed, consistent surrogates.

``synthdeid replace-surrogates IN OUT`` writes the surrogate notes under keyed
one-way note and patient ids (:mod:`synthdeid.surrogate.release_ids`), a summary
and two local-only side outputs (:mod:`synthdeid.local_only`): the offsets
table (which also maps the released ids back) and the leftovers JSON. Every output records the run's provenance. With
``--shard K/N`` each output is a shard artifact; the side outputs' default
paths are the shard paths of the unsharded output's side outputs
(:func:`synthdeid.shards.side_output`), where ``gather-shards`` looks for them.
"""

from __future__ import annotations

import argparse
import logging

from synthdeid.artifacts import make_provenance, remove_stale_temporaries, write_json_atomic
from synthdeid.cli_types import (
    input_file,
    json_object,
    optional_input_file,
    output_file,
    positive_int,
)
from synthdeid.local_only import require_local_path
from synthdeid.notes import note_sources
from synthdeid.shards import shard_argument, side_output, with_shard
from synthdeid.surrogate.keying import load_key, refuse_demo_key
from synthdeid.surrogate.operators.base import CONSISTENCY_SCOPES
from synthdeid.surrogate.replace import SurrogateReplacer
from synthdeid.surrogate.replace_table import MAX_EXAMPLES, replace_file

log = logging.getLogger(__name__)


def register_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("input", type=input_file, help="notes table (Parquet) with labelled spans")
    parser.add_argument("output", type=output_file, help="surrogate notes table to write")
    parser.add_argument(
        "--labels",
        nargs="+",
        default=None,
        help="labels to replace (default: all canonical labels)",
    )
    parser.add_argument(
        "--policies",
        type=json_object,
        default=None,
        help='JSON: label -> {"operator": name, "options": {...}} (defaults: SHIELD)',
    )
    parser.add_argument("--consistency", choices=CONSISTENCY_SCOPES, default="patient")
    parser.add_argument(
        "--key-file",
        type=optional_input_file,
        default=None,
        help="file holding the secret (default: $SYNTHDEID_SECRET)",
    )
    parser.add_argument(
        "--summary",
        type=output_file,
        default=None,
        help="summary JSON (default: <OUT stem>.summary.json beside OUT; with --shard, "
        "at the shard path of the unsharded OUT's, where gather-shards looks)",
    )
    parser.add_argument(
        "--leftovers",
        type=output_file,
        default=None,
        help="local-only JSON, in a local/ folder, of original surfaces still in the output "
        "(default: local/<OUT stem>.leftovers.json beside OUT; with --shard, as --summary)",
    )
    parser.add_argument(
        "--offsets",
        type=output_file,
        default=None,
        help="local-only Parquet, in a local/ folder, of each span's original and surrogate "
        "offsets (default: local/<OUT stem>.offsets.parquet beside OUT; with --shard, as --summary)",
    )
    parser.add_argument("--batch-rows", type=positive_int, default=2048, help="notes per batch")
    parser.add_argument(
        "--shard",
        type=shard_argument,
        default=None,
        help="K/N: replace only the K-th of N row ranges, for gather-shards to join "
        "(every note is still read for its originals)",
    )


def run(args: argparse.Namespace) -> None:
    key = load_key(args.key_file)  # first: a missing key stops before any work
    refuse_demo_key(key, note_sources(args.input), f"surrogate {args.input}")
    if args.leftovers is not None:
        require_local_path(args.leftovers, "--leftovers", "original surfaces")
    if args.offsets is not None:
        require_local_path(args.offsets, "--offsets", "the original values' offsets")
    replacer = SurrogateReplacer(key, args.policies, args.labels, args.consistency)
    summary_path = args.summary or side_output(args.output, ".summary.json", args.shard)
    leftovers_path = args.leftovers or side_output(
        args.output, ".leftovers.json", args.shard, local=True
    )
    offsets_path = args.offsets or side_output(
        args.output, ".offsets.parquet", args.shard, local=True
    )
    # outputs at default paths are not arguments, so the command did not clean them
    remove_stale_temporaries((summary_path, leftovers_path, offsets_path))
    params = {
        "labels": sorted(replacer.labels),
        "policies": {
            label: {"operator": op.name, "options": op.options, "consistency": op.consistency}
            for label, op in replacer.operators.items()
        },
        "key_fingerprint": key.fingerprint(),
    }
    provenance = make_provenance("surrogate", params, {"notes": args.input})
    stats = replace_file(
        args.input, args.output, offsets_path, replacer, provenance, args.batch_rows, args.shard
    )
    total = stats.input_rows
    summary = {
        "notes": stats.notes,
        "spans": stats.spans,
        "replaced_by_label": dict(sorted(replacer.replaced.items())),
        "kept_deliberately_by_label": dict(sorted(replacer.kept_deliberately.items())),
        "identity_replacements": 0,  # any would have stopped the run
        "surrogates_equal_to_an_original": dict(sorted(replacer.collisions.items())),
        "operator_counts": replacer.operator_counts(),
        "notes_with_original_surfaces_left": stats.notes_with_surfaces_left,
        "original_surfaces_left": stats.surfaces_left,
    }
    # the run's provenance, as every output of the run records it: gather-shards joins
    # leftovers only with the outputs of the same run
    leftovers = {
        "local_only": True,
        "examples": stats.examples,
        "max_examples": MAX_EXAMPLES,
        "provenance": provenance,
    }
    write_json_atomic(with_shard(leftovers, args.shard, total), leftovers_path)
    body = {"summary": summary, "provenance": provenance}
    write_json_atomic(with_shard(body, args.shard, total), summary_path)
    if stats.surfaces_left:
        log.warning(
            "%d original surfaces still occur elsewhere in %d output notes (usually mentions the "
            "annotation missed); examples in %s",
            stats.surfaces_left,
            stats.notes_with_surfaces_left,
            leftovers_path,
        )
    if replacer.collisions:
        log.warning(
            "%d surrogates equal another original of their patient (labels %s): no other "
            "draw was left; see surrogates_equal_to_an_original in %s",
            sum(replacer.collisions.values()),
            ", ".join(sorted(replacer.collisions)),
            summary_path,
        )
    log.info(
        "replaced %d spans in %d notes (key %s) -> %s",
        sum(replacer.replaced.values()),
        stats.notes,
        key.fingerprint(),
        args.output,
    )
