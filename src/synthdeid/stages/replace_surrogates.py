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
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from tqdm import tqdm

from synthdeid.artifacts import (
    make_provenance,
    open_parquet,
    parquet_writer,
    remove_stale_temporaries,
    require_columns,
    write_json_atomic,
)
from synthdeid.cli_types import input_file, optional_input_file, output_file, positive_int
from synthdeid.errors import ConfigError
from synthdeid.local_only import LOCAL_ONLY_METADATA, require_local_path
from synthdeid.notes import NOTES_SCHEMA, iter_notes, note_sources, notes_to_table, require_notes
from synthdeid.shards import (
    Shard,
    shard_argument,
    shard_metadata,
    shard_table_rows,
    side_output,
    with_shard,
)
from synthdeid.surrogate.keying import SurrogateKey, load_key, refuse_demo_key
from synthdeid.surrogate.operators.base import CONSISTENCY_SCOPES
from synthdeid.surrogate.release_ids import NOTE, PATIENT, release_id, released
from synthdeid.surrogate.replace import ReplacedNote, SurrogateReplacer

log = logging.getLogger(__name__)

OFFSET_TYPE = pa.struct(
    [
        pa.field("old_start", pa.int32(), nullable=False),
        pa.field("old_end", pa.int32(), nullable=False),
        pa.field("new_start", pa.int32(), nullable=False),
        pa.field("new_end", pa.int32(), nullable=False),
    ]
)

# the releasable output: the canonical notes table plus the leftover count. The
# original offsets would give the length of every original value, so they go to
# the local-only OFFSETS_SCHEMA table instead.
SURROGATE_SCHEMA = NOTES_SCHEMA.append(
    pa.field("original_surfaces_left", pa.int32(), nullable=False)
)

# local only: where each input span went (old -> new offsets), per note, and the map
# from the note's released ids back to its original ones (synthdeid.surrogate.release_ids)
OFFSETS_SCHEMA = pa.schema(
    [
        pa.field("note_id", pa.string(), nullable=False),
        pa.field("patient_id", pa.string(), nullable=False),
        pa.field("released_note_id", pa.string(), nullable=False),
        pa.field("released_patient_id", pa.string(), nullable=False),
        pa.field(
            "offset_map",
            pa.list_(pa.field("item", OFFSET_TYPE, nullable=False)),
            nullable=False,
        ),
    ],
    metadata=LOCAL_ONLY_METADATA,
)

OFFSET_LIST_TYPE = OFFSETS_SCHEMA.field("offset_map").type

MAX_EXAMPLES = 50


@dataclass
class RunStats:
    input_rows: int = 0  # rows of the input table (a shard replaces some of them)
    notes: int = 0
    spans: int = 0
    notes_with_surfaces_left: int = 0
    surfaces_left: int = 0
    examples: list[dict[str, str]] = field(default_factory=list)


def results_table(results: list[ReplacedNote], key: SurrogateKey) -> pa.Table:
    """The releasable rows: surrogate notes under keyed one-way ids, and how many original
    surfaces each still holds."""
    table = notes_to_table(released(r.note, key) for r in results)
    return table.append_column(
        SURROGATE_SCHEMA.field("original_surfaces_left"),
        pa.array([len(r.surfaces_left) for r in results], pa.int32()),
    )


def offsets_table(results: list[ReplacedNote], key: SurrogateKey) -> pa.Table:
    """The local-only rows: each note's offset map (original -> surrogate offsets) and its
    original and released ids."""
    offsets = [
        [
            {
                "old_start": e.old_start,
                "old_end": e.old_end,
                "new_start": e.new_start,
                "new_end": e.new_end,
            }
            for e in r.offset_map
        ]
        for r in results
    ]
    notes = [r.note for r in results]
    return pa.table(
        {
            "note_id": pa.array([n.note_id for n in notes], pa.string()),
            "patient_id": pa.array([n.patient_id for n in notes], pa.string()),
            "released_note_id": pa.array(
                [release_id(key, NOTE, n.note_id) for n in notes], pa.string()
            ),
            "released_patient_id": pa.array(
                [release_id(key, PATIENT, n.patient_id) for n in notes], pa.string()
            ),
            "offset_map": pa.array(offsets, OFFSET_LIST_TYPE),
        },
        schema=OFFSETS_SCHEMA,
    )


def replace_file(
    in_path: Path,
    out_path: Path,
    offsets_path: Path,
    replacer: SurrogateReplacer,
    provenance: dict[str, Any],
    batch_rows: int = 2048,
    shard: Shard | None = None,
) -> RunStats:
    """Stream ``in_path`` row group by row group into ``out_path`` (atomic).

    The offset maps go to the local-only ``offsets_path`` (atomic too; both
    files appear only when both are complete). A first pass hands the
    replacer the originals of every note (hashes of their normalised
    surfaces, :class:`~synthdeid.surrogate.operators.base.Originals`), so no
    surrogate equals another original of its patient wherever in the file that
    original is; a second one, only when some patient's first date shift
    would move a date onto an original, gives the date shift those patients'
    dates. With ``shard``, these passes still read every note and the last
    only the shard's rows: a shard's rows are those the whole run writes for
    them (:mod:`synthdeid.shards`).

    Memory: one batch, plus what is kept across the whole input. Measured
    with :mod:`tracemalloc` over the collection passes of a synthetic demo
    corpus of 10^6 notes (the 10^5-note ``make-demo`` corpus ten times over,
    patients renamed; 0.92 spans a note): 13.4 bytes a note kept after them
    (1.54 hashes a note and the crowded scopes' date shifts), 72 at the peak of
    the first pass (with one row group of notes, the note ids and the date
    shift's hashes), against 349 and 489 for the Python sets of surfaces this
    replaced. The whole step's peak RSS at 10^5 notes
    (``bench/scale_memory.py``): 201 MB, against 262.
    """
    source = open_parquet(in_path)
    require_columns(in_path, source.schema_arrow.names, NOTES_SCHEMA.names, "a notes table")
    total = source.metadata.num_rows
    require_notes(total, path=in_path)
    # the first pass also checks that note ids are unique over the whole table, not
    # only within a batch, before any output is opened
    replacer.collect_batches(lambda: iter_notes(in_path, batch_rows=batch_rows))
    rows = shard_table_rows(shard, total)
    metadata = shard_metadata(shard, total)
    stats = RunStats(input_rows=total)
    progress = tqdm(total=len(rows), desc="surrogate", unit="note", mininterval=2)
    with (
        parquet_writer(offsets_path, OFFSETS_SCHEMA, provenance, metadata=metadata) as offsets,
        parquet_writer(out_path, SURROGATE_SCHEMA, provenance, metadata=metadata) as writer,
    ):
        for notes in iter_notes(in_path, rows=rows, batch_rows=batch_rows):
            results = [replacer.replace_note(note) for note in notes]
            writer.write(results_table(results, replacer.key))
            offsets.write(offsets_table(results, replacer.key))
            for result in results:
                stats.notes += 1
                stats.spans += len(result.note.spans)
                if result.surfaces_left:
                    stats.notes_with_surfaces_left += 1
                    stats.surfaces_left += len(result.surfaces_left)
                    for surface in result.surfaces_left:
                        if len(stats.examples) < MAX_EXAMPLES:
                            stats.examples.append(
                                {"note_id": result.note.note_id, "surface": surface}
                            )
            progress.update(len(notes))
    progress.close()
    return stats


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
        type=json.loads,
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
    if args.policies is not None and not isinstance(args.policies, dict):
        raise ConfigError("--policies must be a JSON object")
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
