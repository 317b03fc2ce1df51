"""Keyed one-way ids for the releasable surrogate corpus (SHIELD, sec. 2.2).

A corpus's note and patient ids are often record numbers of the source system,
which would link a released note back to its patient's record. In the
releasable table of ``replace_surrogates`` they are replaced by keyed hashes:
``note-`` or ``patient-`` and the first 16 hex digits of the HMAC-SHA256 of the
id under the surrogate key (the key the surrogates themselves are drawn with),
so one patient's notes still share one id and nothing can be recovered without
the key. 64 bits: two of 10^6 ids collide with a probability of about 3e-8.

The map back (original and released id of every note) is local only: it sits in
the step's offsets table in ``local/``, which ``build_mixture`` reads to keep its
checks on holdout and validation patients (:func:`read_id_map`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from synthdeid.artifacts import open_parquet, require_columns
from synthdeid.errors import InputError
from synthdeid.notes import Note
from synthdeid.surrogate.keying import SurrogateKey

NOTE = "note"
PATIENT = "patient"
ID_HEX = 16
# the columns of the local offsets table that map released ids back
MAP_COLUMNS = ("note_id", "patient_id", "released_note_id", "released_patient_id")


def release_id(key: SurrogateKey, kind: str, value: str) -> str:
    """The keyed one-way id of a note (``kind`` note) or a patient (``kind`` patient)."""
    return f"{kind}-{key.digest('release id', kind, value).hex()[:ID_HEX]}"


def released(note: Note, key: SurrogateKey) -> Note:
    """``note`` with its note and patient ids replaced by their keyed one-way ids."""
    return replace(
        note,
        note_id=release_id(key, NOTE, note.note_id),
        patient_id=release_id(key, PATIENT, note.patient_id),
    )


def read_id_map(path: str | Path) -> dict[str, tuple[str, str]]:
    """Released note id -> (original note id, original patient id), from the local map."""
    source = open_parquet(path)
    require_columns(path, source.schema_arrow.names, MAP_COLUMNS, "a released-id map")
    rows = source.read(columns=list(MAP_COLUMNS)).to_pydict()
    mapping: dict[str, tuple[str, str]] = {}
    for released_id, note_id, patient_id in zip(
        rows["released_note_id"], rows["note_id"], rows["patient_id"], strict=True
    ):
        if released_id in mapping:
            raise InputError(path, None, "a released note id appears twice")
        mapping[released_id] = (note_id, patient_id)
    return mapping


def restore_ids(
    notes: list[Note], mapping: Mapping[str, tuple[str, str]], path: str | Path
) -> list[Note]:
    """``notes`` with their original ids back; a note the map lacks is an InputError."""
    restored = []
    for note in notes:
        if note.note_id not in mapping:
            raise InputError(path, note.note_id, "this released note id is not in its id map")
        note_id, patient_id = mapping[note.note_id]
        restored.append(replace(note, note_id=note_id, patient_id=patient_id))
    return restored
