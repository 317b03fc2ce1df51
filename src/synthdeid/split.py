"""The patient-level split of notes into seed / train / holdout, deterministic.

Patients are ordered by a SHA-256 of ``<seed>:<patient_id>`` and cut into
consecutive groups whose sizes are the configured fractions of the patient
count (largest-remainder rounding), so the split depends only on the patient
ids and the seed, not on the order of the notes, and no patient is ever in
two parts.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Mapping

from synthdeid.errors import ConfigError
from synthdeid.notes import Note

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


def assign_parts(notes: list[Note], fractions: Mapping[str, float], seed: int) -> list[Note]:
    """Return the notes with their ``split`` set, patient by patient."""
    ordered = patient_order({note.patient_id for note in notes}, seed)
    sizes = part_sizes(len(ordered), fractions)
    part_of: dict[str, str] = {}
    position = 0
    for part in PARTS:
        for patient in ordered[position : position + sizes[part]]:
            part_of[patient] = part
        position += sizes[part]
    return [note.with_split(part_of[note.patient_id]) for note in notes]
