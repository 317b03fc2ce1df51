"""Keyed one-way note and patient ids in the releasable surrogate corpus (SHIELD, sec. 2.2):
the ids, the local map back, and build-mixture keeping its holdout check through the map."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from synthdeid.cli import main
from synthdeid.errors import InputError
from synthdeid.local_only import LOCAL_ONLY_KEY
from synthdeid.notes import Note, Span, read_notes, write_notes
from synthdeid.surrogate.keying import SECRET_VARIABLE, SurrogateKey
from synthdeid.surrogate.release_ids import read_id_map, release_id, released, restore_ids

SECRET = "5f1e9c0b7a3d2e8f4c6b1a0d9e8f7c6b5a4d3e2f1c0b9a8d7e6f5c4b3a2d1e0f"


def note(note_id: str, patient: str, split: str, name: str = "Ames") -> Note:
    text = f"Seen by Dr. {name} today."
    start = text.index(name)
    return Note(note_id, patient, text, (Span(start, start + len(name), "DOCTOR"),), "t", split)


def test_ids_are_keyed_one_way_and_consistent_per_patient() -> None:
    key, other = SurrogateKey(SECRET.encode()), SurrogateKey(b"another secret of this test")
    first = released(note("n1", "p1", "seed"), key)
    second = released(note("n2", "p1", "seed"), key)
    assert (
        first.patient_id == second.patient_id != released(note("n3", "p2", "seed"), key).patient_id
    )
    assert first.note_id != second.note_id
    assert first.note_id.startswith("note-") and len(first.note_id) == len("note-") + 16
    assert "n1" not in first.note_id and "p1" not in first.patient_id
    assert release_id(key, "note", "n1") == first.note_id != release_id(other, "note", "n1")
    assert release_id(key, "note", "x") != release_id(key, "patient", "x")  # kinds apart


@pytest.fixture()
def corpus(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv(SECRET_VARIABLE, SECRET)
    notes = [
        *(note(f"s{i}", f"ps{i}", "seed") for i in range(4)),
        *(note(f"t{i}", f"pt{i}", "train", "Bell") for i in range(12)),
        *(note(f"h{i}", f"ph{i}", "holdout", "Cole") for i in range(3)),
    ]
    path = tmp_path / "split.parquet"
    write_notes(notes, path)
    out = tmp_path / "surrogates" / "notes.parquet"
    assert main(["replace-surrogates", str(path), str(out)]) == 0
    return tmp_path


def test_the_release_carries_no_original_id_and_the_local_map_restores_them(corpus: Path) -> None:
    out = corpus / "surrogates" / "notes.parquet"
    released_notes = read_notes(out)
    assert all(n.note_id.startswith("note-") for n in released_notes)
    assert all(n.patient_id.startswith("patient-") for n in released_notes)
    originals = {n.note_id for n in read_notes(corpus / "split.parquet")}
    assert not originals & {n.note_id for n in released_notes}
    id_map = corpus / "surrogates" / "local" / "notes.offsets.parquet"
    assert pq.read_schema(id_map).metadata[LOCAL_ONLY_KEY] == b"true"
    restored = restore_ids(released_notes, read_id_map(id_map), id_map)
    assert [n.note_id for n in restored] == [
        n.note_id for n in read_notes(corpus / "split.parquet")
    ]
    assert {n.patient_id for n in restored if n.split == "holdout"} == {"ph0", "ph1", "ph2"}
    stranger = Note("note-0000000000000000", "patient-x", "t", (), "t", "seed")
    with pytest.raises(InputError, match="not in its id map"):
        restore_ids([stranger], read_id_map(id_map), id_map)


def build(corpus: Path, name: str, *extra: str) -> int:
    surrogates = corpus / "surrogates"
    return main(
        [
            "build-mixture",
            "--notes",
            str(corpus / "split.parquet"),
            "--pool",
            f"surrogates={surrogates / 'notes.parquet'}",
            *extra,
            "--spec",
            json.dumps(
                {"regime": "augmentation", "seed": 1, "synthetic_fraction": 0.2}
                | {"share_tolerance": None}
            ),
            "--out-train",
            str(corpus / name / "train.parquet"),
            "--out-validation",
            str(corpus / name / "validation.parquet"),
            "--summary",
            str(corpus / name / "summary.json"),
        ]
    )


def test_build_mixture_checks_patients_through_the_map(corpus: Path, capsys) -> None:
    ids = f"surrogates={corpus / 'surrogates' / 'local' / 'notes.offsets.parquet'}"
    assert build(corpus, "seed", "--pool-ids", ids, "--pool-parts", "seed") == 0
    train = read_notes(corpus / "seed" / "train.parquet")
    pooled = sorted(n.note_id for n in train if n.note_id.startswith("surrogates:"))
    assert pooled and all(i in {f"surrogates:s{k}" for k in range(4)} for i in pooled)
    # surrogates of holdout notes: the map makes them known as the holdout patients'
    assert build(corpus, "leak", "--pool-ids", ids, "--pool-parts", "seed", "holdout") != 0
    assert "holdout patients" in capsys.readouterr().err
    assert not (corpus / "leak" / "train.parquet").exists()
    stray = f"other={corpus / 'surrogates' / 'local' / 'notes.offsets.parquet'}"
    assert build(corpus, "stray", "--pool-ids", stray) != 0
    assert "no --pool gives" in capsys.readouterr().err
