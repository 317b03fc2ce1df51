"""An external de-identifier's predictions scored as a run (score-anchor), on tiny made-up notes.

The last test scores deid.pl's predictions on the whole PhysioNet developer
corpus (PHYSIONET_DEID_DIR and ../shared/anchors/; skipped without them).
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from synthdeid.artifacts import read_parquet_with_provenance
from synthdeid.cli import main
from synthdeid.errors import InputError
from synthdeid.evaluation.anchors import NAME, read_anchor, resolve_names
from synthdeid.notes import NOTES_SCHEMA, Note, Span, read_notes, write_notes
from synthdeid.scoring.metrics import count_table, headline_metrics, table_headline

# made-up notes; patient "7" note "1" is the project's note "7-1"
TEXT_A = "Seen by Dr Quill on 3/14 with Vera Moss."
TEXT_B = "Patient Vera Moss, call 555-0100."
TEXT_C = "No identifiers in this note."
TEXT_T = "Train note for Dr Quill."


def span(text: str, surface: str, label: str) -> Span:
    start = text.index(surface)
    return Span(start, start + len(surface), label)


def raw(text: str, surface: str, label: str) -> dict[str, Any]:
    s = span(text, surface, label)
    return {"start": s.start, "end": s.end, "label": s.label}


def gold_notes() -> list[Note]:
    return [
        Note(
            "7-1",
            "7",
            TEXT_A,
            (
                span(TEXT_A, "Quill", "DOCTOR"),
                span(TEXT_A, "3/14", "DATE"),
                span(TEXT_A, "Vera Moss", "PATIENT"),
            ),
            "unit",
            "holdout",
        ),
        Note(
            "7-2",
            "7",
            TEXT_B,
            (span(TEXT_B, "Vera Moss", "PATIENT"), span(TEXT_B, "555-0100", "PHONE")),
            "unit",
            "holdout",
        ),
        Note("8-1", "8", TEXT_C, (), "unit", "holdout"),
        Note("9-1", "9", TEXT_T, (span(TEXT_T, "Quill", "DOCTOR"),), "unit", "train"),
    ]


def good_lines() -> list[dict[str, Any]]:
    """Everything found but the date of 7-1; names without their kind (NAME)."""
    return [
        {
            "patient_id": "7",
            "note_id": "1",
            "spans": [raw(TEXT_A, "Vera Moss", NAME), raw(TEXT_A, "Quill", "DOCTOR")],
        },
        {
            "patient_id": 7,  # an integer id is the same id
            "note_id": 2,
            "spans": [raw(TEXT_B, "Vera Moss", NAME), raw(TEXT_B, "555-0100", "PHONE")],
        },
        {"patient_id": "8", "note_id": "1", "spans": []},
        {"patient_id": "9", "note_id": "1", "spans": [raw(TEXT_T, "Quill", "DOCTOR")]},
    ]


def write_lines(path: Path, lines: list[Any]) -> Path:
    path.write_text(
        "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)
    )
    return path


@pytest.fixture
def notes_file(tmp_path: Path) -> Path:
    path = tmp_path / "notes.parquet"
    write_notes(gold_notes(), path)
    return path


def score(
    tmp_path: Path, notes: Path, anchor: Path, *parts: str, name: str = "anchor"
) -> tuple[int, Path]:
    out = tmp_path / "out" / name / "predictions.parquet"
    arguments = ["score-anchor", "--anchor", str(anchor), "--notes", str(notes)]
    arguments += ["--out", str(out), "--name", name]
    if parts:
        arguments += ["--parts", *parts]
    return main(arguments), out


def evaluate(tmp_path: Path, notes: Path, predictions: Path, run: str) -> dict[str, Any]:
    out_dir = tmp_path / "evaluate" / run
    status = main(
        [
            "evaluate-ner",
            "--gold",
            str(notes),
            "--predictions",
            str(predictions),
            "--run",
            run,
            "--out-dir",
            str(out_dir),
            "--resamples",
            "200",
        ]
    )
    assert status == 0
    result: dict[str, Any] = json.loads((out_dir / "metrics.json").read_text())
    return result


# ---------------------------------------------------------------- reading


def test_the_reader_maps_ids_and_sorts_spans(tmp_path: Path) -> None:
    records = read_anchor(write_lines(tmp_path / "a.jsonl", good_lines()))
    assert list(records) == ["7-1", "7-2", "8-1", "9-1"]
    first = records["7-1"]
    assert (first.line, first.patient_id) == (1, "7")
    assert first.spans == tuple(sorted(first.spans))
    assert [s.label for s in first.spans] == ["DOCTOR", NAME]
    assert records["7-2"].patient_id == "7"


def test_blank_lines_are_skipped_and_lines_keep_their_numbers(tmp_path: Path) -> None:
    lines: list[Any] = good_lines()
    lines.insert(1, "")
    records = read_anchor(write_lines(tmp_path / "a.jsonl", lines))
    assert records["7-2"].line == 3


def test_the_stage_writes_the_scored_parts_in_predict_ners_schema(
    tmp_path: Path, notes_file: Path
) -> None:
    anchor = write_lines(tmp_path / "deidpl.jsonl", good_lines())
    status, out = score(tmp_path, notes_file, anchor, "holdout", name="deidpl")
    assert status == 0
    assert pq.read_schema(out).names == NOTES_SCHEMA.names
    predicted = read_notes(out)
    gold = {note.note_id: note for note in gold_notes()}
    # the holdout notes in the table's order, with their own text, ids, source and split
    assert [n.note_id for n in predicted] == ["7-1", "7-2", "8-1"]
    for note in predicted:
        assert (note.text, note.patient_id, note.source, note.split) == (
            gold[note.note_id].text,
            gold[note.note_id].patient_id,
            "unit",
            "holdout",
        )
    # NAME took the label of the gold name it covers
    assert predicted[0].spans == (
        span(TEXT_A, "Quill", "DOCTOR"),
        span(TEXT_A, "Vera Moss", "PATIENT"),
    )
    _, provenance = read_parquet_with_provenance(out)
    assert provenance["step"] == "score-anchor"
    assert provenance["params"]["parts"] == ["holdout"]
    assert set(provenance["inputs"]) == {"anchor", "notes"}
    summary = json.loads(out.with_suffix(".summary.json").read_text())["summary"]
    assert summary["lines"] == 4
    assert (summary["notes"], summary["notes_not_scored"]) == (3, 1)
    assert summary["predicted_spans"] == 4
    assert summary["name_spans"] == 2
    assert summary["name_resolved_as"] == {"PATIENT": 2}
    assert summary["predicted_by_label"] == {"DOCTOR": 1, "PATIENT": 2, "PHONE": 1}


def test_every_note_is_written_without_parts(tmp_path: Path, notes_file: Path) -> None:
    anchor = write_lines(tmp_path / "a.jsonl", good_lines())
    status, out = score(tmp_path, notes_file, anchor)
    assert status == 0
    assert [n.note_id for n in read_notes(out)] == ["7-1", "7-2", "8-1", "9-1"]


def test_parts_with_no_note_are_refused(
    tmp_path: Path, notes_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    anchor = write_lines(tmp_path / "a.jsonl", good_lines())
    status, out = score(tmp_path, notes_file, anchor, "seed")
    assert status == 2
    assert "no notes in parts ['seed']" in capsys.readouterr().err
    assert not out.parent.exists()


# ---------------------------------------------------------------- refusals


def _with(index: int, **changes: Any) -> list[Any]:
    lines: list[Any] = good_lines()
    lines[index] = {**lines[index], **changes}
    return lines


def _without(index: int, key: str) -> list[Any]:
    lines: list[Any] = good_lines()
    lines[index] = {k: v for k, v in lines[index].items() if k != key}
    return lines


def _spans(index: int, *spans: Any) -> list[Any]:
    return _with(index, spans=list(spans))


QUILL_A = raw(TEXT_A, "Quill", "DOCTOR")
BAD_INPUTS: dict[str, tuple[list[Any], str, str]] = {
    # name: (lines, the record named, the problem named)
    "bad JSON": (
        [*good_lines()[:2], '{"patient_id": "8", "note_id": "1", "spans": [}'],
        "line 3",
        "invalid JSON",
    ),
    "not an object": (["[1, 2]"], "line 1", "a line is a JSON array, expected an object"),
    "missing patient_id": (_without(1, "patient_id"), "line 2", "missing key 'patient_id'"),
    "missing note_id": (_without(1, "note_id"), "line 2", "missing key 'note_id'"),
    "missing spans": (_without(2, "spans"), "line 3 (note '8-1')", "missing key 'spans'"),
    "spans not a list": (_with(2, spans={}), "line 3 (note '8-1')", "spans must be a list"),
    "id of another type": (
        _with(0, note_id=1.5),
        "line 1",
        "note_id must be a string or an integer",
    ),
    "blank id": (_with(0, note_id=" "), "line 1", "note_id is blank"),
    "span not an object": (_spans(0, [1, 2]), "line 1 (note '7-1')", "span 1 is a JSON array"),
    "missing span key": (
        _spans(0, {"start": 1, "end": 3}),
        "line 1 (note '7-1')",
        "span 1: missing key 'label'",
    ),
    "offset not an integer": (
        _spans(0, {**QUILL_A, "end": "14"}),
        "line 1 (note '7-1')",
        "span 1: end must be an integer, got a JSON string",
    ),
    "unknown label": (
        _spans(0, QUILL_A, {**QUILL_A, "start": 0, "end": 4, "label": "HOSPITAL_NAME"}),
        "line 1 (note '7-1')",
        "span 2 (0-4) has unknown label 'HOSPITAL_NAME'",
    ),
    "offsets out of range": (
        _spans(2, {"start": 20, "end": 99, "label": "DATE"}),
        "line 3 (note '8-1')",
        f"span 20-99 (DATE) lies outside the text of length {len(TEXT_C)}",
    ),
    "negative offset": (
        _spans(2, {"start": -1, "end": 2, "label": "DATE"}),
        "line 3 (note '8-1')",
        "lies outside the text",
    ),
    "empty span": (
        _spans(2, {"start": 4, "end": 4, "label": "DATE"}),
        "line 3 (note '8-1')",
        "span 4-4 (DATE) is empty",
    ),
    "overlapping spans": (
        _spans(0, QUILL_A, {**QUILL_A, "start": QUILL_A["start"] + 2, "end": QUILL_A["end"] + 3}),
        "line 1 (note '7-1')",
        "spans overlap",
    ),
    "two lines for one note": (
        [*good_lines(), good_lines()[2]],
        "line 5 (note '8-1')",
        "a second line for the note, first at line 3",
    ),
    "note id not in the corpus": (
        _with(2, note_id="404"),
        "line 3 (note '8-404')",
        "note id not in the notes table",
    ),
    "a scored note without a line": (
        good_lines()[:2] + good_lines()[3:],
        "",
        "no line for 1 note(s) of ['holdout']; first: ['8-1']",
    ),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_is_refused_naming_file_line_and_problem(
    case: str, tmp_path: Path, notes_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines, record, problem = BAD_INPUTS[case]
    anchor = write_lines(tmp_path / "anchor.jsonl", lines)
    status, out = score(tmp_path, notes_file, anchor, "holdout")
    assert status == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if " ERROR " in line]
    assert len(errors) == 1
    message = errors[0].split(" ERROR synthdeid: ", 1)[1]
    assert message.startswith(f"{anchor}: {record}" if record else f"{anchor}: ")
    assert problem in message
    # never the text of a note
    for note in gold_notes():
        for gold in note.spans:
            assert gold.surface(note.text) not in message
        assert note.text[:12] not in message
    # nothing written, no temporary file left
    assert not out.parent.exists() or list(out.parent.iterdir()) == []
    assert not out.exists() and not out.with_suffix(".summary.json").exists()


def test_a_patient_id_other_than_the_tables_is_refused(tmp_path: Path) -> None:
    notes = tmp_path / "notes.parquet"
    # a table whose note "7-1" belongs to patient "p7" (not the PhysioNet layout)
    write_notes([Note("7-1", "p7", TEXT_C, (), "unit", "holdout")], notes)
    anchor = write_lines(tmp_path / "a.jsonl", [{"patient_id": "7", "note_id": "1", "spans": []}])
    status, out = score(tmp_path, notes, anchor)
    assert status == 2
    assert not out.exists()


def test_read_anchor_raises_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"a\.jsonl: line 1: invalid JSON"):
        read_anchor(write_lines(tmp_path / "a.jsonl", ["{"]))
    with pytest.raises(InputError, match="file not found"):
        read_anchor(tmp_path / "missing.jsonl")


# ---------------------------------------------------------------- NAME


def test_name_takes_the_label_of_the_gold_name_it_overlaps_most() -> None:
    text = "Dr Ann Lee saw Bo Ek on 1/2."
    doctor, patient = span(text, "Ann Lee", "DOCTOR"), span(text, "Bo Ek", "PATIENT")
    date = span(text, "1/2", "DATE")
    gold = [doctor, patient, date]
    spans, counts = resolve_names(
        [
            span(text, "Lee", NAME),  # inside the doctor
            Span(patient.start - 3, patient.end, NAME),  # "aw Bo Ek": the patient
            Span(doctor.end - 1, patient.start + 4, NAME),  # "e saw Bo E": more patient
            span(text, "1/2", NAME),  # a name on a date: stays NAME
            span(text, "on", NAME),  # nothing: stays NAME
            span(text, "Dr", "DOCTOR"),  # labelled: kept as it is
        ],
        gold,
    )
    assert counts == {"DOCTOR": 1, "PATIENT": 2, NAME: 2}
    labels = {s.surface(text): s.label for s in spans}
    assert labels == {
        "Lee": "DOCTOR",
        "aw Bo Ek": "PATIENT",
        "e saw Bo E": "PATIENT",
        "1/2": NAME,
        "on": NAME,
        "Dr": "DOCTOR",
    }
    # a tie goes to the earlier gold span
    tied, _ = resolve_names([Span(doctor.end - 2, patient.start + 2, NAME)], [patient, doctor])
    assert tied[0].label == "DOCTOR"


def test_name_counts_as_found_everywhere_and_unresolved_name_as_a_wrong_label() -> None:
    text = "Vera Moss on 3/14."
    gold = [
        Note(
            "n",
            "p",
            text,
            (span(text, "Vera Moss", "PATIENT"), span(text, "3/14", "DATE")),
            "u",
            "holdout",
        )
    ]
    found = {
        "n": resolve_names(
            [span(text, "Vera Moss", NAME), span(text, "3/14", "DATE")], gold[0].spans
        )[0]
    }
    h = headline_metrics(gold, found)
    assert h["leakage_overlap_all"] == 0.0 and h["leakage_detection_all"] == 0.0
    assert h["span_overlap_recall"] == 1.0 and h["span_exact_f1"] == 1.0
    # a NAME span on a date: it protects the date (label-agnostic) but matches nothing
    on_date = {
        "n": resolve_names(
            [span(text, "Vera Moss", NAME), span(text, "3/14", NAME)], gold[0].spans
        )[0]
    }
    h = headline_metrics(gold, on_date)
    assert h["detection_recall"] == 1.0 and h["leakage_detection_all"] == 0.0
    assert h["leakage_overlap_all"] == 1.0
    assert h["span_overlap_recall"] == 0.5 and h["span_overlap_precision"] == 0.5


# ---------------------------------------------------------------- scored as a run


def test_the_scored_anchor_has_the_hand_computed_figures(tmp_path: Path, notes_file: Path) -> None:
    anchor = write_lines(tmp_path / "a.jsonl", good_lines())
    status, out = score(tmp_path, notes_file, anchor, "holdout")
    assert status == 0
    metrics = evaluate(tmp_path, notes_file, out, "deidpl")
    h = {name: value["estimate"] for name, value in metrics["headline"].items()}
    # 3 holdout notes, 5 gold spans; only the date of 7-1 is missed
    assert metrics["counts"]["n_notes"] == 3 and metrics["counts"]["n_gold_spans"] == 5
    assert h["leakage_detection_all"] == pytest.approx(1 / 3)
    assert h["leakage_overlap_all"] == pytest.approx(1 / 3)  # the NAMEs count as PATIENT
    assert h["leakage_detection_phi"] == pytest.approx(1 / 2)
    assert h["detection_recall"] == pytest.approx(4 / 5)
    assert h["span_overlap_recall"] == pytest.approx(4 / 5)
    assert h["detection_precision"] == 1.0 and h["span_exact_precision"] == 1.0
    patient = metrics["per_label"]["PATIENT"]
    assert patient["overlap_recall"]["estimate"] == 1.0


def test_compare_ner_lists_the_anchor_beside_a_run(tmp_path: Path, notes_file: Path) -> None:
    anchor = write_lines(tmp_path / "a.jsonl", good_lines())
    _, anchor_predictions = score(tmp_path, notes_file, anchor, "holdout", name="deidpl")
    # a "model" that found every gold span of the holdout
    model_predictions = tmp_path / "model.parquet"
    write_notes([n for n in gold_notes() if n.split == "holdout"], model_predictions)
    folders = {}
    for run, predictions in (("model", model_predictions), ("deidpl", anchor_predictions)):
        evaluate(tmp_path, notes_file, predictions, run)
        folders[run] = tmp_path / "evaluate" / run
    out_dir = tmp_path / "compare"
    status = main(
        [
            "compare-ner",
            *(f"--run={run}={folder}" for run, folder in folders.items()),
            "--reference",
            "model",
            "--out-dir",
            str(out_dir),
            "--resamples",
            "200",
        ]
    )
    assert status == 0
    with (out_dir / "runs.csv").open() as handle:
        rows = {row["run"]: row for row in csv.DictReader(handle)}
    assert set(rows) == {"model", "deidpl"}
    assert float(rows["deidpl"]["leakage_detection_all"]) == pytest.approx(1 / 3)
    assert float(rows["model"]["leakage_detection_all"]) == 0.0
    with (out_dir / "paired_tests.csv").open() as handle:
        tested = [row for row in csv.DictReader(handle)]
    assert {row["run"] for row in tested} == {"deidpl"}
    assert (out_dir / "runs.png").is_file()


# ---------------------------------------------------------------- deid.pl on PhysioNet

ANCHORS = Path(__file__).resolve().parents[2] / "shared" / "anchors"


@pytest.mark.parametrize(
    ("name", "recall", "precision", "leaked_notes"),
    [("deidpl-dev", 0.964, 0.753, 29), ("deidpl-nosite-dev", 0.880, 0.741, 80)],
)
def test_deidpl_on_every_physionet_note_as_its_readme_says(
    name: str,
    recall: float,
    precision: float,
    leaked_notes: int,
    physionet_ingest: Any,
    tmp_path: Path,
) -> None:
    anchor = ANCHORS / f"{name}.jsonl"
    if not anchor.is_file():
        pytest.skip(f"{anchor} is absent")
    notes = tmp_path / "notes.parquet"
    write_notes(physionet_ingest.notes, notes)
    status, out = score(tmp_path, notes, anchor, name=name)
    assert status == 0
    gold = read_notes(notes)
    predicted = {note.note_id: note.spans for note in read_notes(out)}
    table = count_table(gold, predicted)
    h = table_headline(table)
    assert h["n_notes"] == 1631
    # any-overlap recall and precision, as the anchors' README computes them
    assert math.isclose(h["detection_recall"], recall, abs_tol=0.001)
    assert math.isclose(h["detection_precision"], precision, abs_tol=0.001)
    assert int(table.column("ALL.leak_detection").sum()) == leaked_notes
