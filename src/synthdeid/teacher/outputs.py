"""What a teacher writes, and how an ensemble reads it back.

One folder per teacher and subset of notes:

``labels.parquet``
    every labelled note (canonical notes table, ``source = silver:<teacher>``,
    the teacher's spans; a note the teacher failed on has none): what the
    evaluation scores as the teacher's predictions.
``silver.parquet``
    the silver pool: the notes of ``labels.parquet`` whose status is ``ok``.
    A failed note is left out, since it would teach a student that its PHI is
    ordinary text.
``span_scores.parquet``
    one row per silver span with the teacher's confidence (null when the
    teacher gives none): what an ensemble votes with.
``metadata.parquet``
    one row per note: status, detail, span count, mean and minimum confidence,
    the counters of :data:`~synthdeid.teacher.silver.COUNT_FIELDS`, characters,
    input and output tokens.
``ledger.json`` / ``summary.json``
    the token and cost ledger (LLM teachers), and totals with provenance.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from synthdeid.artifacts import (
    read_parquet_with_provenance,
    require_columns,
    write_json_atomic,
    write_parquet_atomic,
)
from synthdeid.errors import InputError
from synthdeid.notes import Note, notes_to_table, read_notes
from synthdeid.shards import (
    MergeRule,
    Shard,
    merge_summaries,
    shard_metadata,
    shard_output,
    with_shard,
)
from synthdeid.teacher.ledger import merge_ledgers
from synthdeid.teacher.silver import COUNT_FIELDS, OK, NoteLabels, ScoredSpan

LABELS = "labels.parquet"
SILVER = "silver.parquet"
SPAN_SCORES = "span_scores.parquet"
METADATA = "metadata.parquet"
LEDGER = "ledger.json"
SUMMARY = "summary.json"
FOLDER_FILES = (LABELS, SILVER, SPAN_SCORES, METADATA, LEDGER, SUMMARY)  # every file above

SPAN_SCORES_SCHEMA = pa.schema(
    [
        pa.field("note_id", pa.string(), nullable=False),
        pa.field("start", pa.int32(), nullable=False),
        pa.field("end", pa.int32(), nullable=False),
        pa.field("label", pa.string(), nullable=False),
        pa.field("confidence", pa.float64(), nullable=True),
    ]
)
METADATA_SCHEMA = pa.schema(
    [
        pa.field("note_id", pa.string(), nullable=False),
        pa.field("teacher", pa.string(), nullable=False),
        pa.field("status", pa.string(), nullable=False),
        pa.field("detail", pa.string(), nullable=False),
        pa.field("n_spans", pa.int32(), nullable=False),
        pa.field("mean_confidence", pa.float64(), nullable=True),
        pa.field("min_confidence", pa.float64(), nullable=True),
        *(pa.field(name, pa.int32(), nullable=False) for name in COUNT_FIELDS),
        pa.field("characters", pa.int64(), nullable=False),
        pa.field("input_tokens", pa.int64(), nullable=True),
        pa.field("output_tokens", pa.int64(), nullable=True),
    ]
)


def silver_source(teacher: str) -> str:
    return f"silver:{teacher}"


def labelled_notes(notes: Sequence[Note], labels: Sequence[NoteLabels], teacher: str) -> list[Note]:
    """The notes with the teacher's spans (none for a failed note) and the silver source."""
    out = []
    for note, labelled in zip(notes, labels, strict=True):
        if note.note_id != labelled.note_id:
            raise ValueError(f"labels out of order: {labelled.note_id!r} for {note.note_id!r}")
        spans = [s.span() for s in labelled.spans] if labelled.ok else []
        out.append(
            Note(
                note_id=note.note_id,
                patient_id=note.patient_id,
                text=note.text,
                spans=tuple(spans),
                source=silver_source(teacher),
                split=note.split,
            )
        )
    return out


def metadata_table(notes: Sequence[Note], labels: Sequence[NoteLabels], teacher: str) -> pa.Table:
    rows: dict[str, list[Any]] = {name: [] for name in METADATA_SCHEMA.names}
    for note, labelled in zip(notes, labels, strict=True):
        scores = [s.confidence for s in labelled.spans if s.confidence is not None]
        rows["note_id"].append(labelled.note_id)
        rows["teacher"].append(teacher)
        rows["status"].append(labelled.status)
        rows["detail"].append(labelled.detail)
        rows["n_spans"].append(len(labelled.spans) if labelled.ok else 0)
        rows["mean_confidence"].append(sum(scores) / len(scores) if scores else None)
        rows["min_confidence"].append(min(scores) if scores else None)
        for name in COUNT_FIELDS:
            rows[name].append(labelled.counts.get(name, 0))
        rows["characters"].append(len(note.text))
        rows["input_tokens"].append(labelled.input_tokens)
        rows["output_tokens"].append(labelled.output_tokens)
    return pa.Table.from_pydict(rows, schema=METADATA_SCHEMA)


def span_scores_table(labels: Sequence[NoteLabels]) -> pa.Table:
    rows: dict[str, list[Any]] = {name: [] for name in SPAN_SCORES_SCHEMA.names}
    for labelled in labels:
        if not labelled.ok:
            continue
        for span in labelled.spans:
            rows["note_id"].append(labelled.note_id)
            rows["start"].append(span.start)
            rows["end"].append(span.end)
            rows["label"].append(span.label)
            rows["confidence"].append(span.confidence)
    return pa.Table.from_pydict(rows, schema=SPAN_SCORES_SCHEMA)


def hallucination_rate(counts: Mapping[str, int]) -> float | None:
    """Answer strings not found in their note, per entity answered (None: no entity)."""
    entities = counts.get("entities", 0)
    return round(counts.get("absent", 0) / entities, 4) if entities else None


def summarize(labels: Sequence[NoteLabels]) -> dict[str, Any]:
    """Totals: notes by status, spans by label, every counter, rates that matter."""
    totals = Counter({name: 0 for name in COUNT_FIELDS})
    for labelled in labels:
        totals.update(labelled.counts)
    ok = [lab for lab in labels if lab.ok]
    spans = Counter(s.label for lab in ok for s in lab.spans)
    return {
        "notes": len(labels),
        "silver_notes": len(ok),
        "notes_by_status": dict(sorted(Counter(lab.status for lab in labels).items())),
        "silver_notes_with_spans": sum(1 for lab in ok if lab.spans),
        "spans": sum(spans.values()),
        "spans_by_label": dict(sorted(spans.items())),
        "counts": dict(totals),
        "hallucination_rate": hallucination_rate(totals),
    }


def write_teacher_outputs(
    out_dir: str | Path,
    teacher: str,
    notes: Sequence[Note],
    labels: Sequence[NoteLabels],
    provenance: dict[str, Any],
    ledger: dict[str, Any],
    *,
    shard: Shard | None = None,
    input_rows: int = 0,
) -> dict[str, Any]:
    """Write every output of one teacher run (each file atomically); returns the summary.

    With ``shard`` (of ``input_rows`` notes to label), each file is that shard's
    artifact, beside the file one job writes (:mod:`synthdeid.shards`).
    """
    out = Path(out_dir)
    metadata = shard_metadata(shard, input_rows)

    def place(name: str) -> Path:
        return shard_output(out / name, shard)

    def write(table: pa.Table, name: str) -> None:
        write_parquet_atomic(table, place(name), provenance, metadata=metadata)

    labelled = labelled_notes(notes, labels, teacher)
    ok_ids = {lab.note_id for lab in labels if lab.ok}
    write(notes_to_table(labelled), LABELS)
    write(notes_to_table(n for n in labelled if n.note_id in ok_ids), SILVER)
    write(span_scores_table(labels), SPAN_SCORES)
    write(metadata_table(notes, labels, teacher), METADATA)
    body = {"ledger": ledger, "provenance": provenance}
    write_json_atomic(with_shard(body, shard, input_rows), place(LEDGER))
    summary = {"teacher": teacher, **summarize(labels)}
    body = {"summary": summary, "provenance": provenance}
    write_json_atomic(with_shard(body, shard, input_rows), place(SUMMARY))
    return summary


def _merged_hallucination_rate(values: Sequence[Any], merged: Mapping[str, Any]) -> float | None:
    return hallucination_rate(merged["counts"])


def _merged_ledger(values: Sequence[Any], merged: Mapping[str, Any]) -> Any:
    """An LLM teacher's ledger from the shards' summed totals; the ledger of a teacher
    without tokens (a note) is the same in every shard."""
    if all(isinstance(v, dict) and "measured" in v for v in values):
        return merge_ledgers(values)
    return merge_summaries(values, "ledger")


# how gather-shards merges a teacher folder's JSON (synthdeid.shards.merge_summaries)
SHARD_MERGE_RULES: Mapping[str, MergeRule] = {
    "hallucination_rate": _merged_hallucination_rate,
    "ledger": _merged_ledger,
}


def read_teacher_outputs(out_dir: str | Path) -> tuple[list[Note], dict[str, NoteLabels]]:
    """A teacher folder's notes (``labels.parquet``) and note id -> its labels with scores."""
    out = Path(out_dir)
    notes = read_notes(out / LABELS)
    metadata, _ = read_parquet_with_provenance(out / METADATA)
    require_columns(
        out / METADATA, metadata.column_names, METADATA_SCHEMA.names, "a teacher metadata table"
    )
    labels: dict[str, NoteLabels] = {}
    for row in metadata.to_pylist():
        labels[row["note_id"]] = NoteLabels(
            row["note_id"],
            [],
            row["status"],
            row["detail"],
            {name: row[name] for name in COUNT_FIELDS if row[name]},
            row["input_tokens"],
            row["output_tokens"],
        )
    scores, _ = read_parquet_with_provenance(out / SPAN_SCORES)
    for row in scores.to_pylist():
        labelled = labels.get(row["note_id"])
        if labelled is None:
            raise InputError(
                out / SPAN_SCORES, f"note {row['note_id']!r}", "span of a note without metadata"
            )
        labelled.spans.append(ScoredSpan(row["start"], row["end"], row["label"], row["confidence"]))
    unlabelled = [n.note_id for n in notes if n.note_id not in labels]
    if unlabelled:
        raise InputError(
            out / METADATA, None, f"{len(unlabelled)} notes without metadata: {unlabelled[:5]}"
        )
    for labelled in labels.values():
        labelled.spans.sort(key=lambda s: (s.start, s.end, s.label))
        if labelled.status != OK and labelled.spans:
            raise InputError(
                out / SPAN_SCORES, f"note {labelled.note_id!r}", "spans on a failed note"
            )
    return notes, labels
