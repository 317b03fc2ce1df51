"""De-identify notes with a trained model: predicted spans, then redacted or surrogate text.

``synthdeid predict-ner --model DIR --notes IN.parquet --out PRED.parquet``
writes the notes with their *predicted* spans (text unchanged; what
``evaluate-ner`` scores). With ``--out-deidentified`` it also writes the
de-identified notes: every predicted span replaced by its label in brackets
(``[DOCTOR]``, mode ``redact``) or by a keyed surrogate (mode ``surrogate``,
the operators of :mod:`synthdeid.surrogate`). Spans in that table point at
the inserted text.

``--model`` is a trained model directory, an ensemble directory
(``synthdeid ensemble-ner``) or a lexicon-stacker directory
(``synthdeid stack-lexicons``). The ``O`` threshold and the regex detectors
come from the directory (set at training); both can be overridden. Loading,
the tagging options and the prediction are those of ``synthdeid deid``
(:mod:`synthdeid.ner.inference`), so both give the same spans.
``--safe-harbor-ages`` drops predicted spans that are ages of 89 or under
("79 yo"), which HIPAA Safe Harbor lets stay (:mod:`synthdeid.ner.ages`).
``--precision`` picks the number format: ``auto`` (the default: bf16 on a
GPU with bf16 or a CPU with native bf16, AVX512-BF16 or AMX; fp32
otherwise, :func:`synthdeid.runtime.resolve_precision`), ``fp32``, ``bf16``
(weights and products in bfloat16) or ``int8`` (dynamic quantization of the
Linear layers, CPU only; ``--quantize`` is the same). The summary records
the setting and the format it came to (``precision``, ``precision_resolved``).
``bench/deid_throughput.py`` measures each against fp32 on the same notes,
recall included.

The provenance records the model by the digest of every file the tagger loads
(:func:`synthdeid.ner.loading.model_digest`: weights, settings, an ensemble's
members), so the outputs of two models never share one. With ``--shard``, the
summary's default path is the shard path of the unsharded output's
``.summary.json`` (:func:`synthdeid.shards.side_output`).
"""

from __future__ import annotations

import argparse
import logging
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

from synthdeid.artifacts import make_provenance, open_parquet, parquet_writer, write_json_atomic
from synthdeid.cli_types import (
    input_dir,
    input_file,
    optional_input_file,
    output_file,
    positive_int,
)
from synthdeid.errors import ConfigError
from synthdeid.ner.inference import Tagging, add_tagging_arguments, redact, surrogate_batches
from synthdeid.notes import NOTES_SCHEMA, iter_notes, note_sources, notes_to_table
from synthdeid.runtime import add_runtime_arguments, set_threads
from synthdeid.shards import (
    merge_summaries,
    shard_argument,
    shard_metadata,
    shard_table_rows,
    side_output,
    with_shard,
)
from synthdeid.surrogate.keying import SurrogateKey, load_key, refuse_demo_key

log = logging.getLogger(__name__)

MODES = ("none", "redact", "surrogate")


def register_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        required=True,
        type=input_dir,
        help="trained model, ensemble or lexicon-stacker directory",
    )
    parser.add_argument(
        "--notes", required=True, type=input_file, help="notes table to de-identify"
    )
    parser.add_argument(
        "--parts",
        nargs="*",
        default=[],
        help="only notes of these split parts (default: every note)",
    )
    parser.add_argument("--out", required=True, type=output_file, help="notes with predicted spans")
    parser.add_argument("--out-deidentified", type=output_file, default=None)
    parser.add_argument("--mode", choices=MODES, default="redact")
    parser.add_argument("--summary", type=output_file, default=None)
    add_tagging_arguments(parser)
    add_runtime_arguments(parser, progress=False)
    parser.add_argument(
        "--key-file",
        type=optional_input_file,
        default=None,
        help="surrogate mode: the secret's file",
    )
    parser.add_argument("--consistency", default="patient", help="surrogate mode")
    parser.add_argument(
        "--chunk-notes",
        type=positive_int,
        default=2048,
        help="notes read, predicted and written at a time (memory is flat in the table size)",
    )
    parser.add_argument(
        "--shard",
        type=shard_argument,
        default=None,
        help="K/N: de-identify only the K-th of N row ranges (on whole --chunk-notes chunks, so "
        "the shards compute what one job does), for gather-shards to join",
    )


def run(args: argparse.Namespace) -> None:
    from synthdeid.ner.loading import model_digest

    set_threads(args.threads)
    if args.out_deidentified is not None and args.mode == "none":
        raise ConfigError("--out-deidentified needs --mode redact or surrogate")
    if args.shard is not None and args.out_deidentified is not None and args.mode == "surrogate":
        raise ConfigError(
            "--shard with --mode surrogate: a surrogate must differ from every predicted "
            "original of its patient in the whole table, which one shard does not see; "
            "shard with --mode redact, or de-identify in one job"
        )
    # a missing key stops the step before any work
    key = load_key(args.key_file or None) if args.mode == "surrogate" else None
    if key is not None:  # before the model loads: nothing is done with the demo key
        refuse_demo_key(key, note_sources(args.notes), f"deid --mode surrogate {args.notes}")
    total = open_parquet(args.notes).metadata.num_rows
    # shard bounds on whole chunks: each chunk is batched as one job batches it
    shard = None if args.shard is None else replace(args.shard, align=args.chunk_notes)
    rows = shard_table_rows(shard, total)
    tagging = Tagging.from_arguments(args)
    params = {
        **tagging.params(),
        "parts": args.parts,
        "mode": args.mode,
        # only the key's fingerprint, as replace_surrogates records it
        "key_fingerprint": None if key is None else key.fingerprint(),
    }
    provenance = make_provenance("deid", params, {"notes": args.notes, "model": args.model})
    # the model by its files (weights, settings), so shards of two models never gather
    provenance["inputs"]["model"]["digest"] = model_digest(args.model)
    metadata = shard_metadata(shard, total)
    chunk_stats = []
    parts = set(args.parts)
    with ExitStack() as outputs:
        writer = outputs.enter_context(
            parquet_writer(args.out, NOTES_SCHEMA, provenance, metadata=metadata)
        )
        # redaction needs only the note itself: written beside the predictions (a surrogate
        # needs every predicted original first, so it reads the predictions back below)
        redacted = (
            outputs.enter_context(
                parquet_writer(args.out_deidentified, NOTES_SCHEMA, provenance, metadata=metadata)
            )
            if args.out_deidentified is not None and args.mode == "redact"
            else None
        )
        for batch in iter_notes(args.notes, rows=rows, batch_rows=args.chunk_notes):
            notes = [note for note in batch if not parts or note.split in parts]
            if not notes:
                continue
            predicted, stats = tagging.predict(notes)
            writer.write(notes_to_table(predicted))
            if redacted is not None:
                redacted.write(notes_to_table(redact(note) for note in predicted))
            chunk_stats.append(stats)
            log.info("predicted %d of %d notes", sum(s["notes"] for s in chunk_stats), len(rows))
    stats = merge_summaries(chunk_stats) if chunk_stats else tagging.predict([])[1]
    if args.out_deidentified is not None and args.mode == "surrogate":
        if key is None:
            raise ConfigError("surrogate mode needs a key")
        _write_surrogates(args.out, args.out_deidentified, key, args.consistency, provenance)
    summary_path = args.summary or side_output(args.out, ".summary.json", args.shard)
    body = {"summary": stats, "provenance": provenance}
    write_json_atomic(with_shard(body, shard, total), summary_path)
    log.info(
        "de-identified %d notes: %d spans (%d from regex, %d young ages dropped)"
        " at %s notes/s -> %s",
        stats["notes"],
        stats["predicted_spans"],
        stats["regex_spans_added"],
        stats["young_ages_dropped"],
        stats["notes_per_second"],
        args.out,
    )


def _write_surrogates(
    predictions: Path,
    out: Path,
    key: SurrogateKey,
    consistency: str,
    provenance: dict[str, Any],
) -> None:
    """Stream the written predictions into their surrogate text (never sharded), reading
    them back as :func:`~synthdeid.ner.inference.surrogate_batches` asks."""
    with parquet_writer(out, NOTES_SCHEMA, provenance) as writer:
        for batch in surrogate_batches(lambda: iter_notes(predictions), key, consistency):
            writer.write(notes_to_table(batch))
