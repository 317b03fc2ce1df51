"""Streamed Parquet: fixed row groups (same bytes however the rows arrive) and row-range reads."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from synthdeid.artifacts import (
    iter_row_range,
    open_parquet,
    parquet_writer,
    read_parquet_with_provenance,
    write_parquet_atomic,
)
from synthdeid.errors import InputError
from synthdeid.notes import Note, Span, iter_notes, notes_to_table, write_notes

PROVENANCE = {"step": "test", "params": {"n": 1}}


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def make_notes(count: int) -> list[Note]:
    return [
        Note(
            note_id=f"n{i:05d}",
            patient_id=f"p{i // 3}",
            text=f"Seen by Dr. Vale{i} on 2101-01-{i % 28 + 1:02d}.",
            spans=(Span(8, 16 + len(str(i)), "DOCTOR"),),
            source="synthetic-test",
        )
        for i in range(count)
    ]


@pytest.mark.parametrize("pieces", [1, 7, 100, 1000])
def test_rows_written_in_any_pieces_give_the_same_bytes(tmp_path: Path, pieces: int) -> None:
    table = notes_to_table(make_notes(1000))
    whole, streamed = tmp_path / "whole.parquet", tmp_path / "streamed.parquet"
    with parquet_writer(whole, table.schema, PROVENANCE, row_group_rows=128) as writer:
        writer.write(table)
    step = -(-table.num_rows // pieces)
    with parquet_writer(streamed, table.schema, PROVENANCE, row_group_rows=128) as writer:
        for start in range(0, table.num_rows, step):
            writer.write(table.slice(start, step))
    assert digest(whole) == digest(streamed)
    groups = [pq.ParquetFile(whole).metadata.row_group(g).num_rows for g in range(8)]
    assert groups == [128] * 7 + [1000 - 7 * 128]


def test_the_writer_matches_a_whole_table_write_and_keeps_provenance(tmp_path: Path) -> None:
    table = notes_to_table(make_notes(50))
    plain = tmp_path / "plain.parquet"
    metadata = {b"synthdeid.provenance": b'{"params": {"n": 1}, "step": "test"}'}
    pq.write_table(table.replace_schema_metadata(metadata), plain, compression="zstd")
    ours = tmp_path / "ours.parquet"
    write_parquet_atomic(table, ours, PROVENANCE)
    assert digest(plain) == digest(ours)
    assert read_parquet_with_provenance(ours)[1] == PROVENANCE


def test_an_empty_table_is_written_with_its_schema(tmp_path: Path) -> None:
    out = tmp_path / "empty.parquet"
    write_notes([], out, PROVENANCE)
    table, provenance = read_parquet_with_provenance(out)
    assert table.num_rows == 0 and provenance == PROVENANCE
    assert table.schema.names == notes_to_table([]).schema.names


def test_a_failed_stream_leaves_nothing(tmp_path: Path) -> None:
    out = tmp_path / "part" / "notes.parquet"
    table = notes_to_table(make_notes(10))
    with pytest.raises(RuntimeError), parquet_writer(out, table.schema) as writer:
        writer.write(table)
        raise RuntimeError("stopped midway")
    assert not (tmp_path / "part").exists()


def write_in_groups(path: Path, notes: list[Note], group: int) -> None:
    with parquet_writer(path, notes_to_table([]).schema, row_group_rows=group) as writer:
        writer.write(notes_to_table(notes))


@pytest.mark.parametrize(
    ("rows", "batch"), [(range(0, 100), 100), (range(15, 47), 8), (range(33, 34), 5)]
)
def test_a_row_range_reads_exactly_its_rows(tmp_path: Path, rows: range, batch: int) -> None:
    notes = make_notes(100)
    path = tmp_path / "notes.parquet"
    write_in_groups(path, notes, group=16)
    pieces = list(iter_row_range(open_parquet(path), rows, batch_rows=batch))
    assert all(table.num_rows <= batch for _, table in pieces)
    firsts = [first for first, _ in pieces]
    assert firsts == sorted(firsts) and firsts[0] == rows.start
    ids = [i for _, t in pieces for i in t.column("note_id").to_pylist()]
    assert ids == [notes[i].note_id for i in rows]


def test_a_row_range_reads_only_the_row_groups_it_overlaps(tmp_path: Path) -> None:
    path = tmp_path / "notes.parquet"
    write_in_groups(path, make_notes(100), group=10)
    source = open_parquet(path)
    read: list[int] = []
    original = source.read_row_group

    def counting(group: int, **kwargs: object) -> pa.Table:
        read.append(group)
        return original(group, **kwargs)  # type: ignore[arg-type]

    source.read_row_group = counting  # type: ignore[method-assign]
    list(iter_row_range(source, range(35, 52)))
    assert read == [3, 4, 5]


def test_iter_notes_checks_ids_across_batches(tmp_path: Path) -> None:
    notes = make_notes(30)
    notes[25] = Note("n00003", "p9", "x", (), "synthetic-test")
    path = tmp_path / "notes.parquet"
    write_in_groups(path, notes, group=8)
    with pytest.raises(InputError, match=r"duplicate note_id 'n00003', first used at row 3"):
        for _ in iter_notes(path, batch_rows=4):
            pass
    assert [n.note_id for batch in iter_notes(path, rows=range(4, 9)) for n in batch] == [
        f"n0000{i}" for i in range(4, 9)
    ]
