"""Tests for the corpus readers (physionet, brat, jsonl, i2b2) on tiny invented corpora."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import quoteattr

import pytest

from synthdeid.errors import InputError
from synthdeid.labels import LabelMap
from synthdeid.notes import UNSPLIT, Note, Span
from synthdeid.readers import CorpusReader, ReaderOptions, get_reader
from synthdeid.readers.physionet import iter_records

TEXT = "Seen by Dr. Alvarez on 3/14.\nCall 555-0100.\n"

# the corpora's own categories (PhysioNet style and i2b2 style) -> canonical labels
LABELS = LabelMap(
    {
        "HCPName": "DOCTOR",
        "PatientName": "PATIENT",
        "Date": "DATE",
        "Phone": "PHONE",
        "DOCTOR": "DOCTOR",
        "DATE": "DATE",
        "PHONE": "PHONE",
    }
)

# a gold span as a corpus states it: start, end, category, surface
Gold = tuple[int, int, str, str]


def gold(surface: str, category: str, text: str = TEXT) -> Gold:
    start = text.index(surface)
    return start, start + len(surface), category, surface


def span(surface: str, label: str, text: str = TEXT) -> Span:
    start = text.index(surface)
    return Span(start, start + len(surface), label)


def put(path: Path, content: str | bytes) -> Path:
    """Write exactly these bytes (no newline translation)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
    return path


def make_reader(fmt: str, **options: object) -> CorpusReader:
    return get_reader(fmt)(ReaderOptions(label_map=LABELS, source="unit", **options))


def read(fmt: str, path: Path, **options: object) -> tuple[CorpusReader, list[Note]]:
    reader = make_reader(fmt, **options)
    return reader, reader.read(path)


def read_error(fmt: str, path: Path, **options: object) -> InputError:
    with pytest.raises(InputError) as info:
        make_reader(fmt, **options).read(path)
    return info.value


def assert_error(err: InputError, path: Path, record: str | None, problem: str) -> None:
    """The message names the file, the record and the problem."""
    assert err.path == str(path)
    assert err.record == record
    assert problem in err.problem
    where = str(path) if record is None else f"{path}: {record}"
    assert str(err).startswith(f"{where}: ")
    assert problem in str(err)


# --- one note with given gold spans, written in each format -------------------------------


@dataclass(frozen=True)
class OneNote:
    corpus: Path  # what the reader is given
    text_file: Path  # the file holding the note text
    spans_file: Path  # the file holding the spans
    span_records: list[str]  # how errors name each span, in order
    note_record: str  # how errors name the note (overlaps)
    note_id: str


def one_physionet(folder: Path, text: str, spans: list[Gold]) -> OneNote:
    text_file = put(folder / "id.text", f"START_OF_RECORD=7||||1||||\n{text}||||END_OF_RECORD\n")
    lines = "".join(f"7 1 {s} {e} {c} {surface}\n" for s, e, c, surface in spans)
    spans_file = put(folder / "id-phi.phrase", lines)
    records = [f"line {i} (patient 7, note 1)" for i in range(1, len(spans) + 1)]
    return OneNote(folder, text_file, spans_file, records, "patient 7, note 1", "7-1")


def one_brat(folder: Path, text: str, spans: list[Gold]) -> OneNote:
    text_file = put(folder / "doc.txt", text)
    lines = "".join(
        f"T{i}\t{c} {s} {e}\t{surface}\n" for i, (s, e, c, surface) in enumerate(spans, start=1)
    )
    spans_file = put(folder / "doc.ann", lines)
    records = [f"line {i} (T{i})" for i in range(1, len(spans) + 1)]
    return OneNote(folder, text_file, spans_file, records, "document doc", "doc")


def one_jsonl(folder: Path, text: str, spans: list[Gold]) -> OneNote:
    obj = {
        "note_id": "n1",
        "patient_id": "p1",
        "text": text,
        "spans": [{"start": s, "end": e, "label": c, "text": t} for s, e, c, t in spans],
    }
    corpus = put(folder / "notes.jsonl", json.dumps(obj) + "\n")
    return OneNote(
        corpus, corpus, corpus, ["line 1 (note n1)"] * len(spans), "line 1 (note n1)", "n1"
    )


def i2b2_xml(text: str, tags: list[str]) -> str:
    return (
        '<?xml version="1.0" encoding="UTF-8" ?>\n<deIdi2b2>\n'
        f"<TEXT><![CDATA[{text}]]></TEXT>\n<TAGS>\n" + "".join(tags) + "</TAGS>\n</deIdi2b2>\n"
    )


def i2b2_tag(tag: str, number: int, gold_span: Gold) -> str:
    s, e, category, surface = gold_span
    return (
        f'<{tag} id="P{number}" start="{s}" end="{e}" text={quoteattr(surface)} '
        f'TYPE="{category}" comment="" />\n'
    )


def one_i2b2(folder: Path, text: str, spans: list[Gold]) -> OneNote:
    tags = [i2b2_tag("PHI", i, g) for i, g in enumerate(spans)]
    corpus = put(folder / "doc.xml", i2b2_xml(text, tags))
    records = [f"tag P{i} <PHI>" for i in range(len(spans))]
    return OneNote(folder, corpus, corpus, records, "note doc", "doc")


WRITERS: dict[str, Callable[[Path, str, list[Gold]], OneNote]] = {
    "physionet": one_physionet,
    "brat": one_brat,
    "jsonl": one_jsonl,
    "i2b2": one_i2b2,
}
FORMATS = list(WRITERS)


# --- good corpora -------------------------------------------------------------------------


def test_physionet_reads_records_and_phrases(tmp_path: Path) -> None:
    other = "Patient Jane Roe, seen 4/2.\n"
    put(
        tmp_path / "id.text",
        f"START_OF_RECORD=1||||1||||\n{TEXT}||||END_OF_RECORD\n"
        "START_OF_RECORD=1||||2||||\nNo PHI here.\n||||END_OF_RECORD\n"
        f"START_OF_RECORD=2||||1||||\n{other}||||END_OF_RECORD\n",
    )
    phrases = [
        ("1 1", gold("555-0100", "Phone")),
        ("1 1", gold("Alvarez", "HCPName")),
        ("2 1", gold("Jane Roe", "PatientName", other)),
        ("1 1", gold("3/14", "Date")),
        ("2 1", gold("4/2", "Date", other)),
    ]
    lines = [f"{ids} {s} {e} {c} {surface}" for ids, (s, e, c, surface) in phrases]
    put(tmp_path / "id-phi.phrase", "\n".join(lines[:2]) + "\n\n" + "\n".join(lines[2:]) + "\n")

    reader, notes = read("physionet", tmp_path)

    assert [(n.note_id, n.patient_id) for n in notes] == [("1-1", "1"), ("1-2", "1"), ("2-1", "2")]
    assert [n.text for n in notes] == [TEXT, "No PHI here.\n", other]
    assert notes[0].spans == (
        span("Alvarez", "DOCTOR"),
        span("3/14", "DATE"),
        span("555-0100", "PHONE"),
    )
    assert notes[1].spans == ()
    assert [s.surface(other) for s in notes[2].spans] == ["Jane Roe", "4/2"]
    assert [s.label for s in notes[2].spans] == ["PATIENT", "DATE"]
    assert {(n.source, n.split) for n in notes} == {("unit", UNSPLIT)}
    assert reader.surfaces_verified == 5


def test_brat_reads_discontinuous_annotations_and_skips_other_lines(tmp_path: Path) -> None:
    text = "Seen by Dr. Maria J. Alvarez on 3/14.\n"
    maria, alvarez = text.index("Maria"), text.index("Alvarez")
    date_start = text.index("3/14")
    put(tmp_path / "p01_a.txt", text)
    put(
        tmp_path / "p01_a.ann",
        f"T1\tHCPName {maria} {maria + 5};{alvarez} {alvarez + 7}\tMaria Alvarez\n"
        f"T2\tDate {date_start} {date_start + 4}\t3/14\n"
        "R1\tSameAs Arg1:T1 Arg2:T2\n"
        "A1\tUncertain T2\n"
        "#1\tAnnotatorNotes T1\tTitle left out\n",
    )
    put(tmp_path / "p01_b.txt", "Follow-up 4/2.\n")
    put(tmp_path / "p01_b.ann", "T1\tDate 10 13\t4/2\n")
    put(tmp_path / "p02_a.txt", "No PHI here.\n")
    put(tmp_path / "p02_a.ann", "")

    reader, notes = read("brat", tmp_path, patient_id_regex=r"^(p\d+)_")

    assert [(n.note_id, n.patient_id) for n in notes] == [
        ("p01_a", "p01"),
        ("p01_b", "p01"),
        ("p02_a", "p02"),
    ]
    assert notes[0].text == text
    assert notes[0].spans == (
        Span(maria, maria + 5, "DOCTOR"),
        Span(alvarez, alvarez + 7, "DOCTOR"),
        Span(date_start, date_start + 4, "DATE"),
    )
    assert [s.surface(text) for s in notes[0].spans] == ["Maria", "Alvarez", "3/14"]
    assert notes[1].spans == (Span(10, 13, "DATE"),)
    assert notes[2].spans == ()
    assert reader.surfaces_verified == 3  # one per annotation, not per fragment


def test_jsonl_reads_lines_and_names_notes_without_id_by_line(tmp_path: Path) -> None:
    alvarez, date = gold("Alvarez", "HCPName"), gold("3/14", "Date")
    first = {
        "note_id": "a1",
        "patient_id": "p9",
        "text": TEXT,
        "spans": [
            {"start": date[0], "end": date[1], "label": "Date"},  # no surface: not verified
            {"start": alvarez[0], "end": alvarez[1], "label": "HCPName", "text": "Alvarez"},
        ],
        "style": "ignored",
    }
    # U+2028 and U+0085 are legal unescaped inside a JSON string: not line breaks
    third = {"text": "Call\u2028555-0100\x85", "spans": [{"start": 5, "end": 13, "label": "Phone"}]}
    put(
        tmp_path / "notes.jsonl",
        json.dumps(first) + "\n\n" + json.dumps(third, ensure_ascii=False) + "\n",
    )

    reader, notes = read("jsonl", tmp_path / "notes.jsonl")

    assert [(n.note_id, n.patient_id) for n in notes] == [("a1", "p9"), ("3", "3")]
    assert notes[0].spans == (span("Alvarez", "DOCTOR"), span("3/14", "DATE"))
    assert notes[1].text == third["text"]
    assert notes[1].spans == (Span(5, 13, "PHONE"),)
    assert notes[1].spans[0].surface(notes[1].text) == "555-0100"
    assert reader.surfaces_verified == 1


def test_i2b2_reads_xml_files_and_groups_patients(tmp_path: Path) -> None:
    second = "Follow-up on 4/2 with Dr. Alvarez & team.\n"
    put(
        tmp_path / "110-01.xml",
        i2b2_xml(
            TEXT,
            [
                i2b2_tag("DATE", 0, gold("3/14", "DATE")),
                i2b2_tag("NAME", 1, gold("Alvarez", "DOCTOR")),
                i2b2_tag("CONTACT", 2, gold("555-0100", "PHONE")),
            ],
        ),
    )
    put(
        tmp_path / "110-02.xml",
        i2b2_xml(second, [i2b2_tag("DATE", 0, gold("4/2", "DATE", second))]),
    )
    put(tmp_path / "111-01.xml", i2b2_xml("No PHI here.\n", []))
    put(tmp_path / "notes.txt", "not part of the corpus")

    reader, notes = read("i2b2", tmp_path, patient_id_regex=r"^(\d+)-")

    assert [(n.note_id, n.patient_id) for n in notes] == [
        ("110-01", "110"),
        ("110-02", "110"),
        ("111-01", "111"),
    ]
    assert [n.text for n in notes] == [TEXT, second, "No PHI here.\n"]
    assert notes[0].spans == (
        span("Alvarez", "DOCTOR"),
        span("3/14", "DATE"),
        span("555-0100", "PHONE"),
    )
    assert notes[1].spans == (span("4/2", "DATE", second),)
    assert notes[2].spans == ()
    assert reader.surfaces_verified == 4


def test_i2b2_reads_a_single_file(tmp_path: Path) -> None:
    path = put(tmp_path / "110-01.xml", i2b2_xml(TEXT, [i2b2_tag("DATE", 0, gold("3/14", "DATE"))]))
    reader_cls = get_reader("i2b2")
    assert reader_cls.input_files(path) == [path]  # so the corpus digest covers it
    _, notes = read("i2b2", path)
    assert [(n.note_id, n.spans) for n in notes] == [("110-01", (span("3/14", "DATE"),))]


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_same_note_reads_the_same_in_every_format(tmp_path: Path, fmt: str) -> None:
    written = WRITERS[fmt](
        tmp_path / "corpus", TEXT, [gold("3/14", "Date"), gold("Dr. Alvarez", "HCPName")]
    )
    reader, notes = read(fmt, written.corpus)
    assert [(n.note_id, n.text) for n in notes] == [(written.note_id, TEXT)]
    assert notes[0].spans == (span("Dr. Alvarez", "DOCTOR"), span("3/14", "DATE"))
    assert reader.surfaces_verified == 2
    assert reader.merged_overlaps == []


# --- bad spans, in every format -----------------------------------------------------------

ALVAREZ = gold("Alvarez", "HCPName")

# (spans, index of the span the error names or None for the note, problem)
BAD_SPANS = {
    "offset out of range": ([ALVAREZ, (40, 99, "Phone", "0100.")], 1, "out of range"),
    "surface mismatch": ([(*ALVAREZ[:3], "Alvarex")], 0, "surface mismatch"),
    "unknown label": ([(*ALVAREZ[:2], "Nurse", "Alvarez")], 0, "unknown label 'Nurse'"),
    "empty span": ([(12, 12, "HCPName", "")], 0, "out of range"),
    "cross-label overlap": (
        [gold("Dr. Alvarez", "HCPName"), gold("Alvarez", "PatientName")],
        None,
        "spans overlap: 8-19 (DOCTOR) and 12-19 (PATIENT)",
    ),
    "same-label overlap": (
        [gold("Dr. Alvarez", "HCPName"), ALVAREZ],
        None,
        "spans overlap: 8-19 (DOCTOR) and 12-19 (DOCTOR)",
    ),
}


@pytest.mark.parametrize("case", list(BAD_SPANS))
@pytest.mark.parametrize("fmt", FORMATS)
def test_bad_span_is_an_error_naming_file_and_record(tmp_path: Path, fmt: str, case: str) -> None:
    spans, index, problem = BAD_SPANS[case]
    written = WRITERS[fmt](tmp_path / "corpus", TEXT, spans)
    record = written.note_record if index is None else written.span_records[index]
    assert_error(read_error(fmt, written.corpus), written.spans_file, record, problem)


@pytest.mark.parametrize("fmt", FORMATS)
def test_surface_mismatch_is_described_without_either_surface(tmp_path: Path, fmt: str) -> None:
    written = WRITERS[fmt](tmp_path / "corpus", TEXT, [(*ALVAREZ[:3], "Alvarex")])
    err = read_error(fmt, written.corpus)
    assert "surface mismatch at 12-19" in err.problem
    assert "(7 characters)" in err.problem and "differ from character 6" in err.problem
    assert "Alvare" not in str(err)


@pytest.mark.parametrize("fmt", FORMATS)
def test_merge_same_label_policy(tmp_path: Path, fmt: str) -> None:
    same = [gold("Dr. Alvarez", "HCPName"), ALVAREZ, gold("3/14", "Date")]
    written = WRITERS[fmt](tmp_path / "same", TEXT, same)

    reader, notes = read(fmt, written.corpus, overlaps="merge_same_label")

    assert notes[0].spans == (span("Dr. Alvarez", "DOCTOR"), span("3/14", "DATE"))
    assert reader.merged_overlaps == [
        f"{written.spans_file}: {written.note_record}: "
        "merged overlapping DOCTOR spans 8-19 and 12-19 into 8-19"
    ]
    assert reader.surfaces_verified == 3

    cross = [gold("Dr. Alvarez", "HCPName"), gold("Alvarez", "PatientName")]
    written = WRITERS[fmt](tmp_path / "cross", TEXT, cross)
    err = read_error(fmt, written.corpus, overlaps="merge_same_label")
    assert_error(err, written.spans_file, written.note_record, "spans overlap")


@pytest.mark.parametrize("fmt", FORMATS)
def test_undecodable_bytes_name_the_line(tmp_path: Path, fmt: str) -> None:
    written = WRITERS[fmt](tmp_path / "corpus", TEXT, [])
    raw = written.text_file.read_bytes()
    put(written.text_file, raw.replace(b"555", b"5\xff5"))
    line = raw[: raw.index(b"555")].count(b"\n") + 1

    err = read_error(fmt, written.corpus)

    assert err.path == str(written.text_file)
    assert err.record is not None and err.record.startswith(f"line {line}, byte ")
    assert "bytes that do not decode as 'utf-8' (invalid start byte)" in err.problem
    assert "xff" not in str(err)
    # the right encoding reads it
    _, notes = read(fmt, written.corpus, encoding="latin-1")
    assert "5\xff5" in notes[0].text


def test_patient_id_regex_that_does_not_match_names_the_note(tmp_path: Path) -> None:
    written = one_brat(tmp_path, TEXT, [])
    err = read_error("brat", written.corpus, patient_id_regex=r"^(p\d+)_")
    assert_error(err, written.text_file, "note 'doc'", "does not match corpus.patient_id_regex")


# --- PhysioNet record and phrase structure ------------------------------------------------

GOOD_RECORD = "START_OF_RECORD=1||||1||||\nSeen by Dr. Alvarez.\n||||END_OF_RECORD\n"


@pytest.mark.parametrize(
    ("content", "record", "problem"),
    [
        pytest.param(
            "START_OF_RECORD=1||||1||||\nSeen by Dr. Alvarez.\n",
            "line 1 (patient 1, note 1)",
            "no ||||END_OF_RECORD marker",
            id="header without end marker",
        ),
        pytest.param(
            "START_OF_RECORD=1||||1||||\nSeen by Dr. Alvarez.\n"
            "START_OF_RECORD=1||||2||||\nCall 555-0100.\n||||END_OF_RECORD\n",
            "line 1 (patient 1, note 1)",
            "no ||||END_OF_RECORD marker",
            id="header without end marker before the next record",
        ),
        pytest.param(
            GOOD_RECORD + "||||END_OF_RECORD\n",
            "line 4",
            "end marker without a start outside a record",
            id="end marker without header",
        ),
        pytest.param(
            GOOD_RECORD + "Call 555-0100.\n" + GOOD_RECORD.replace("||||1||||", "||||2||||"),
            "line 4",
            "text (14 characters) outside a record",
            id="stray text between records",
        ),
        pytest.param(
            "START_OF_RECORD=1||||\nSeen by Dr. Alvarez.\n||||END_OF_RECORD\n",
            "line 1",
            "malformed record header",
            id="malformed header",
        ),
        pytest.param(
            GOOD_RECORD + GOOD_RECORD,
            "line 4 (patient 1, note 1)",
            "duplicate note_id '1-1', first used at line 1 (patient 1, note 1)",
            id="duplicate patient/note",
        ),
    ],
)
def test_physionet_broken_records(tmp_path: Path, content: str, record: str, problem: str) -> None:
    text_file = put(tmp_path / "id.text", content)
    put(tmp_path / "id-phi.phrase", "")
    assert_error(read_error("physionet", tmp_path), text_file, record, problem)


@pytest.mark.parametrize(
    ("line", "record", "problem"),
    [
        pytest.param(
            "2 1 0 4 Date Seen",
            "line 2 (patient 2, note 1)",
            "span refers to a note absent from id.text",
            id="missing note",
        ),
        pytest.param(
            "1 1 12 HCPName Alvarez", "line 2", "malformed span line", id="too few fields"
        ),
        pytest.param(
            "1 1 x 19 HCPName Alvarez", "line 2", "malformed span line", id="offset not a number"
        ),
        pytest.param(
            "1 1 \u00b2 19 HCPName Alvarez", "line 2", "malformed span line", id="superscript digit"
        ),
    ],
)
def test_physionet_bad_phrase_lines(tmp_path: Path, line: str, record: str, problem: str) -> None:
    put(tmp_path / "id.text", GOOD_RECORD)
    phrase_file = put(tmp_path / "id-phi.phrase", f"1 1 12 19 HCPName Alvarez\n{line}\n")
    assert_error(read_error("physionet", tmp_path), phrase_file, record, problem)


def test_physionet_missing_phrase_file(tmp_path: Path) -> None:
    put(tmp_path / "id.text", GOOD_RECORD)
    assert_error(read_error("physionet", tmp_path), tmp_path / "id-phi.phrase", None, "not found")


def record(patient: str, note: str) -> str:
    return f"START_OF_RECORD={patient}||||{note}||||\nSeen by Dr. Alvarez.\n||||END_OF_RECORD\n"


@pytest.mark.parametrize(
    ("content", "where", "problem"),
    [
        pytest.param(
            # both would be note 1-2-3
            record("1-2", "3") + record("1", "2-3"),
            "line 1 (patient 1-2, note 3)",
            "patient id '1-2' contains '-', the separator of note ids",
            id="patient id with the separator",
        ),
        pytest.param(
            record("1", "1") + record("1", "2-3"),
            "line 4 (patient 1, note 2-3)",
            "note id '2-3' contains '-'",
            id="note id with the separator",
        ),
        pytest.param(
            record(" ", "1"), "line 1 (patient , note 1)", "blank patient id", id="blank patient"
        ),
        pytest.param(
            record("1", "\t"), "line 1 (patient 1, note )", "blank note id", id="blank note"
        ),
    ],
)
def test_physionet_ids_that_could_collide_are_refused(
    tmp_path: Path, content: str, where: str, problem: str
) -> None:
    text_file = put(tmp_path / "id.text", content)
    put(tmp_path / "id-phi.phrase", "")
    assert_error(read_error("physionet", tmp_path), text_file, where, problem)


# --- BRAT, JSONL and i2b2 structure -------------------------------------------------------


def test_brat_missing_ann_file(tmp_path: Path) -> None:
    put(tmp_path / "a.txt", TEXT)
    put(tmp_path / "a.ann", "")
    put(tmp_path / "b.txt", TEXT)
    err = read_error("brat", tmp_path)
    assert_error(err, tmp_path / "b.ann", None, "annotation file missing for b.txt")


def test_brat_folder_without_texts(tmp_path: Path) -> None:
    assert_error(read_error("brat", tmp_path), tmp_path, None, "no .txt files")


def test_brat_annotation_without_its_text_file(tmp_path: Path) -> None:
    put(tmp_path / "a.txt", TEXT)
    put(tmp_path / "a.ann", "")
    orphan = put(tmp_path / "b.ann", "T1\tHCPName 12 19\tAlvarez\n")
    assert_error(read_error("brat", tmp_path), orphan, None, "text file missing for b.ann")


def test_brat_text_without_annotations_is_a_note_without_phi_only_with_an_empty_ann(
    tmp_path: Path,
) -> None:
    put(tmp_path / "a.txt", TEXT)
    put(tmp_path / "a.ann", "")
    _, notes = read("brat", tmp_path)
    assert [(n.note_id, n.spans) for n in notes] == [("a", ())]


def test_brat_blank_note_id(tmp_path: Path) -> None:
    txt = put(tmp_path / " .txt", TEXT)
    put(tmp_path / " .ann", "")
    assert_error(read_error("brat", tmp_path), txt, None, "blank note_id ' '")


@pytest.mark.parametrize(
    ("line", "record", "problem"),
    [
        ("T2\tHCPName", "line 2 (T2)", "no offsets"),
        ("T2\tHCPName 12 x\tAlvarez", "line 2 (T2)", "malformed offsets (expected <start>"),
        ("T2\tHCPName 12 \u00b9\u2079\tAlvarez", "line 2 (T2)", "malformed offsets"),
        ("T2\tHCPName 12 19;23\tAlvarez", "line 2 (T2)", "malformed offsets"),
        ("T2\tHCPName 12 19", "line 2 (T2)", "no surface column"),
        ("T2\tHCPName 11 21", "line 2 (T2)", "no surface column"),
        ("T2 HCPName 12 19 Alvarez", "line 2", "no tab after the annotation id"),
    ],
)
def test_brat_malformed_annotation(tmp_path: Path, line: str, record: str, problem: str) -> None:
    put(tmp_path / "doc.txt", TEXT)
    ann = put(tmp_path / "doc.ann", f"T1\tHCPName 12 19\tAlvarez\n{line}\n")
    err = read_error("brat", tmp_path)
    assert_error(err, ann, record, problem)
    assert "Alvarez" not in str(err) and "HCPName 12" not in str(err)  # never the line


@pytest.mark.parametrize(
    ("line", "record", "problem"),
    [
        ('{"note_id": "n2", "text": "Call', "line 2", "invalid JSON"),
        ('["Seen by Dr. Alvarez."]', "line 2", "expected an object with a string 'text' field"),
        (
            '{"note_id": "n2", "text": "x", "spans": {}}',
            "line 2 (note n2)",
            "'spans' must be a list",
        ),
        (
            '{"note_id": "n2", "text": "x", "spans": [{"start": "0", "end": 1, "label": "Date"}]}',
            "line 2 (note n2)",
            "span field 'start' must be an integer, got a JSON string",
        ),
        (
            '{"note_id": "n1", "text": "Call 555-0100."}',
            "line 2 (note n1)",
            "duplicate note_id 'n1', first used at line 1 (note n1)",
        ),
        (
            '{"note_id": 3, "text": "x"}\n{"text": "y"}',
            "line 3 (note 3)",
            "duplicate note_id '3', first used at line 2 (note 3)",
        ),
        ('{"note_id": "", "text": "x"}', "line 2 (note )", "blank note_id ''"),
        ('{"note_id": " \\t", "text": "x"}', "line 2 (note  \t)", "blank note_id ' \\t'"),
        (
            '{"note_id": null, "text": "x"}',
            "line 2",
            "note_id must be a string or an integer, got a JSON null",
        ),
        (
            '{"note_id": "n2", "text": "x", "spans": ["Alvarez"]}',
            "line 2 (note n2)",
            "a span is a JSON string, not an object",
        ),
    ],
)
def test_jsonl_bad_lines(tmp_path: Path, line: str, record: str, problem: str) -> None:
    path = put(tmp_path / "notes.jsonl", f'{{"note_id": "n1", "text": "{TEXT[:20]}"}}\n{line}\n')
    assert_error(read_error("jsonl", path), path, record, problem)


@pytest.mark.parametrize(
    ("content", "record", "problem"),
    [
        (
            "<deIdi2b2>\n<TEXT><![CDATA[Seen]]></TEXT>\n<TAGS>\n</deIdi2b2>\n",
            "line 4",
            "invalid XML",
        ),
        ("<deIdi2b2><TAGS></TAGS></deIdi2b2>", None, "no TEXT element"),
        (
            i2b2_xml(TEXT, ['<DATE id="P0" start="--1" end="27" text="3/14" TYPE="DATE" />']),
            "tag P0 <DATE>",
            "attribute start is not an integer",
        ),
    ],
)
def test_i2b2_bad_files(tmp_path: Path, content: str, record: str | None, problem: str) -> None:
    path = put(tmp_path / "doc.xml", content)
    assert_error(read_error("i2b2", tmp_path), path, record, problem)


def test_i2b2_folder_without_xml(tmp_path: Path) -> None:
    assert_error(read_error("i2b2", tmp_path), tmp_path, None, "no .xml files")


# --- reading one note at a time ----------------------------------------------------------

RECORDS = (
    "START_OF_RECORD=1||||1||||\nSeen by Dr. Alvarez.\n||||END_OF_RECORD\n"
    "\n  \n"
    "START_OF_RECORD=1||||2||||\nCall 555-0100.\n\nNo || marker here.\n||||END_OF_RECORD  "
    "START_OF_RECORD=2||||1||||\n||||END_OF_RECORD\n\n"
)


def chunkings(content: str) -> list[list[str]]:
    """The content cut in two at every position, and one character at a time."""
    cuts = [[content[:i], content[i:]] for i in range(len(content) + 1)]
    return [*cuts, list(content)]


def test_physionet_records_are_the_same_however_the_file_is_chunked(tmp_path: Path) -> None:
    path = tmp_path / "id.text"
    whole = list(iter_records(iter([RECORDS]), path=path))
    assert [(line, p, n) for line, p, n, _ in whole] == [
        (1, "1", "1"),
        (6, "1", "2"),
        (10, "2", "1"),
    ]
    assert whole[1][3] == "Call 555-0100.\n\nNo || marker here.\n"
    assert whole[2][3] == ""
    for chunks in chunkings(RECORDS):
        assert list(iter_records(iter(chunks), path=path)) == whole


@pytest.mark.parametrize(
    ("content", "record", "problem"),
    [
        (
            RECORDS + "START_OF_RECORD=3||||1||||\nno end\n",
            "line 13 (patient 3, note 1)",
            "no ||||END",
        ),
        (RECORDS.replace("\n  \n", "\n x \n"), "line 5", "text (1 characters) outside a record"),
        (
            RECORDS.replace("||||END_OF_RECORD  ", "||||END_OF_RECORD ||||END_OF_RECORD"),
            "line 10",
            "end marker without a start outside a record",
        ),
        (RECORDS.replace("2||||1||||", "2||||||||"), "line 10", "malformed record header"),
    ],
)
def test_physionet_record_errors_name_the_same_line_however_the_file_is_chunked(
    tmp_path: Path, content: str, record: str, problem: str
) -> None:
    path = tmp_path / "id.text"
    for chunks in chunkings(content):
        with pytest.raises(InputError) as info:
            list(iter_records(iter(chunks), path=path))
        assert_error(info.value, path, record, problem)


def two_notes_the_second_broken(fmt: str, folder: Path) -> Path:
    """A corpus of two notes in ``fmt`` whose second note is malformed; returns its path."""
    good = one_jsonl(folder / "good", TEXT, [gold("Alvarez", "HCPName")])
    if fmt == "physionet":
        put(folder / "id-phi.phrase", "")
        put(folder / "id.text", GOOD_RECORD + "START_OF_RECORD=1||||2||||\nno end marker\n")
        return folder
    if fmt == "brat":
        put(folder / "a.txt", TEXT)
        put(folder / "a.ann", "")
        put(folder / "b.txt", TEXT)
        put(folder / "b.ann", "T1\tHCPName x y\tAlvarez\n")
        return folder
    if fmt == "i2b2":
        put(folder / "a.xml", i2b2_xml(TEXT, []))
        put(folder / "b.xml", "<deIdi2b2><TEXT>")
        return folder
    corpus = put(folder / "notes.jsonl", good.corpus.read_text(encoding="utf-8") + "{not json\n")
    return corpus


@pytest.mark.parametrize("fmt", FORMATS)
def test_each_reader_gives_a_note_before_it_reads_the_next(tmp_path: Path, fmt: str) -> None:
    corpus = two_notes_the_second_broken(fmt, tmp_path / fmt)
    notes = make_reader(fmt).notes(corpus)
    first = next(notes)
    assert first.text.startswith("Seen by Dr. Alvarez")
    with pytest.raises(InputError):
        next(notes)


@pytest.mark.parametrize(
    ("fmt", "layout", "missing"),
    [
        ("physionet", {"id-phi.phrase": ""}, "id.text"),
        ("physionet", {"id.text": GOOD_RECORD}, "id-phi.phrase"),
        ("jsonl", {}, "notes.jsonl"),
        ("i2b2", {}, "doc.xml"),
    ],
)
def test_a_missing_input_is_refused_when_the_read_starts(
    tmp_path: Path, fmt: str, layout: dict[str, str], missing: str
) -> None:
    for name, content in layout.items():
        put(tmp_path / name, content)
    corpus = tmp_path if fmt == "physionet" else tmp_path / missing
    with pytest.raises(InputError) as info:
        make_reader(fmt).notes(corpus)  # not iterated: the call itself refuses
    assert info.value.path == str(tmp_path / missing)
    assert "not found" in info.value.problem
