"""Import a labelled corpus into the canonical notes table (notes.parquet).

Reads the corpus with :func:`synthdeid.ingest.open_corpus` and writes the
notes as they come, batch by batch, with a summary a person checks after an
import. A JSONL corpus is read line by line: memory holds one batch of notes,
the note ids (about 16 bytes each, :class:`~synthdeid.notes.NoteIds`) and the
patient ids, whatever the corpus size.
"""

from __future__ import annotations

import argparse
import logging

from synthdeid.artifacts import make_provenance, parquet_writer, write_json_atomic
from synthdeid.cli_types import input_path, json_object, output_file
from synthdeid.ingest import IngestSettings, NoteCounts, open_corpus
from synthdeid.labels import LabelMap, coarse_view
from synthdeid.notes import NOTES_SCHEMA, note_batches, notes_to_table

log = logging.getLogger(__name__)


def register_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--corpus", required=True, type=input_path, help="corpus file or folder")
    parser.add_argument("--format", required=True, help="physionet | brat | jsonl | i2b2")
    parser.add_argument(
        "--label-map",
        required=True,
        type=json_object,
        help="JSON object: the corpus's categories -> canonical labels",
    )
    parser.add_argument(
        "--coarse-view",
        type=json_object,
        default=None,
        help="JSON object: canonical -> PER/ORG/LOC/TIME/MISC (default: VetSynth's view)",
    )
    parser.add_argument("--source", required=True, help="value of the notes' source column")
    parser.add_argument("--encoding", default="utf-8")
    parser.add_argument("--patient-id-regex", default=None)
    parser.add_argument("--overlaps", default="error", help="error | merge_same_label")
    parser.add_argument("--out", required=True, type=output_file, help="notes.parquet to write")
    parser.add_argument("--summary", required=True, type=output_file, help="summary JSON to write")


def run(args: argparse.Namespace) -> None:
    view = coarse_view(args.coarse_view)
    settings = IngestSettings(
        format=args.format,
        label_map=LabelMap(args.label_map),
        source=args.source,
        encoding=args.encoding,
        patient_id_regex=args.patient_id_regex,
        overlaps=args.overlaps,
    )
    corpus = open_corpus(args.corpus, settings)
    params = {
        "format": settings.format,
        "label_map": dict(settings.label_map.mapping),
        "source": settings.source,
        "encoding": settings.encoding,
        "patient_id_regex": settings.patient_id_regex,
        "overlaps": settings.overlaps,
    }
    provenance = make_provenance("ingest", params, {"corpus": args.corpus})
    provenance["inputs"]["corpus"]["digest"] = corpus.corpus_digest
    counts = NoteCounts(view)
    with parquet_writer(args.out, NOTES_SCHEMA, provenance) as writer:
        for batch in note_batches(corpus.notes):
            counts.add(batch)
            writer.write(notes_to_table(batch))
        corpus.finish(counts.notes)  # no notes: refused, and nothing is written
    merged = corpus.reader.merged_overlaps
    summary = counts.summary()
    summary["gold_spans_read"] = summary["spans"] + len(merged)
    summary["surfaces_verified"] = corpus.reader.surfaces_verified
    summary["overlaps_merged"] = merged
    write_json_atomic({"summary": summary, "provenance": provenance}, args.summary)
    log.info(
        "ingested %d notes, %d patients, %d spans (%d gold spans read, %d overlaps merged) -> %s",
        summary["notes"],
        summary["patients"],
        summary["spans"],
        summary["gold_spans_read"],
        len(merged),
        args.out,
    )
