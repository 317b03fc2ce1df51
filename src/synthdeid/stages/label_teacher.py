"""Label notes with a teacher, as if they had no gold: silver spans, metadata and a ledger.

``synthdeid label-teacher --notes SPLIT.parquet --parts seed --teacher NAME
--settings JSON --out-dir DIR`` reads the notes of the given split parts,
drops their spans (the teacher never sees gold), runs the teacher
(:mod:`synthdeid.teacher.teachers`) and writes the folder described in
:mod:`synthdeid.teacher.outputs`. ``--model`` names the model directory of a
``model`` teacher. An ``llm`` teacher's endpoint must be on its
``trusted_hosts`` (checked before anything is sent); its answers are cached
under ``--cache-dir`` (local disk: they hold the note's PHI, like the notes).

``--shard K/N`` labels only the K-th of N row ranges of the *selected* notes
(those of ``--parts``, in table order), so the shards share the work evenly
however the parts lie in the table, and writes each file of the folder as a
shard artifact (``labels.shard-K-of-N.parquet`` ...) for ``gather-shards``
to join into the folder one job writes (:mod:`synthdeid.shards`). Shard jobs
may share ``--cache-dir``: each answer is its own file, written atomically.
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from synthdeid.artifacts import make_provenance
from synthdeid.cli_types import input_dir, input_file, output_dir
from synthdeid.errors import ConfigError, InputError
from synthdeid.notes import Note, read_notes
from synthdeid.runtime import add_runtime_arguments, set_threads
from synthdeid.shards import shard_argument, shard_table_rows
from synthdeid.teacher.ledger import NoteUsage, Pricing, Projection, build_ledger
from synthdeid.teacher.outputs import write_teacher_outputs
from synthdeid.teacher.silver import NoteLabels
from synthdeid.teacher.teachers import build_teacher

log = logging.getLogger(__name__)


def _unlabelled(notes: Sequence[Note], parts: Sequence[str], path: Path) -> list[Note]:
    """The notes of ``parts`` (all notes when empty) with their spans removed."""
    selected = [n for n in notes if not parts or n.split in set(parts)]
    if not selected:
        present = sorted({n.split for n in notes})
        raise InputError(
            path, None, f"no notes in parts {list(parts)}", f"parts present: {present}"
        )
    return [n.with_text(n.text, []) for n in selected]


def _llm_ledger(
    notes: Sequence[Note], labels: Sequence[NoteLabels], settings: Mapping[str, Any]
) -> dict[str, Any]:
    """Tokens per note and the projected cost (SHIELD, appendix E) of an LLM teacher."""
    pricing = settings.get("pricing")
    projection = settings.get("projection") or {}
    usages = [
        NoteUsage(n.note_id, len(n.text), lab.input_tokens, lab.output_tokens)
        for n, lab in zip(notes, labels, strict=True)
    ]
    return build_ledger(
        usages,
        Pricing(**pricing) if pricing else None,
        Projection(**projection),
        float(settings.get("chars_per_token", 4.0)),
    )


def register_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--notes", required=True, type=input_file, help="notes table to label")
    parser.add_argument(
        "--parts", nargs="*", default=[], help="split parts to label (default: every note)"
    )
    parser.add_argument("--teacher", required=True, help="the teacher's name (silver:<name>)")
    parser.add_argument("--settings", required=True, help="the teacher's settings as JSON")
    parser.add_argument(
        "--model", type=input_dir, default=None, help="model teacher: model directory"
    )
    parser.add_argument("--cache-dir", type=input_dir, default=None, help="LLM answer cache")
    add_runtime_arguments(parser, progress=False)
    parser.add_argument("--out-dir", required=True, type=output_dir)
    parser.add_argument(
        "--shard",
        type=shard_argument,
        default=None,
        help="K/N: label only the K-th of N row ranges of the selected notes, "
        "for gather-shards to join",
    )


def run(args: argparse.Namespace) -> None:
    try:
        settings = json.loads(args.settings)
    except json.JSONDecodeError as error:
        raise ConfigError(f"--settings is not JSON: {error}") from None
    set_threads(args.threads)
    # the endpoint check and every other setting are verified before the notes are read
    teacher = build_teacher(
        args.teacher, settings, model_dir=args.model, cache_dir=args.cache_dir, device=args.device
    )
    try:
        selected = _unlabelled(read_notes(args.notes), args.parts, args.notes)
        rows = shard_table_rows(args.shard, len(selected))
        notes = selected[rows.start : rows.stop]
        log.info("teacher %s (%s): labelling %d notes", args.teacher, teacher.kind, len(notes))
        labels = teacher.label(notes) if notes else []  # a shard may hold none
    finally:
        teacher.close()
    ledger = (
        _llm_ledger(notes, labels, settings)
        if teacher.kind == "llm"
        else {"llm": False, "note": f"a {teacher.kind} teacher uses no language-model tokens"}
    )
    provenance = make_provenance(
        "label-teacher",
        {"teacher": args.teacher, "parts": args.parts, "settings": teacher.describe()},
        {"notes": args.notes, **({"model": args.model} if args.model else {})},
    )
    summary = write_teacher_outputs(
        args.out_dir,
        args.teacher,
        notes,
        labels,
        provenance,
        ledger,
        shard=args.shard,
        input_rows=len(selected),
    )
    counts = summary["counts"]
    log.info(
        "teacher %s: %d of %d notes silver, %d spans %s; dropped: %d absent (hallucinated), "
        "%d inside words, %d unknown type, %d malformed, %d below threshold, %d overlapping; "
        "notes by status %s -> %s",
        args.teacher,
        summary["silver_notes"],
        summary["notes"],
        summary["spans"],
        summary["spans_by_label"],
        counts["absent"],
        counts["inside_word"],
        counts["unknown_type"],
        counts["malformed"],
        counts["below_threshold"],
        counts["overlap_dropped"],
        summary["notes_by_status"],
        args.out_dir,
    )
