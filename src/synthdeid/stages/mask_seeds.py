"""Mask seed notes: PHI spans become typed, numbered placeholders ([[DOCTOR_1]]).

How spans and their unmarked mentions are masked: :mod:`synthdeid.mask`. The
removed values go to a separate, local-only artifact; only masked text may
ever leave the machine.
"""

from __future__ import annotations

import argparse
import logging
from collections import Counter

from tqdm import tqdm

from synthdeid.artifacts import make_provenance, write_json_atomic, write_parquet_atomic
from synthdeid.cli_types import input_file, json_object, output_file
from synthdeid.errors import InputError
from synthdeid.local_only import require_local_path
from synthdeid.mask import (
    LABEL_VIEWS,
    RemovedValue,
    bind_removed_values,
    mask_note,
    removed_table,
    resolve_view,
)
from synthdeid.mentions import surfaces_left
from synthdeid.notes import Note, read_notes, write_notes

log = logging.getLogger(__name__)


def register_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--notes", required=True, type=input_file, help="split notes.parquet")
    parser.add_argument(
        "--parts", nargs="+", default=["seed"], help="split parts to mask (default: seed)"
    )
    parser.add_argument("--label-view", default="canonical", choices=LABEL_VIEWS)
    parser.add_argument("--coarse-view", type=json_object, default=None)
    parser.add_argument(
        "--propagate",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also mask unmarked whole-word mentions of a note's gold surfaces",
    )
    parser.add_argument("--out", required=True, type=output_file, help="masked notes parquet")
    parser.add_argument(
        "--removed",
        required=True,
        type=output_file,
        help="removed values parquet (local only: in a local/ folder)",
    )
    parser.add_argument("--summary", required=True, type=output_file)


def run(args: argparse.Namespace) -> None:
    require_local_path(args.removed, "--removed", "the original PHI surfaces")
    view = resolve_view(args.label_view, args.coarse_view)
    notes = [n for n in read_notes(args.notes, nonempty=True) if n.split in set(args.parts)]
    if not notes:
        raise InputError(args.notes, None, f"no notes in parts {args.parts}")
    masked_notes: list[Note] = []
    removed: list[RemovedValue] = []
    notes_with_leaks: dict[str, list[str]] = {}
    for note in tqdm(notes, desc="mask", unit="note", mininterval=2):
        result = mask_note(note, view, args.propagate)
        masked_notes.append(result.note)
        removed.extend(result.removed)
        left = surfaces_left(result.note, {s.surface(note.text) for s in note.spans})
        if left:
            notes_with_leaks[note.note_id] = left
    if notes_with_leaks and args.propagate:
        # cannot happen by construction; refuse to write rather than leak
        raise RuntimeError(f"gold surfaces survived masking in notes {sorted(notes_with_leaks)}")
    placeholders = Counter(s.label for n in masked_notes for s in n.spans)
    summary = {
        "notes": len(masked_notes),
        "notes_with_placeholders": sum(1 for n in masked_notes if n.spans),
        "mentions_masked": len(removed),
        "mentions_propagated": sum(r.propagated for r in removed),
        "distinct_placeholders": len({(r.note_id, r.placeholder) for r in removed}),
        "mentions_by_label": dict(sorted(placeholders.items())),
        "notes_with_gold_surfaces_left": len(notes_with_leaks),
    }
    params = {
        "parts": sorted(args.parts),
        "label_view": args.label_view,
        "coarse_view": view,
        "propagate": args.propagate,
    }
    provenance = make_provenance("mask", params, {"notes": args.notes})
    write_notes(masked_notes, args.out, provenance)
    write_parquet_atomic(
        removed_table(removed), args.removed, bind_removed_values(provenance, args.out)
    )
    write_json_atomic({"summary": summary, "provenance": provenance}, args.summary)
    if notes_with_leaks:
        log.warning(
            "propagation is off: %d notes keep unmarked mentions of their gold surfaces",
            len(notes_with_leaks),
        )
    log.info("masked %d notes, %d mentions -> %s", len(masked_notes), len(removed), args.out)
