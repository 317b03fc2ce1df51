"""Corpus-wide steps that stream: JSONL read line by line, ingest and split written batch by
batch, with the same bytes and the same errors as a whole-corpus read."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from synthdeid.artifacts import ROW_GROUP_ROWS, open_parquet, read_parquet_with_provenance
from synthdeid.cli import main
from synthdeid.errors import InputError
from synthdeid.ingest import IngestSettings, NoteCounts, ingest_corpus
from synthdeid.labels import CANONICAL_LABELS, LabelMap, coarse_view
from synthdeid.notes import Note, Span, note_batches, read_notes, read_patient_ids, write_notes
from synthdeid.readers.base import ReaderOptions, read_lines, read_text
from synthdeid.readers.jsonl import JsonlReader
from synthdeid.split import PARTS, patient_parts, split_notes_file

FRACTIONS = {"seed": 0.3, "train": 0.4, "holdout": 0.3}
PROVENANCE = {"step": "test"}
SETTINGS = IngestSettings("jsonl", LabelMap.identity(), "unit")
# more notes than one row group, so batches and row groups are both cut mid-corpus
MANY = ROW_GROUP_ROWS + 1500


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def jsonl_corpus(path: Path, count: int) -> Path:
    lines = []
    for i in range(count):
        text = f"Seen by Dr. Vale{i} on 2101-01-{i % 28 + 1:02d}."
        spans = [{"start": 8, "end": 16 + len(str(i)), "label": "DOCTOR"}] if i % 3 else []
        lines.append(
            json.dumps(
                {"note_id": f"n{i}", "patient_id": f"p{i // 4}", "text": text, "spans": spans}
            )
        )
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("content", "encoding"),
    [
        (b"", "utf-8"),
        (b"a\nb\n", "utf-8"),
        (b"a\nb", "utf-8"),
        (b"\n\n", "utf-8"),
        (b"a\r\nb\r\n", "utf-8"),
        ("x\u2028y\u0085z\nw".encode(), "utf-8"),
        (b"\xef\xbb\xbfa\n\xef\xbb\xbfb\n", "utf-8-sig"),
        ("caf\u00e9\nna\u00efve".encode("latin-1"), "latin-1"),
        ("a\nb\u00e9\n".encode("utf-16"), "utf-16"),
        ("\u3042\n\u3044".encode("shift_jis"), "shift_jis"),
    ],
)
def test_lines_read_one_at_a_time_are_the_whole_file_split(
    tmp_path: Path, content: bytes, encoding: str
) -> None:
    path = tmp_path / "notes.jsonl"
    path.write_bytes(content)
    assert list(read_lines(path, encoding)) == read_text(path, encoding).split("\n")


@pytest.mark.parametrize(
    "content",
    [b'{"a": 1}\n{"b": "5\xff5"}\n', b"ok\nok\nbad \xe2\x82", b"\xff\n", b"ok\n\xe2\x82\n"],
)
def test_undecodable_bytes_name_the_same_line_and_byte(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "notes.jsonl"
    path.write_bytes(content)
    with pytest.raises(InputError) as whole:
        read_text(path, "utf-8")
    with pytest.raises(InputError) as streamed:
        list(read_lines(path, "utf-8"))
    assert str(streamed.value) == str(whole.value)


def test_a_missing_file_is_refused_before_the_first_line(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="file not found"):
        read_lines(tmp_path / "absent.jsonl", "utf-8")


def test_jsonl_notes_are_read_as_they_are_asked_for(tmp_path: Path) -> None:
    path = tmp_path / "notes.jsonl"
    path.write_text('{"note_id": "a", "text": "x"}\n{"note_id": "b", "text": "y"}\nnot json\n')
    notes = JsonlReader(ReaderOptions(label_map=LabelMap.identity(), source="unit")).notes(path)
    assert [next(notes).note_id, next(notes).note_id] == ["a", "b"]  # line 3 not read yet
    with pytest.raises(InputError, match="line 3: invalid JSON"):
        next(notes)


def test_note_batches_cut_any_iterable() -> None:
    notes = [Note(f"n{i}", "p", "x", (), "unit") for i in range(7)]
    assert [len(b) for b in note_batches(iter(notes), 3)] == [3, 3, 1]
    assert [n for b in note_batches(notes, 3) for n in b] == notes
    assert list(note_batches([], 3)) == []


def ingest(corpus: Path, out: Path) -> int:
    label_map = json.dumps({label: label for label in CANONICAL_LABELS})
    reading = ["--corpus", str(corpus), "--format", "jsonl", "--label-map", label_map]
    writing = ["--out", str(out / "notes.parquet"), "--summary", str(out / "summary.json")]
    return main(["ingest-corpus", *reading, "--source", "unit", *writing])


def test_streamed_ingest_writes_what_a_whole_read_writes(tmp_path: Path) -> None:
    corpus = jsonl_corpus(tmp_path / "corpus.jsonl", MANY)
    assert ingest(corpus, tmp_path / "out") == 0
    _, provenance = read_parquet_with_provenance(tmp_path / "out" / "notes.parquet")
    whole = ingest_corpus(corpus, SETTINGS).notes
    write_notes(whole, tmp_path / "whole.parquet", provenance)
    assert digest(tmp_path / "out" / "notes.parquet") == digest(tmp_path / "whole.parquet")
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())["summary"]
    assert summary["notes"] == MANY and summary["patients"] == -(-MANY // 4)
    assert summary["notes_with_phi"] == sum(1 for n in whole if n.spans)
    assert summary["spans_by_label"] == {"DOCTOR": summary["notes_with_phi"]}
    assert summary["characters"] == sum(len(n.text) for n in whole)


def test_a_bad_line_after_many_notes_leaves_no_output(tmp_path: Path) -> None:
    corpus = jsonl_corpus(tmp_path / "corpus.jsonl", MANY)
    with corpus.open("a") as handle:
        handle.write('{"note_id": "n5", "text": "again"}\n')
    assert ingest(corpus, tmp_path / "out") == 2
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []


def test_counts_gathered_in_batches_equal_counts_over_all() -> None:
    notes = [
        Note("a", "p1", "Dr. X", (Span(0, 5, "DOCTOR"),), "unit"),
        Note("b", "p1", "none", (), "unit"),
        Note("c", "p2", "On 3/4 in Oslo", (Span(3, 6, "DATE"), Span(10, 14, "LOCATION")), "unit"),
    ]
    view = coarse_view(None)
    whole, batched = NoteCounts(view), NoteCounts(view)
    whole.add(notes)
    for batch in note_batches(notes, 2):
        batched.add(batch)
    assert whole.summary() == batched.summary()
    assert whole.summary()["patients"] == 2 and whole.summary()["notes_with_phi"] == 2
    coarse = Counter(view[label] for label in ("DOCTOR", "DATE", "LOCATION"))
    assert whole.summary()["spans_by_coarse_label"] == dict(sorted(coarse.items()))


def test_the_first_pass_reads_the_patient_column_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ingest(jsonl_corpus(tmp_path / "corpus.jsonl", 40), tmp_path / "in")
    source = open_parquet(tmp_path / "in" / "notes.parquet")
    asked: list[object] = []
    original = source.read_row_group

    def recording(group: int, **kwargs: object) -> pa.Table:
        asked.append(kwargs.get("columns"))
        return original(group, **kwargs)  # type: ignore[arg-type]

    source.read_row_group = recording  # type: ignore[method-assign]
    monkeypatch.setattr("synthdeid.notes.open_parquet", lambda path: source)
    assert read_patient_ids(tmp_path / "in" / "notes.parquet") == {f"p{i}" for i in range(10)}
    assert asked == [["patient_id"]]


def test_the_first_pass_checks_the_table(tmp_path: Path) -> None:
    path = tmp_path / "other.parquet"
    pq.write_table(pa.table({"patient_id": ["p"]}), path)
    with pytest.raises(InputError, match="not a notes table: missing columns"):
        read_patient_ids(path)
    write_notes([], tmp_path / "empty.parquet")
    with pytest.raises(InputError, match="holds no notes"):
        read_patient_ids(tmp_path / "empty.parquet", nonempty=True)


def test_streamed_split_writes_what_a_whole_split_writes(tmp_path: Path) -> None:
    assert ingest(jsonl_corpus(tmp_path / "corpus.jsonl", MANY), tmp_path / "in") == 0
    notes_path = tmp_path / "in" / "notes.parquet"
    summary = split_notes_file(notes_path, tmp_path / "split.parquet", FRACTIONS, 13, PROVENANCE)

    notes = read_notes(notes_path)
    part_of = patient_parts((n.patient_id for n in notes), FRACTIONS, 13)
    whole = [n.with_split(part_of[n.patient_id]) for n in notes]
    write_notes(whole, tmp_path / "whole.parquet", PROVENANCE)
    assert digest(tmp_path / "split.parquet") == digest(tmp_path / "whole.parquet")
    patients = {part: {n.patient_id for n in whole if n.split == part} for part in PARTS}
    assert summary["patients"] == {part: len(ids) for part, ids in patients.items()}
    assert summary["notes"] == {part: sum(1 for n in whole if n.split == part) for part in PARTS}
    assert summary["spans"] == {
        part: sum(len(n.spans) for n in whole if n.split == part) for part in PARTS
    }


def test_a_bad_note_in_a_later_batch_leaves_no_split(tmp_path: Path) -> None:
    notes = [Note(f"n{i}", f"p{i}", "text", (), "unit") for i in range(MANY)]
    notes[-1] = Note("n3", "p3", "text", (), "unit")
    write_notes(notes, tmp_path / "dup.parquet")
    with pytest.raises(InputError, match=r"duplicate note_id 'n3', first used at row 3"):
        split_notes_file(tmp_path / "dup.parquet", tmp_path / "out.parquet", FRACTIONS, 1, {})
    assert not (tmp_path / "out.parquet").exists()
