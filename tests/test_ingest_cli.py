"""Tests for `synthdeid ingest-corpus`: a good corpus gives notes.parquet + summary.json, a bad one
exits 2 with an error naming the file and leaves no output behind."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from synthdeid.artifacts import read_parquet_with_provenance
from synthdeid.cli import main
from synthdeid.notes import NOTES_SCHEMA, Span, read_notes

TEXT = "Seen by Dr. Alvarez on 3/14.\nCall 555-0100.\n"
OTHER = "Patient Jane Roe, seen 4/2.\n"
LABEL_MAP = {"HCPName": "DOCTOR", "PatientName": "PATIENT", "Date": "DATE", "Phone": "PHONE"}


def put(path: Path, content: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content.encode("utf-8"))
    return path


def phrase(patient: int, note: int, text: str, surface: str, category: str) -> str:
    start = text.index(surface)
    return f"{patient} {note} {start} {start + len(surface)} {category} {surface}\n"


def physionet_corpus(folder: Path, extra_phrase: str = "") -> Path:
    put(
        folder / "id.text",
        f"START_OF_RECORD=1||||1||||\n{TEXT}||||END_OF_RECORD\n"
        "START_OF_RECORD=1||||2||||\nNo PHI here.\n||||END_OF_RECORD\n"
        f"START_OF_RECORD=2||||1||||\n{OTHER}||||END_OF_RECORD\n",
    )
    put(
        folder / "id-phi.phrase",
        phrase(1, 1, TEXT, "Dr. Alvarez", "HCPName")
        + phrase(1, 1, TEXT, "Alvarez", "HCPName")  # overlaps the one above: merged
        + phrase(1, 1, TEXT, "3/14", "Date")
        + phrase(1, 1, TEXT, "555-0100", "Phone")
        + phrase(2, 1, OTHER, "Jane Roe", "PatientName")
        + phrase(2, 1, OTHER, "4/2", "Date")
        + extra_phrase,
    )
    return folder


def ingest(corpus: Path, fmt: str, out: Path, *extra: str) -> int:
    return main(
        [
            "ingest-corpus",
            "--corpus",
            str(corpus),
            "--format",
            fmt,
            "--label-map",
            json.dumps(LABEL_MAP),
            "--source",
            "unit",
            "--out",
            str(out / "notes.parquet"),
            "--summary",
            str(out / "summary.json"),
            *extra,
        ]
    )


def test_ingest_writes_notes_and_summary(tmp_path: Path) -> None:
    corpus = physionet_corpus(tmp_path / "corpus")
    out = tmp_path / "out"

    assert ingest(corpus, "physionet", out, "--overlaps", "merge_same_label") == 0

    assert sorted(p.name for p in out.iterdir()) == ["notes.parquet", "summary.json"]
    assert pq.read_schema(out / "notes.parquet").remove_metadata().equals(NOTES_SCHEMA)
    notes = read_notes(out / "notes.parquet")
    assert [(n.note_id, n.patient_id, n.source) for n in notes] == [
        ("1-1", "1", "unit"),
        ("1-2", "1", "unit"),
        ("2-1", "2", "unit"),
    ]
    assert notes[0].text == TEXT
    assert notes[0].spans == (Span(8, 19, "DOCTOR"), Span(23, 27, "DATE"), Span(34, 42, "PHONE"))
    assert [s.surface(OTHER) for s in notes[2].spans] == ["Jane Roe", "4/2"]

    written = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    summary, provenance = written["summary"], written["provenance"]
    assert summary == {
        "notes": 3,
        "patients": 2,
        "notes_with_phi": 2,
        "spans": 5,
        "spans_by_label": {"DATE": 2, "DOCTOR": 1, "PATIENT": 1, "PHONE": 1},
        "spans_by_coarse_label": {"MISC": 1, "PER": 2, "TIME": 2},
        "characters": len(TEXT) + len("No PHI here.\n") + len(OTHER),
        "gold_spans_read": 6,
        "surfaces_verified": 6,
        "overlaps_merged": [
            f"{corpus / 'id-phi.phrase'}: patient 1, note 1: "
            "merged overlapping DOCTOR spans 8-19 and 12-19 into 8-19"
        ],
    }
    assert provenance["step"] == "ingest"
    assert provenance["params"]["label_map"] == LABEL_MAP
    assert provenance["params"]["overlaps"] == "merge_same_label"
    assert provenance["inputs"]["corpus"]["digest"].startswith("sha256:")
    assert read_parquet_with_provenance(out / "notes.parquet")[1] == provenance


def bad_jsonl(folder: Path) -> tuple[Path, Path]:
    path = put(folder / "notes.jsonl", json.dumps({"text": TEXT}) + '\n{"text": "Call\n')
    return path, path


def bad_physionet_surface(folder: Path) -> tuple[Path, Path]:
    corpus = physionet_corpus(folder, extra_phrase="2 1 8 12 PatientName John\n")
    return corpus, corpus / "id-phi.phrase"


def bad_physionet_overlap(folder: Path) -> tuple[Path, Path]:
    corpus = physionet_corpus(folder, extra_phrase=phrase(2, 1, OTHER, "Roe", "HCPName"))
    return corpus, corpus / "id-phi.phrase"


def bad_brat_missing_ann(folder: Path) -> tuple[Path, Path]:
    put(folder / "a.txt", TEXT)
    put(folder / "a.ann", "T1\tHCPName 12 19\tAlvarez\n")
    put(folder / "b.txt", OTHER)
    return folder, folder / "b.ann"


def empty_jsonl(folder: Path) -> tuple[Path, Path]:
    path = put(folder / "notes.jsonl", "\n  \n")
    return path, path


def empty_physionet(folder: Path) -> tuple[Path, Path]:
    put(folder / "id.text", "")
    put(folder / "id-phi.phrase", "")
    return folder, folder


def colliding_physionet_ids(folder: Path) -> tuple[Path, Path]:
    # 1-2 / 3 and 1 / 2-3 would both be note 1-2-3
    put(
        folder / "id.text",
        f"START_OF_RECORD=1-2||||3||||\n{TEXT}||||END_OF_RECORD\n"
        f"START_OF_RECORD=1||||2-3||||\n{OTHER}||||END_OF_RECORD\n",
    )
    put(folder / "id-phi.phrase", "")
    return folder, folder / "id.text"


def bad_brat_orphan_ann(folder: Path) -> tuple[Path, Path]:
    put(folder / "a.txt", TEXT)
    put(folder / "a.ann", "T1\tHCPName 12 19\tAlvarez\n")
    put(folder / "b.ann", "T1\tHCPName 12 19\tAlvarez\n")
    return folder, folder / "b.ann"


def bad_brat_no_surface(folder: Path) -> tuple[Path, Path]:
    put(folder / "a.txt", TEXT)
    put(folder / "a.ann", "T1\tHCPName 11 21\n")
    return folder, folder / "a.ann"


def bad_i2b2_unknown_label(folder: Path) -> tuple[Path, Path]:
    path = put(
        folder / "110-01.xml",
        f"<deIdi2b2><TEXT><![CDATA[{TEXT}]]></TEXT><TAGS>"
        '<NAME id="P0" start="12" end="19" text="Alvarez" TYPE="NURSE" comment=""/>'
        "</TAGS></deIdi2b2>",
    )
    return folder, path


@pytest.mark.parametrize(
    ("fmt", "make", "message"),
    [
        ("jsonl", bad_jsonl, "line 2: invalid JSON"),
        ("physionet", bad_physionet_surface, "line 7 (patient 2, note 1): surface mismatch"),
        ("physionet", bad_physionet_overlap, "patient 2, note 1: spans overlap"),
        ("brat", bad_brat_missing_ann, "annotation file missing for b.txt"),
        ("i2b2", bad_i2b2_unknown_label, "tag P0 <NAME>: unknown label 'NURSE'"),
        ("jsonl", empty_jsonl, "holds no notes"),
        ("physionet", empty_physionet, "holds no notes"),
        (
            "physionet",
            colliding_physionet_ids,
            "line 1 (patient 1-2, note 3): patient id '1-2' contains '-'",
        ),
        ("brat", bad_brat_orphan_ann, "text file missing for b.ann"),
        ("brat", bad_brat_no_surface, "line 1 (T1): no surface column"),
    ],
)
def test_bad_corpus_exits_2_and_writes_nothing(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    fmt: str,
    make: Callable[[Path], tuple[Path, Path]],
    message: str,
) -> None:
    corpus, bad_file = make(tmp_path / "corpus")
    out = tmp_path / "out"
    out.mkdir()

    assert ingest(corpus, fmt, out, "--overlaps", "merge_same_label") == 2

    errors = [line for line in capsys.readouterr().err.splitlines() if " ERROR " in line]
    assert len(errors) == 1
    assert f"{bad_file}: {message}" in errors[0]
    assert list(out.iterdir()) == []  # no notes.parquet, no summary.json, no temp files
