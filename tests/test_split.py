from __future__ import annotations

import random

import pytest

from synthdeid.errors import ConfigError
from synthdeid.notes import Note
from synthdeid.split import part_sizes, patient_parts

FRACTIONS = {"seed": 0.3, "train": 0.4, "holdout": 0.3}


def make_notes(n_patients: int) -> list[Note]:
    rng = random.Random(0)
    return [
        Note(f"p{p}-n{k}", f"p{p}", "text", (), "test")
        for p in range(n_patients)
        for k in range(rng.randint(1, 5))
    ]


def test_part_sizes_follow_fractions() -> None:
    # 29.4 / 39.2 / 29.4: the spare patient goes to the first of the largest remainders
    assert part_sizes(98, FRACTIONS) == {"seed": 30, "train": 39, "holdout": 29}
    assert part_sizes(10, FRACTIONS) == {"seed": 3, "train": 4, "holdout": 3}


@pytest.mark.parametrize(
    ("n", "fractions", "message"),
    [
        (10, {"seed": 0.5, "train": 0.6}, "sum to 1"),
        (10, {"seed": 0.5, "dev": 0.5}, "unknown parts"),
        (2, FRACTIONS, "too few"),
    ],
)
def test_part_sizes_refuse_bad_fractions(n: int, fractions: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        part_sizes(n, fractions)


def assign_parts(notes: list[Note], fractions: dict[str, float], seed: int) -> list[Note]:
    part_of = patient_parts((note.patient_id for note in notes), fractions, seed)
    return [note.with_split(part_of[note.patient_id]) for note in notes]


def test_split_is_by_patient_deterministic_and_order_free() -> None:
    notes = make_notes(40)
    first = assign_parts(notes, FRACTIONS, seed=7)
    again = assign_parts(list(reversed(notes)), FRACTIONS, seed=7)
    assert {n.note_id: n.split for n in first} == {n.note_id: n.split for n in again}
    part_of: dict[str, set[str]] = {}
    for note in first:
        part_of.setdefault(note.patient_id, set()).add(note.split)
    assert all(len(parts) == 1 for parts in part_of.values())
    counts = {part: sum(1 for p in part_of.values() if part in p) for part in FRACTIONS}
    assert counts == part_sizes(40, FRACTIONS)


def test_other_seed_gives_another_split() -> None:
    notes = make_notes(40)
    a = {n.patient_id: n.split for n in assign_parts(notes, FRACTIONS, seed=1)}
    b = {n.patient_id: n.split for n in assign_parts(notes, FRACTIONS, seed=2)}
    assert a != b
