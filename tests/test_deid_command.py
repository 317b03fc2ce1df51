"""``synthdeid deid``: one command from a trained model and plain notes to de-identified notes.

Every note here is made up (names, dates, wards). One small trained model
(:func:`ner_helpers.tiny_tagger`) serves every test; its operating point is
set to ``O`` threshold 0.999 so that it surely predicts spans to check.
"""

from __future__ import annotations

import csv
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch

from ner_helpers import tiny_tagger
from synthdeid.cli import main
from synthdeid.errors import ConfigError, InputError
from synthdeid.ner.deid_outputs import SPANS_SCHEMA
from synthdeid.ner.model import NER_CONFIG_FILE
from synthdeid.ner.model_card import CARD_FILE
from synthdeid.notes import Note, Span, read_notes, splice, write_notes
from synthdeid.readers.plain import PlainNotes, TableOptions, plan_inputs
from synthdeid.surrogate.keying import DEMO_KEY_FILE, SECRET_VARIABLE, SurrogateKey

MODEL_THRESHOLD = 0.999
# made-up notes: every name, date and ward is invented
NOTES = {
    "a.txt": "Seen by Dr. Quillfeather on 03/14/2031.\nRecheck on Friday, stable.\n",
    "b.txt": "Dr. Abernathy-Voss phoned Mrs. Lindqvist about the 07/02/2031 visit.",
    "ward/c.txt": "Brightwater Clinic, bed 12. Reviewed by Dr. Castellano today.",
}
MADE_UP = ("Quillfeather", "Abernathy-Voss", "Lindqvist", "Brightwater", "Castellano", "03/14/2031")
PHI_BYTES = b"Dr. Oyelaran"


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    """Restore torch's thread count after the command sets it (--threads 1)."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny trained tagger, its validated operating point set to MODEL_THRESHOLD."""
    directory = tiny_tagger(tmp_path_factory.mktemp("deid_model"))
    settings_file = directory / NER_CONFIG_FILE
    settings = json.loads(settings_file.read_text())
    settings["o_threshold"] = MODEL_THRESHOLD
    settings_file.write_text(json.dumps(settings, indent=2) + "\n")
    return directory


def notes_folder(root: Path) -> Path:
    folder = root / "notes"
    for name, text in NOTES.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def notes_table(path: Path) -> Path:
    """NOTES as a notes table, each note its own patient (as deid reads them)."""
    names = [name.removesuffix(".txt") for name in NOTES]
    write_notes(
        [Note(n, n, text, (), "made-up") for n, text in zip(names, NOTES.values(), strict=True)],
        path,
    )
    return path


def deid(model: Path, *args: str | Path) -> int:
    return main(["deid", "--model", str(model), *map(str, args), "--threads", "1", "--no-progress"])


def read_spans(out: Path) -> list[dict]:
    """spans.jsonl, checked against spans.parquet (same rows, the explicit schema)."""
    lines = [json.loads(line) for line in (out / "spans.jsonl").read_text().splitlines()]
    table = pq.read_table(out / "spans.parquet")
    assert table.schema.remove_metadata() == SPANS_SCHEMA
    assert table.to_pylist() == lines
    for row in lines:
        assert set(row) == {"note_id", "start", "end", "label"}  # never the text
    return lines


def spans_by_note(rows: list[dict]) -> dict[str, list[Span]]:
    found: dict[str, list[Span]] = {}
    for row in rows:
        found.setdefault(row["note_id"], []).append(Span(row["start"], row["end"], row["label"]))
    return found


def redacted(text: str, spans: list[Span]) -> str:
    return splice(text, spans, [f"[{span.label}]" for span in spans])[0]


def assert_no_phi(log: str, texts: dict[str, str], rows: list[dict]) -> None:
    """Neither a made-up identifier nor the text of a predicted span is in ``log``."""
    for word in MADE_UP:
        assert word not in log
    for row in rows:
        surface = texts[row["note_id"]][row["start"] : row["end"]].strip()
        if len(surface) >= 6:  # shorter ones may be words a log line says
            assert surface not in log, row


def summary_of(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


# ---------------------------------------------------------------- the three kinds of input


@pytest.mark.slow
def test_a_folder_of_notes_is_redacted_where_the_spans_say(
    model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, out, log = notes_folder(tmp_path), tmp_path / "deid", tmp_path / "deid.log"
    # the progress bar on: it counts notes, never shows them
    argv = ["--log", str(log), "deid", "--model", str(model), str(folder), "--out", str(out)]
    code = main([*argv, "--threads", "1"])
    assert code == 0
    written = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert written == sorted([*NOTES, "spans.jsonl", "spans.parquet", "summary.json"])
    rows = read_spans(out)
    assert rows, "the model at its operating point predicts spans here"
    texts = {name.removesuffix(".txt"): text for name, text in NOTES.items()}
    spans = spans_by_note(rows)
    assert set(spans) <= set(texts)
    for name, text in NOTES.items():
        note_spans = spans.get(name.removesuffix(".txt"), [])
        assert (out / name).read_text(encoding="utf-8") == redacted(text, note_spans)
    summary = summary_of(out)
    assert summary["summary"]["notes"] == 3
    assert summary["summary"]["predicted_spans"] == len(rows)
    # the operating point the model chose on validation notes is the one applied
    assert summary["provenance"]["params"]["o_threshold"] == MODEL_THRESHOLD
    assert_no_phi(capsys.readouterr().err + log.read_text(), texts, rows)


@pytest.mark.slow
def test_deid_predicts_the_spans_predict_ner_predicts(model: Path, tmp_path: Path) -> None:
    folder, out = notes_folder(tmp_path), tmp_path / "deid"
    assert deid(model, folder, "--out", out) == 0
    table = notes_table(tmp_path / "notes.parquet")
    predictions = tmp_path / "predictions.parquet"
    argv = ["predict-ner", "--model", str(model), "--notes", str(table), "--out", str(predictions)]
    assert main([*argv, "--threads", "1"]) == 0
    expected = {note.note_id: list(note.spans) for note in read_notes(predictions) if note.spans}
    assert spans_by_note(read_spans(out)) == expected


@pytest.mark.slow
def test_an_o_threshold_given_overrides_the_models(model: Path, tmp_path: Path) -> None:
    folder, out = notes_folder(tmp_path), tmp_path / "deid"
    # P(O) is never below 0: no token is PHI, every note is copied as it was
    assert deid(model, folder, "--out", out, "--o-threshold", "0") == 0
    assert read_spans(out) == []
    for name, text in NOTES.items():
        assert (out / name).read_text(encoding="utf-8") == text
    assert summary_of(out)["provenance"]["params"]["o_threshold"] == 0.0


@pytest.mark.slow
def test_a_csv_file_is_mirrored_with_its_notes_replaced(model: Path, tmp_path: Path) -> None:
    rows = [
        ["id", "text", "ward"],
        ["r1", "Seen by Dr. Quillfeather on 03/14/2031,\nrecheck Friday.", "east"],
        ["r2", "Dr. Abernathy-Voss reviewed the chart.", "west"],
        ["r3", "", "north"],
    ]
    source = tmp_path / "visits.csv"
    with source.open("w", encoding="utf-8", newline="") as handle:
        csv.writer(handle).writerows(rows)
    out = tmp_path / "deid"
    assert deid(model, source, "--text-column", "text", "--id-column", "id", "--out", out) == 0
    spans = spans_by_note(read_spans(out))
    assert spans and set(spans) <= {"r1", "r2"}
    with (out / "visits.csv").open(encoding="utf-8", newline="") as handle:
        mirrored = list(csv.reader(handle))
    assert mirrored[0] == rows[0]
    for original, copy in zip(rows[1:], mirrored[1:], strict=True):
        note_id, text, ward = original
        assert copy == [note_id, redacted(text, spans.get(note_id, [])), ward]


@pytest.mark.slow
def test_a_jsonl_file_is_mirrored_and_its_notes_named_by_line(model: Path, tmp_path: Path) -> None:
    records = [
        {"visit": 41, "body": "Dr. Castellano saw Mrs. Lindqvist.", "ward": "east"},
        {"visit": "v-42", "body": "Nothing to add."},
    ]
    source = tmp_path / "visits.jsonl"
    source.write_text(json.dumps(records[0]) + "\n\n" + json.dumps(records[1]) + "\n")
    out = tmp_path / "by_id"
    assert deid(model, source, "--text-field", "body", "--id-field", "visit", "--out", out) == 0
    spans = spans_by_note(read_spans(out))
    assert set(spans) <= {"41", "v-42"} and spans
    lines = (out / "visits.jsonl").read_text().splitlines()
    for record, line in zip(records, lines, strict=True):
        expected = {**record, "body": redacted(record["body"], spans.get(str(record["visit"]), []))}
        assert json.loads(line) == expected
        assert list(json.loads(line)) == list(record)  # the keys in their order
    # without --id-field a note is named by its line (the blank line 2 counts)
    out = tmp_path / "by_line"
    assert deid(model, source, "--text-field", "body", "--out", out) == 0
    assert set(spans_by_note(read_spans(out))) <= {"1", "3"}


# ---------------------------------------------------------------- surrogates


def made_up_key(folder: Path) -> tuple[Path, str]:
    secret = hashlib.sha256(b"made-up deid test secret").hexdigest()
    key_file = folder / "made-up.key"
    key_file.write_text(f"# a made-up test secret\n{secret}\n")
    return key_file, secret


@pytest.mark.slow
def test_surrogate_mode_writes_the_keyed_surrogates_predict_ner_writes(
    model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(SECRET_VARIABLE, raising=False)
    folder, (key_file, secret) = notes_folder(tmp_path), made_up_key(tmp_path)
    out = tmp_path / "deid"
    assert deid(model, folder, "--out", out, "--mode", "surrogate", "--key-file", key_file) == 0
    table, deidentified = notes_table(tmp_path / "notes.parquet"), tmp_path / "surrogates.parquet"
    argv = ["predict-ner", "--model", str(model), "--notes", str(table)]
    argv += ["--out", str(tmp_path / "predictions.parquet"), "--mode", "surrogate"]
    argv += ["--key-file", str(key_file), "--out-deidentified", str(deidentified)]
    assert main([*argv, "--threads", "1"]) == 0
    expected = {note.note_id: note.text for note in read_notes(deidentified)}
    spans = spans_by_note(read_spans(out))
    assert spans
    for name, text in NOTES.items():
        output = (out / name).read_text(encoding="utf-8")
        assert output == expected[name.removesuffix(".txt")]
        assert "[" not in output  # no redaction tag
        if name.removesuffix(".txt") in spans:
            assert output != text
    # no file of the passes is left; the key is recorded by its fingerprint only
    written = sorted(p.relative_to(out).as_posix() for p in out.rglob("*"))
    assert written == sorted([*NOTES, "ward", "spans.jsonl", "spans.parquet", "summary.json"])
    params = summary_of(out)["provenance"]["params"]
    assert params["key_fingerprint"] == SurrogateKey(secret.encode()).fingerprint()
    assert secret not in (out / "summary.json").read_text()


@pytest.mark.slow
def test_surrogate_mode_refuses_the_public_demo_key(
    model: Path, tmp_path: Path, repo: Path, monkeypatch, capsys
) -> None:
    monkeypatch.delenv(SECRET_VARIABLE, raising=False)
    out = tmp_path / "deid"
    key = repo / DEMO_KEY_FILE
    code = deid(
        model, notes_folder(tmp_path), "--out", out, "--mode", "surrogate", "--key-file", key
    )
    assert code == 2
    assert "public demo key" in capsys.readouterr().err
    assert not out.exists()


# ---------------------------------------------------------------- refusals


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if " ERROR " in line]


def write_bad_input(root: Path, case: str) -> tuple[list[str], Path]:
    """The arguments of a bad input and the file the error must name."""
    phi = PHI_BYTES.decode()
    if case == "missing column":
        path = root / "visits.csv"
        path.write_text(f"id,note\n1,{phi} called\n", encoding="utf-8")
        return [str(path), "--text-column", "text"], path
    if case == "not utf-8":
        folder = notes_folder(root)
        path = folder / "latin1.txt"
        path.write_bytes(PHI_BYTES + b" \xe9t\xe9 vu")
        return [str(folder)], path
    if case == "no notes":
        path = root / "visits.csv"
        path.write_text("id,text\n", encoding="utf-8")
        return [str(path), "--text-column", "text"], path
    if case == "empty folder":
        path = root / "empty"
        path.mkdir()
        return [str(path)], path
    if case == "no text field":
        path = root / "visits.jsonl"
        path.write_text(json.dumps({"text": "ok"}) + "\n" + json.dumps({"body": phi}) + "\n")
        return [str(path)], path
    if case == "duplicate id":
        path = root / "visits.csv"
        path.write_text(f"id,text\n7,{phi} called\n7,{phi} again\n", encoding="utf-8")
        return [str(path), "--text-column", "text", "--id-column", "id"], path
    raise AssertionError(case)


BAD_INPUTS = ("missing column", "not utf-8", "no notes", "empty folder", "no text field")


@pytest.mark.slow
@pytest.mark.parametrize("case", [*BAD_INPUTS, "duplicate id"])
def test_bad_input_is_refused_in_one_line_naming_the_file(
    case: str, model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    arguments, named = write_bad_input(tmp_path, case)
    out = tmp_path / "deid"
    assert deid(model, *arguments, "--out", out) == 2
    err = capsys.readouterr().err
    errors = error_lines(err)
    assert len(errors) == 1 and str(named) in errors[0], err
    assert "\n" not in errors[0]
    assert PHI_BYTES.decode() not in err and "Quillfeather" not in err
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".deid")]  # no staging left


@pytest.mark.slow
@pytest.mark.parametrize("settings", [None, "{not json"])
def test_a_folder_that_is_no_model_is_refused(
    settings: str | None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    not_a_model = tmp_path / "not_a_model"
    not_a_model.mkdir()
    if settings is not None:
        (not_a_model / NER_CONFIG_FILE).write_text(settings)
    out = tmp_path / "deid"
    assert deid(not_a_model, notes_folder(tmp_path), "--out", out) == 2
    errors = error_lines(capsys.readouterr().err)
    assert len(errors) == 1 and str(not_a_model) in errors[0]
    assert not out.exists()


@pytest.mark.slow
def test_a_failed_run_leaves_the_earlier_output_as_it_was(model: Path, tmp_path: Path) -> None:
    out = tmp_path / "deid"
    assert deid(model, notes_folder(tmp_path), "--out", out) == 0
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    arguments, _ = write_bad_input(tmp_path / "bad", "not utf-8")
    assert deid(model, *arguments, "--out", out) == 2
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def test_an_output_folder_holding_other_files_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "deid"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    code = main(["deid", "--model", str(tmp_path), str(notes_folder(tmp_path)), "--out", str(out)])
    assert code == 2
    assert [p.name for p in out.iterdir()] == ["mine.txt"]


def test_an_output_folder_inside_an_input_folder_is_refused(tmp_path: Path) -> None:
    folder = notes_folder(tmp_path)
    code = main(["deid", "--model", str(tmp_path), str(folder), "--out", str(folder / "deid")])
    assert code == 2
    assert not (folder / "deid").exists()


# ---------------------------------------------------------------- reading plain notes


def test_text_files_are_named_by_their_path_in_the_folder(tmp_path: Path) -> None:
    folder = notes_folder(tmp_path)
    (folder / ".hidden.txt").write_text("skipped")
    (folder / "readme.md").write_text("not a note")
    notes = list(PlainNotes(plan_inputs([folder])))
    assert [plain.note.note_id for plain in notes] == ["a", "b", "ward/c"]
    assert [plain.record for plain in notes] == ["a.txt", "b.txt", "ward/c.txt"]
    assert notes[0].note.text == NOTES["a.txt"]


def test_a_csv_field_keeps_its_newlines_and_a_byte_order_mark_is_dropped(tmp_path: Path) -> None:
    path = tmp_path / "visits.csv"
    path.write_bytes('\ufeffid,text\r\n1,"two\r\nlines, one note"\r\n\r\n2,plain\r\n'.encode())
    notes = list(PlainNotes(plan_inputs([path], TableOptions(text_column="text"))))
    assert [plain.note.text for plain in notes] == ["two\r\nlines, one note", "plain"]
    assert [plain.note.note_id for plain in notes] == ["1", "2"]  # row numbers


def test_a_csv_row_of_another_width_is_refused_by_row_and_line(tmp_path: Path) -> None:
    path = tmp_path / "visits.csv"
    path.write_text('id,text\n1,"Dr. Oyelaran"\n2,"two\nlines",extra\n')
    plain = PlainNotes(plan_inputs([path], TableOptions(text_column="text")))
    with pytest.raises(InputError, match=r"row 2 \(line 4\): 3 fields, the header has 2") as info:
        list(plain)
    assert "Oyelaran" not in str(info.value)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (TableOptions(text_column="text"), "--text-column does not apply to text files"),
        (TableOptions(id_field="id"), "--id-field does not apply to text files"),
    ],
)
def test_options_of_another_kind_of_input_are_refused(
    tmp_path: Path, options: TableOptions, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        plan_inputs([notes_folder(tmp_path)], options)


def test_a_table_goes_alone_and_a_name_twice_is_refused(tmp_path: Path) -> None:
    folder = notes_folder(tmp_path)
    table = tmp_path / "visits.jsonl"
    table.write_text(json.dumps({"text": "ok"}) + "\n")
    with pytest.raises(ConfigError, match="de-identified alone"):
        plan_inputs([folder, table])
    other = tmp_path / "other"
    other.mkdir()
    (other / "a.txt").write_text("made up")
    with pytest.raises(InputError, match=r"its copy would be named 'a\.txt'"):
        plan_inputs([folder, other / "a.txt"])


# ---------------------------------------------------------------- the model card


@pytest.mark.slow
def test_the_model_card_says_how_to_deidentify_and_why_not_the_plain_pipeline(
    model: Path,
) -> None:
    card = (model / CARD_FILE).read_text()
    assert "## De-identify your own notes" in card
    assert "synthdeid deid --model <dir> notes/ --out deid/" in card
    assert 'pipeline("token-classification")` ignores the O threshold' in card
