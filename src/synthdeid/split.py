"""The patient-level split of notes into seed / train / holdout, deterministic.

Patients are ordered by a SHA-256 of ``<seed>:<patient_id>`` and cut into
consecutive groups whose sizes are the configured fractions of the patient
count (largest-remainder rounding), so the split depends only on the patient
ids and the seed, not on the order of the notes, and no patient is ever in
two parts.

:func:`split_notes_file` streams a notes table of any size: a first pass reads
the ``patient_id`` column alone and assigns every patient a part
(:func:`patient_parts`); a second pass reads the notes a row group at a time,
sets their part and writes them. Memory: O(patients) for the assignment
(each patient id and a dict slot, about 100 bytes a patient, and about 300 a
patient for a moment while the patients are ordered by their SHA-256 keys),
the note ids checked for uniqueness (about 16 bytes a note, see
:class:`~synthdeid.notes.NoteIds`) and one row group of notes
(:data:`~synthdeid.artifacts.ROW_GROUP_ROWS`) read and one written.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from synthdeid.artifacts import parquet_writer
from synthdeid.errors import ConfigError
from synthdeid.notes import NOTES_SCHEMA, Note, iter_notes, notes_to_table, read_patient_ids

log = logging.getLogger(__name__)

PARTS: tuple[str, ...] = ("seed", "train", "holdout")


# how far the fractions' sum may be from 1 (binary floating point cannot hold 0.1 exactly)
FRACTION_SUM_TOLERANCE = 1e-9


def check_fractions(fractions: Mapping[str, float]) -> None:
    """Known parts, non-negative, summing to 1 within FRACTION_SUM_TOLERANCE.

    Used by the stage and by the workflow's config checks, so a bad config is
    refused before any job runs.
    """
    unknown = set(fractions) - set(PARTS)
    if unknown:
        raise ConfigError(f"split.fractions has unknown parts {sorted(unknown)}; parts: {PARTS}")
    total = math.fsum(fractions.values())
    if any(f < 0 for f in fractions.values()) or abs(total - 1.0) > FRACTION_SUM_TOLERANCE:
        raise ConfigError(
            f"split.fractions must be non-negative and sum to 1, got {dict(fractions)} "
            f"(sum {total!r})"
        )


def part_sizes(n_patients: int, fractions: Mapping[str, float]) -> dict[str, int]:
    """Patients per part: the fractions of ``n_patients``, largest remainder rounding.

    A part with a positive fraction gets at least one patient; too few
    patients for that is a configuration error.
    """
    check_fractions(fractions)
    wanted = {part: fractions.get(part, 0.0) * n_patients for part in PARTS}
    sizes = {part: math.floor(value) for part, value in wanted.items()}
    by_remainder = sorted(
        PARTS, key=lambda p: (wanted[p] - sizes[p], -PARTS.index(p)), reverse=True
    )
    for part in by_remainder[: n_patients - sum(sizes.values())]:
        sizes[part] += 1
    for part in PARTS:
        if fractions.get(part, 0.0) > 0 and sizes[part] == 0:
            raise ConfigError(
                f"split: {n_patients} patients are too few to give part {part!r} "
                f"(fraction {fractions[part]}) a patient; raise the fraction or use a larger corpus"
            )
    return sizes


def patient_order(patient_ids: set[str], seed: int) -> list[str]:
    def key(patient_id: str) -> str:
        return hashlib.sha256(f"{seed}:{patient_id}".encode()).hexdigest()

    return sorted(patient_ids, key=lambda p: (key(p), p))


def patient_parts(
    patient_ids: Iterable[str], fractions: Mapping[str, float], seed: int
) -> dict[str, str]:
    """Each patient's part; ``patient_ids`` may come in any order and repeat."""
    ordered = patient_order(set(patient_ids), seed)
    sizes = part_sizes(len(ordered), fractions)
    part_of: dict[str, str] = {}
    position = 0
    for part in PARTS:
        for patient in ordered[position : position + sizes[part]]:
            part_of[patient] = part
        position += sizes[part]
    return part_of


class PartCounts:
    """The split's summary counts, gathered batch by batch from the split notes."""

    def __init__(self, part_of: Mapping[str, str]) -> None:
        self.patients = Counter(part_of.values())
        self.notes: Counter[str] = Counter()
        self.notes_with_phi: Counter[str] = Counter()
        self.spans: Counter[str] = Counter()

    def add(self, notes: Iterable[Note]) -> None:
        for note in notes:
            self.notes[note.split] += 1
            if note.spans:
                self.notes_with_phi[note.split] += 1
            self.spans[note.split] += len(note.spans)

    def summary(self) -> dict[str, Any]:
        """Patients and spans per part; notes and notes with PHI per part that has some."""
        return {
            "patients": {part: self.patients[part] for part in PARTS},
            "notes": dict(self.notes),
            "notes_with_phi": dict(self.notes_with_phi),
            "spans": {part: self.spans[part] for part in PARTS},
        }


def split_notes_file(
    in_path: Path,
    out_path: Path,
    fractions: Mapping[str, float],
    seed: int,
    provenance: Mapping[str, Any],
) -> dict[str, Any]:
    """Write the notes of ``in_path`` with their part set to ``out_path``; return the counts.

    Two passes over ``in_path`` (see the module's docstring); the output
    appears only when complete.
    """
    part_of = patient_parts(read_patient_ids(in_path, nonempty=True), fractions, seed)
    counts = PartCounts(part_of)
    with parquet_writer(out_path, NOTES_SCHEMA, provenance) as writer:
        for batch in iter_notes(in_path):
            notes = [note.with_split(part_of[note.patient_id]) for note in batch]
            counts.add(notes)
            writer.write(notes_to_table(notes))
    return counts.summary()
