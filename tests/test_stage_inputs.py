"""Stages that read a notes table refuse one without notes, and note ids repeated anywhere in it."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from synthdeid.cli import main
from synthdeid.errors import ConfigError
from synthdeid.notes import Note, Span, write_notes
from synthdeid.split import FRACTION_SUM_TOLERANCE, check_fractions
from synthdeid.surrogate.keying import SECRET_VARIABLE

TEXT = "Seen by Dr. Ames on 3/14."


def note(note_id: str, patient: str = "p1", split: str = "seed") -> Note:
    return Note(note_id, patient, TEXT, (Span(12, 16, "DOCTOR"),), "unit", split)


def error_lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if " ERROR " in line]


def split_args(notes: Path, out: Path, holdout: str = "0.3") -> list[str]:
    return [
        "split-notes",
        "--notes",
        str(notes),
        "--seed",
        "1",
        "--seed-fraction",
        "0.3",
        "--train-fraction",
        "0.4",
        "--holdout-fraction",
        holdout,
        "--out",
        str(out / "notes.parquet"),
        "--summary",
        str(out / "summary.json"),
    ]


def mask_args(notes: Path, out: Path) -> list[str]:
    return [
        "mask-seeds",
        "--notes",
        str(notes),
        "--out",
        str(out / "masked.parquet"),
        "--removed",
        str(out / "local" / "removed.parquet"),
        "--summary",
        str(out / "summary.json"),
    ]


def surrogate_args(notes: Path, out: Path, *extra: str) -> list[str]:
    return ["replace-surrogates", str(notes), str(out / "notes.parquet"), *extra]


@pytest.fixture
def secret(monkeypatch: pytest.MonkeyPatch) -> None:
    # 64 hex digits, like `openssl rand -hex 32`
    monkeypatch.setenv(SECRET_VARIABLE, hashlib.sha256(b"stage inputs").hexdigest())


@pytest.mark.parametrize("stage", ["split-notes", "mask-seeds", "replace-surrogates"])
def test_a_table_without_notes_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], secret: None, stage: str
) -> None:
    empty = tmp_path / "empty.parquet"
    write_notes([], empty)
    out = tmp_path / "out"
    out.mkdir()
    args = {
        "split-notes": split_args,
        "mask-seeds": mask_args,
        "replace-surrogates": surrogate_args,
    }[stage]

    assert main(args(empty, out)) == 2

    errors = error_lines(capsys)
    assert len(errors) == 1 and f"{empty}: holds no notes" in errors[0]
    assert list(out.iterdir()) == []


def test_surrogate_finds_a_note_id_repeated_in_another_batch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], secret: None
) -> None:
    table = tmp_path / "notes.parquet"
    write_notes([note("a"), note("b"), note("c"), note("a", "p2")], table)
    out = tmp_path / "out"
    out.mkdir()

    assert main(surrogate_args(table, out, "--batch-rows", "1")) == 2

    errors = error_lines(capsys)
    assert len(errors) == 1
    assert (
        f"{table}: row 3 (note 'a'): duplicate note_id 'a', first used at row 0 (note 'a')"
        in errors[0]
    )
    assert [p for p in out.rglob("*") if p.is_file()] == []


@pytest.mark.parametrize("stage", ["split-notes", "mask-seeds"])
def test_a_repeated_note_id_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], stage: str
) -> None:
    table = tmp_path / "notes.parquet"
    write_notes([note("a"), note("b", "p2"), note("a", "p3")], table)
    out = tmp_path / "out"
    out.mkdir()
    args = split_args if stage == "split-notes" else mask_args

    assert main(args(table, out)) == 2

    assert "row 2 (note 'a'): duplicate note_id 'a'" in error_lines(capsys)[0]
    assert list(out.iterdir()) == []


@pytest.mark.parametrize(
    "fractions",
    [
        {"seed": 0.3, "train": 0.4, "holdout": 0.3},
        {"seed": 0.1, "train": 0.2, "holdout": 0.7},  # 0.1 + 0.2 is 0.30000000000000004
        {"seed": 0.3, "train": 0.4, "holdout": 0.3 + FRACTION_SUM_TOLERANCE / 2},
    ],
)
def test_fractions_summing_to_one_are_accepted(fractions: dict[str, float]) -> None:
    check_fractions(fractions)


@pytest.mark.parametrize(
    "fractions",
    [
        {"seed": 0.3, "train": 0.4, "holdout": 0.4},
        {"seed": 0.3, "train": 0.4, "holdout": 0.3 + FRACTION_SUM_TOLERANCE * 3},
        {"seed": 0.5, "train": 0.6, "holdout": -0.1},
    ],
)
def test_fractions_not_summing_to_one_are_refused(fractions: dict[str, float]) -> None:
    with pytest.raises(ConfigError, match="must be non-negative and sum to 1"):
        check_fractions(fractions)


def test_split_refuses_bad_fractions_before_reading_the_notes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    assert main(split_args(tmp_path / "absent.parquet", out, holdout="0.4")) == 2
    assert "split.fractions must be non-negative and sum to 1" in error_lines(capsys)[0]
    assert list(out.iterdir()) == []
