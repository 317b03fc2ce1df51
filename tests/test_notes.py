from __future__ import annotations

import tracemalloc
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from synthdeid import notes
from synthdeid.artifacts import read_parquet_with_provenance, write_json_atomic
from synthdeid.errors import InputError
from synthdeid.notes import (
    NOTES_SCHEMA,
    ROW_RECORD,
    Note,
    NoteIds,
    Span,
    check_spans,
    merge_same_label_overlaps,
    notes_to_table,
    read_notes,
    splice,
    table_to_notes,
    write_notes,
)

TEXT = "Dr. Ames saw her on 3/14."


def test_check_spans_sorts_and_accepts_adjacent_spans() -> None:
    spans = check_spans(
        TEXT,
        [Span(20, 24, "DATE"), Span(4, 8, "DOCTOR"), Span(8, 9, "OTHER")],
        path="x",
        record="r",
    )
    assert [s.start for s in spans] == [4, 8, 20]


@pytest.mark.parametrize(
    ("span", "problem"),
    [
        (Span(20, 40, "DATE"), "outside the text"),
        (Span(-1, 3, "DATE"), "outside the text"),
        (Span(5, 5, "DATE"), "empty"),
        (Span(4, 8, "NAME"), "unknown label 'NAME'"),
    ],
)
def test_check_spans_refuses_bad_spans(span: Span, problem: str) -> None:
    with pytest.raises(InputError, match=problem) as err:
        check_spans(TEXT, [span], path="corpus.jsonl", record="line 3", labels=["DATE", "DOCTOR"])
    assert str(err.value).startswith("corpus.jsonl: line 3: ")


def test_check_spans_refuses_overlap() -> None:
    with pytest.raises(InputError, match=r"spans overlap: 4-8 \(DOCTOR\) and 6-10 \(DOCTOR\)"):
        check_spans(TEXT, [Span(4, 8, "DOCTOR"), Span(6, 10, "DOCTOR")], path="f", record="r")


def test_merge_same_label_overlaps_unions_and_reports() -> None:
    merged, notes = merge_same_label_overlaps(
        [Span(6, 12, "LOCATION"), Span(0, 8, "LOCATION"), Span(20, 24, "DATE")]
    )
    assert merged == [Span(0, 12, "LOCATION"), Span(20, 24, "DATE")]
    assert notes == ["merged overlapping LOCATION spans 0-8 and 6-12 into 0-12"]
    # across labels nothing is merged: check_spans refuses it later
    cross, _ = merge_same_label_overlaps([Span(0, 8, "LOCATION"), Span(6, 12, "HOSPITAL")])
    assert len(cross) == 2


def test_notes_roundtrip_with_schema_and_provenance(tmp_path) -> None:
    notes = [
        Note("n1", "p1", TEXT, (Span(4, 8, "DOCTOR"),), "test", "seed"),
        Note("n2", "p1", "nothing here", (), "test", "train"),
    ]
    path = tmp_path / "notes.parquet"
    write_notes(notes, path, {"step": "unit"})
    assert read_notes(path) == notes
    table, provenance = read_parquet_with_provenance(path)
    assert table.schema.remove_metadata() == NOTES_SCHEMA
    assert provenance == {"step": "unit"}
    assert pq.read_schema(path).field("spans").type == NOTES_SCHEMA.field("spans").type


def test_table_to_notes_checks_every_note() -> None:
    table = notes_to_table([Note("n1", "p1", "short", (Span(0, 9, "DATE"),), "t")])
    with pytest.raises(InputError, match="note 'n1': span 0-9"):
        table_to_notes(table, path="bad.parquet")
    dup = notes_to_table([Note("n1", "p1", "a", (), "t"), Note("n1", "p2", "b", (), "t")])
    with pytest.raises(InputError, match="duplicate note_id") as err:
        table_to_notes(dup, path="dup.parquet")
    assert str(err.value).startswith(
        "dup.parquet: row 1 (note 'n1'): duplicate note_id 'n1', first used at row 0 (note 'n1')"
    )


@pytest.mark.parametrize("note_id", ["", " ", "\t\n"])
def test_table_to_notes_refuses_a_blank_note_id(note_id: str) -> None:
    table = notes_to_table([Note("n1", "p1", "a", (), "t"), Note(note_id, "p1", "b", (), "t")])
    with pytest.raises(InputError) as err:
        table_to_notes(table, path="blank.parquet")
    assert err.value.record == f"row 1 (note {note_id!r})"
    assert err.value.problem == f"blank note_id {note_id!r}"


def test_note_ids_are_unique_across_batches_of_one_table() -> None:
    ids = NoteIds()
    first = notes_to_table([Note("a", "p1", "x", (), "t"), Note("b", "p1", "y", (), "t")])
    second = notes_to_table([Note("c", "p2", "z", (), "t"), Note("a", "p2", "w", (), "t")])
    assert len(table_to_notes(first, path="big.parquet", ids=ids, first_row=0)) == 2
    with pytest.raises(InputError) as err:
        table_to_notes(second, path="big.parquet", ids=ids, first_row=2)
    assert err.value.record == "row 3 (note 'a')"
    assert "duplicate note_id 'a', first used at row 0 (note 'a')" in err.value.problem


def test_note_ids_name_the_first_file_when_the_duplicate_is_in_another() -> None:
    ids = NoteIds()
    ids.add("doc", path="corpus/doc.txt", record=None)
    with pytest.raises(InputError, match=r"first used at corpus/doc\.txt"):
        ids.add("doc", path="corpus/other.txt", record="line 3")


def test_read_notes_can_require_notes(tmp_path) -> None:
    path = tmp_path / "empty.parquet"
    write_notes([], path)
    assert read_notes(path) == []
    with pytest.raises(InputError) as err:
        read_notes(path, nonempty=True)
    assert str(err.value).startswith(f"{path}: holds no notes")


def test_failed_write_leaves_no_file(tmp_path) -> None:
    target = tmp_path / "out.json"
    with pytest.raises(TypeError):
        write_json_atomic({"not serialisable": object()}, target)
    assert list(tmp_path.iterdir()) == []


def test_splice_records_insert_offsets() -> None:
    text, spans = splice(TEXT, [Span(4, 8, "DOCTOR"), Span(20, 24, "DATE")], ["Bartholomew", "D"])
    assert text == "Dr. Bartholomew saw her on D."
    assert [s.surface(text) for s in spans] == ["Bartholomew", "D"]
    assert [s.label for s in spans] == ["DOCTOR", "DATE"]


def test_note_ids_cost_sixteen_bytes_an_id_whatever_its_length() -> None:
    # a dict of the ids cost about 135 bytes a note for 16-character ids
    count = 50_000
    path = Path("corpus") / "notes.parquet"
    tracemalloc.start()
    try:
        ids = NoteIds()
        for number in range(count):  # each id made as a read makes it, so only NoteIds keeps it
            ids.add_numbered(f"n{number:063d}", number + 1000, path=path, form=ROW_RECORD)
        assert len(ids) == count  # merges the ids that wait in the buffer
        used = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert used / count < 16.5
    with pytest.raises(InputError, match=r"first used at row 1007 \(note 'n0+7'\)"):
        ids.add_numbered(f"n{7:063d}", 5, path=path, form=ROW_RECORD)


def test_ids_that_share_a_hash_are_told_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(notes, "hash64", lambda *parts, domain: 42)  # every id collides
    ids = NoteIds()
    ids.add_numbered("a", 1, path="big.parquet", form=ROW_RECORD)
    ids.add("b\nwith a newline", path="doc/b.txt", record=None)
    ids.add_numbered("c", 3, path="other.parquet", form=ROW_RECORD)
    assert len(ids) == 3
    for note_id, where in [
        ("a", "row 1 (note 'a')"),
        ("b\nwith a newline", "doc/b.txt"),
        ("c", "other.parquet: row 3 (note 'c')"),
    ]:
        with pytest.raises(InputError) as err:
            ids.add_numbered(note_id, 9, path="big.parquet", form=ROW_RECORD)
        assert err.value.problem == f"duplicate note_id {note_id!r}, first used at {where}"
    assert len(ids) == 3


@pytest.mark.parametrize("note_id", ["é-1", "\ud800", "x" * 5000, "line\nbreak", "[1, 2]"])
def test_any_id_is_kept_and_found_again(note_id: str) -> None:
    ids = NoteIds()
    ids.add_numbered("first", 0, path="t.parquet", form=ROW_RECORD)
    ids.add_numbered(note_id, 1, path="t.parquet", form=ROW_RECORD)
    ids.add(note_id + "!", path="t.parquet", record="free")
    with pytest.raises(InputError, match="first used at row 1"):
        ids.add_numbered(note_id, 2, path="t.parquet", form=ROW_RECORD)
    with pytest.raises(InputError, match="first used at free"):
        ids.add(note_id + "!", path="t.parquet", record="again")


@pytest.mark.parametrize(
    ("second_path", "form", "where_a", "where_b"),
    [
        ("big.parquet", ROW_RECORD, "row 1 (note 'a')", "row 2 (note 'b')"),
        (
            "other.parquet",
            ROW_RECORD,
            "big.parquet: row 1 (note 'a')",
            "other.parquet: row 2 (note 'b')",
        ),
        ("big.parquet", "line {number} (note {note_id})", "row 1 (note 'a')", "line 2 (note b)"),
    ],
)
def test_numbered_ids_name_the_first_record_as_add_would(
    second_path: str, form: str, where_a: str, where_b: str
) -> None:
    ids = NoteIds()
    ids.add_numbered("a", 1, path="big.parquet", form=ROW_RECORD)
    ids.add_numbered("b", 2, path=second_path, form=form)
    with pytest.raises(InputError) as err:
        ids.add_numbered("a", 7, path=second_path, form=form)
    assert err.value.record == form.format(number=7, note_id="a")
    assert err.value.problem == f"duplicate note_id 'a', first used at {where_a}"
    with pytest.raises(InputError) as err:
        ids.add_numbered("b", 8, path="big.parquet", form=ROW_RECORD)
    assert err.value.problem == f"duplicate note_id 'b', first used at {where_b}"
