"""Combine teachers' labels into an ensemble teacher's (union or vote per label).

``synthdeid combine-teachers --member NAME=DIR ... --policy JSON --teacher
NAME --out-dir DIR`` reads each member's ``label-teacher`` folder (the same
notes, labelled by each member), combines them note by note with
:func:`synthdeid.teacher.ensemble.combine_notes`, and writes the same folder
layout as ``label-teacher`` (:mod:`synthdeid.teacher.outputs`), so an
ensemble is a teacher like any other downstream.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from synthdeid.artifacts import make_provenance
from synthdeid.cli_types import named_input_dir, output_dir
from synthdeid.errors import ConfigError, InputError
from synthdeid.notes import Note
from synthdeid.teacher.ensemble import EnsemblePolicy, combine_notes
from synthdeid.teacher.ledger import NoteUsage, Projection, build_ledger
from synthdeid.teacher.outputs import LABELS, METADATA, read_teacher_outputs, write_teacher_outputs
from synthdeid.teacher.silver import NoteLabels

log = logging.getLogger(__name__)


def _check_same_notes(reference: list[Note], notes: list[Note], path: Path) -> None:
    """Every member must have labelled the same notes with the same text."""
    texts = {n.note_id: n.text for n in reference}
    ids = [n.note_id for n in notes]
    if set(ids) != set(texts) or len(ids) != len(texts):
        only_here = sorted(set(ids) - set(texts))[:5]
        missing = sorted(set(texts) - set(ids))[:5]
        raise InputError(
            path,
            None,
            f"labels other notes than the first member: only here {only_here}, missing {missing}",
            "label every member on the same notes and parts",
        )
    for note in notes:
        if texts[note.note_id] != note.text:
            raise InputError(path, f"note {note.note_id!r}", "text differs from the first member")


def register_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--member",
        dest="members",
        action="append",
        required=True,
        type=named_input_dir,
        metavar="NAME=DIR",
        help="a member teacher's label-teacher folder (repeat for each member)",
    )
    parser.add_argument("--policy", default="{}", help="union/vote per label, as JSON")
    parser.add_argument("--teacher", required=True, help="the ensemble's name (silver:<name>)")
    parser.add_argument("--out-dir", required=True, type=output_dir)


def run(args: argparse.Namespace) -> None:
    try:
        policy = EnsemblePolicy.from_mapping(json.loads(args.policy))
    except json.JSONDecodeError as error:
        raise ConfigError(f"--policy is not JSON: {error}") from None
    names = [name for name, _ in args.members]
    if len(set(names)) != len(names):
        raise ConfigError(f"--member names must be unique, got {names}")
    members: dict[str, dict[str, NoteLabels]] = {}
    notes: list[Note] = []
    for name, folder in args.members:
        member_notes, labels = read_teacher_outputs(folder)
        if notes:
            _check_same_notes(notes, member_notes, folder / LABELS)
        else:
            notes = member_notes
        members[name] = labels
    combined, totals = combine_notes(members, policy)
    by_id = {labels.note_id: labels for labels in combined}
    ordered = [by_id[note.note_id] for note in notes]
    usages = [
        NoteUsage(n.note_id, len(n.text), lab.input_tokens, lab.output_tokens)
        for n, lab in zip(notes, ordered, strict=True)
    ]
    ledger = (
        build_ledger(usages, None, Projection())
        if any(u.input_tokens is not None for u in usages)
        else {"llm": False, "note": "no member used language-model tokens"}
    )
    provenance = make_provenance(
        "combine-teachers",
        {"teacher": args.teacher, "members": names, "policy": policy.as_dict()},
        {f"member:{name}": folder / METADATA for name, folder in args.members},
    )
    summary = write_teacher_outputs(args.out_dir, args.teacher, notes, ordered, provenance, ledger)
    log.info(
        "ensemble %s of %s: %d of %d notes silver, %d spans %s; %d clusters voted out, "
        "%d overlapping spans dropped, %d notes a member failed on -> %s",
        args.teacher,
        names,
        summary["silver_notes"],
        summary["notes"],
        summary["spans"],
        summary["spans_by_label"],
        totals["vote_dropped"],
        totals["overlap_dropped"],
        totals["member_failed"],
        args.out_dir,
    )
