"""A notes table through the surrogate replacer, streamed: the releasable table and the offsets.

:func:`replace_file` reads the table row group by row group and writes the
surrogate notes under keyed one-way ids (``SURROGATE_SCHEMA``: the notes
table plus how many original surfaces each note still holds) and, local
only, each note's offset map and the map from its released ids back to its
original ones (``OFFSETS_SCHEMA``). With a shard, only the shard's rows are
written, but every note is read for its originals (:mod:`synthdeid.shards`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from tqdm import tqdm

from synthdeid.artifacts import open_parquet, parquet_writer, require_columns
from synthdeid.local_only import LOCAL_ONLY_METADATA
from synthdeid.notes import NOTES_SCHEMA, iter_notes, notes_to_table, require_notes
from synthdeid.shards import Shard, shard_metadata, shard_table_rows
from synthdeid.surrogate.keying import SurrogateKey
from synthdeid.surrogate.release_ids import NOTE, PATIENT, release_id, released
from synthdeid.surrogate.replace import ReplacedNote, SurrogateReplacer

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
