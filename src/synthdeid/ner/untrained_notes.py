"""Notes no model of a run trained on: where an ensemble's or a stacker's threshold is fitted.

An operating point chosen on a note a member trained on (or on another note of
that patient) would flatter the threshold, so :func:`validation_notes` (an
ensemble's) and :func:`choose_development_notes` (a stacker's) drop every
note and every patient of the training tables, and refuse to go on with none
left.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from synthdeid.errors import InputError
from synthdeid.notes import Note


def choose_development_notes(
    notes: Sequence[Note],
    parts: Sequence[str],
    validation: Sequence[Note],
    training: Sequence[Note],
    *,
    stage: str = "stack-lexicons",
    validation_path: str = "--validation",
) -> tuple[list[Note], dict[str, Any]]:
    """The development notes less every note and patient the base trained on, and counts.

    Refuses the holdout part and any holdout note among the validation notes.
    """
    from synthdeid.ner.report_errors import development_notes  # loads the metrics

    offered = development_notes(
        notes, parts, validation, set(), stage=stage, validation_path=validation_path
    )
    trained_notes = {note.note_id for note in training}
    trained_patients = {note.patient_id for note in training}
    kept = [
        n
        for n in offered
        if n.note_id not in trained_notes and n.patient_id not in trained_patients
    ]
    counts = {
        "parts": list(parts),
        "offered": len(offered),
        "trained_on": len(offered) - len(kept),
        "kept": len(kept),
        "patients": len({n.patient_id for n in kept}),
    }
    if not kept:
        raise InputError(
            validation_path,
            None,
            f"no development note is left in parts {list(parts)} and the validation notes "
            "once the base run's training notes and patients are removed",
        )
    return kept, counts


def validation_notes(
    validation: Mapping[Path, Sequence[Note]], training: Mapping[Path, Sequence[Note]]
) -> tuple[list[Note], dict[str, int]]:
    """The validation notes of every member, once each, that no member trained on.

    A note or a patient present in any training table is dropped: a member has
    seen that note, or notes of that patient, so it would flatter the threshold.
    """
    seen_notes = {note.note_id for notes in training.values() for note in notes}
    seen_patients = {note.patient_id for notes in training.values() for note in notes}
    kept: dict[str, Note] = {}
    checked: dict[str, Note] = {}
    dropped = 0
    for path, notes in validation.items():
        for note in notes:
            previous = checked.get(note.note_id)
            if previous is not None:
                if previous.text != note.text or previous.spans != note.spans:
                    raise InputError(
                        path,
                        f"note {note.note_id!r}",
                        "differs from the note of that id in another validation table",
                    )
                continue
            checked[note.note_id] = note
            if note.note_id in seen_notes or note.patient_id in seen_patients:
                dropped += 1
                continue
            kept[note.note_id] = note
    counts = {"offered": len(checked), "trained_on": dropped, "kept": len(kept)}
    if not kept:
        raise InputError(
            ", ".join(str(p) for p in validation),
            None,
            "no validation note is left once the members' training notes and patients are "
            "removed; the operating point needs notes no member trained on",
        )
    return list(kept.values()), counts
