"""The i2b2 2014 and BRAT readers on files in each format's real layout, quirks included.

No real i2b2 2014 file may be shipped (the corpus is under a data use
agreement) and no installed or PyPI package ships one, nor BRAT files of a
de-identification corpus: ``tests/fixtures/reader_formats/`` holds invented
notes written the way the real files are, one documented quirk at a time (its
README says which file holds which quirk and where the quirk is documented).
The i2b2 files are read with the shipped ``i2b2_2014`` label map, and so are
the BRAT files, whose entity types are the 2014 subtypes (as corpora converted
from i2b2 to BRAT have them).
"""

from __future__ import annotations

from pathlib import Path

import jsonschema
import pytest
import yaml

from synthdeid.errors import ConfigError, InputError
from synthdeid.ingest import IngestSettings, ingest_corpus
from synthdeid.labels import LabelMap
from synthdeid.notes import Note, Span
from synthdeid.readers import CorpusReader, ReaderOptions, get_reader
from synthdeid.readers.label_maps import LABEL_MAP_DIR, load_label_map, shipped_label_map

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "reader_formats"
I2B2 = FIXTURES / "i2b2_2014"
BRAT = FIXTURES / "brat"
MAPS = REPO / LABEL_MAP_DIR
I2B2_2014 = shipped_label_map("i2b2_2014", MAPS)

# The 2014 track's PHI categories and their subtypes (the TYPE attribute), as
# the annotation scheme (Stubbs and Uzuner 2015) and the track's evaluation script
# list them, and the canonical label each one is meant to become.
SCHEME = {
    "NAME": {"PATIENT": "PATIENT", "DOCTOR": "DOCTOR", "USERNAME": "DOCTOR"},
    "PROFESSION": {"PROFESSION": "OTHER"},
    "LOCATION": {
        "ROOM": "LOCATION",
        "DEPARTMENT": "LOCATION",
        "HOSPITAL": "HOSPITAL",
        "ORGANIZATION": "LOCATION",
        "STREET": "LOCATION",
        "CITY": "LOCATION",
        "STATE": "LOCATION",
        "COUNTRY": "LOCATION",
        "ZIP": "LOCATION",
        "LOCATION-OTHER": "LOCATION",
    },
    "AGE": {"AGE": "AGE"},
    "DATE": {"DATE": "DATE"},
    "CONTACT": {
        "PHONE": "PHONE",
        "FAX": "PHONE",
        "EMAIL": "PHONE",
        "URL": "PHONE",
        "IPADDR": "PHONE",
    },
    "ID": {
        "SSN": "ID",
        "MEDICALRECORD": "ID",
        "HEALTHPLAN": "ID",
        "ACCOUNT": "ID",
        "LICENSE": "ID",
        "VEHICLE": "ID",
        "DEVICE": "ID",
        "BIOID": "ID",
        "IDNUM": "ID",
    },
    "OTHER": {"OTHER": "OTHER"},
}


def reader(fmt: str, label_map: LabelMap = I2B2_2014, **options: object) -> CorpusReader:
    return get_reader(fmt)(ReaderOptions(label_map=label_map, source="fixture", **options))


def read_error(fmt: str, path: Path) -> InputError:
    with pytest.raises(InputError) as info:
        reader(fmt).read(path)
    return info.value


def labelled(note: Note) -> list[tuple[str, str]]:
    """(surface, label) of each span, in order."""
    return [(span.surface(note.text), span.label) for span in note.spans]


# --- the shipped i2b2 2014 label map ------------------------------------------------------


def test_the_shipped_map_maps_every_2014_subtype_and_nothing_else() -> None:
    expected = {
        subtype: label for subtypes in SCHEME.values() for subtype, label in subtypes.items()
    }
    assert dict(I2B2_2014.mapping) == expected


def test_the_shipped_map_is_a_config_fragment_the_schema_accepts() -> None:
    """Passed as one more --configfile it sets labels.mapping and nothing else."""
    fragment = yaml.safe_load((MAPS / "i2b2_2014.yaml").read_text(encoding="utf-8"))
    assert list(fragment) == ["labels"] and list(fragment["labels"]) == ["mapping"]
    schema = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())
    jsonschema.validate(fragment["labels"], schema["properties"]["labels"])


def test_the_shipped_map_is_found_by_name_from_the_repository_root(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(REPO)
    assert shipped_label_map("i2b2_2014") == I2B2_2014
    with pytest.raises(ConfigError, match=r"no shipped label map 'i2b2_2006'.*i2b2_2014"):
        shipped_label_map("i2b2_2006")


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("mapping: {DOCTOR: DOCTOR}\n", "holds labels.mapping only"),
        ("labels: {mapping: {DOCTOR: DOCTOR}, coarse_view: {}}\n", "holds labels.mapping only"),
        ("labels: {mapping: {NURSE: STAFF}}\n", "non-canonical labels {'NURSE': 'STAFF'}"),
    ],
)
def test_a_label_map_file_is_checked(tmp_path: Path, content: str, problem: str) -> None:
    path = tmp_path / "map.yaml"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ConfigError, match=problem):
        load_label_map(path)


# --- i2b2 2014 XML ----------------------------------------------------------------------


def i2b2_note(name: str) -> Note:
    """The note of one file of the good corpus, read alone (a quirk at a time)."""
    (note,) = reader("i2b2").read(I2B2 / "good" / f"{name}.xml")
    return note


def test_i2b2_corpus_reads_through_ingest_with_the_shipped_map() -> None:
    settings = IngestSettings(
        format="i2b2", label_map=I2B2_2014, source="fixture", patient_id_regex=r"^(\d+)-"
    )
    result = ingest_corpus(I2B2 / "good", settings)
    assert [(n.note_id, n.patient_id) for n in result.notes] == [
        ("310-01", "310"),
        ("310-02", "310"),
        ("310-03", "310"),
        ("311-01", "311"),
    ]
    assert result.surfaces_verified == 19 + 3 + 3  # every tag's text attribute


def test_i2b2_subtypes_map_through_the_shipped_map() -> None:
    """TYPE, not the element name, is mapped (also for the corpus's few <PHI> tags)."""
    note = i2b2_note("310-01")
    assert labelled(note) == [
        ("2067-05-03", "DATE"),
        ("Fairview Medical\nCenter", "HOSPITAL"),
        ('Wilma "Billie" Hargrove', "PATIENT"),
        ("4417290", "ID"),
        ("Lee Okafor", "DOCTOR"),
        ("okafl2", "DOCTOR"),
        ("Wilma", "PATIENT"),  # <PHI TYPE="PATIENT">
        ("93", "AGE"),
        ("schoolteacher", "OTHER"),
        ("Tewksbury", "LOCATION"),
        ("MA", "LOCATION"),
        ("01876", "LOCATION"),
        ("12 Birch Lane", "LOCATION"),
        ("Smith & Wesson Hardware", "LOCATION"),
        ("978-555-0187", "PHONE"),
        ("978-555-0190", "PHONE"),
        ("wh@example.org", "PHONE"),
        ("Okafor", "DOCTOR"),  # <PHI TYPE="DOCTOR">
        ("06/14", "DATE"),  # <PHI TYPE="DATE">
    ]


def test_i2b2_offsets_count_the_leading_newlines_of_the_cdata() -> None:
    note = i2b2_note("310-01")
    assert note.text.startswith("\n\n\nRecord date: 2067-05-03\n")
    assert note.spans[0] == Span(16, 26, "DATE")  # the documented start="16" end="26"


def test_i2b2_text_attributes_compare_as_xml_reads_them() -> None:
    """&quot; and &amp; are decoded; a literal newline in text="..." reads as a space."""
    stated = (I2B2 / "good" / "310-01.xml").read_text(encoding="utf-8")
    assert 'text="Wilma &quot;Billie&quot; Hargrove"' in stated
    assert 'text="Smith &amp; Wesson Hardware"' in stated
    assert 'text="Fairview Medical\nCenter"' in stated
    hospital = i2b2_note("310-01").spans[1]
    assert (hospital.start, hospital.end) == (28, 51)


def test_i2b2_crlf_offsets_counted_as_stored_keep_the_text_as_stored() -> None:
    note = i2b2_note("310-02")
    assert note.text == (
        "\r\n\r\n\r\nRecord date: 2068-01-22\r\n\r\nDr. Okafor saw Wilma Hargrove today.\r\n"
    )
    assert note.spans[0] == Span(19, 29, "DATE")  # three \r\n: six characters
    assert labelled(note) == [
        ("2068-01-22", "DATE"),
        ("Okafor", "DOCTOR"),
        ("Wilma Hargrove", "PATIENT"),
    ]


def test_i2b2_crlf_offsets_counted_as_xml_reads_the_text_take_that_text() -> None:
    note = i2b2_note("310-03")
    assert note.text == "\n\n\nRecord date: 2068-03-09\n\nSeen at Fairview by Dr. Okafor.\n"
    assert note.spans[0] == Span(16, 26, "DATE")
    assert labelled(note) == [
        ("2068-03-09", "DATE"),
        ("Fairview", "HOSPITAL"),
        ("Okafor", "DOCTOR"),
    ]


def test_i2b2_empty_tags_is_a_note_without_phi() -> None:
    note = i2b2_note("311-01")
    assert "<TAGS/>" in (I2B2 / "good" / "311-01.xml").read_text(encoding="utf-8")
    assert note.spans == () and note.text.startswith("\n\n\nRecord date: ")


def assert_quotes_nothing(err: InputError, *contents: str) -> None:
    for content in contents:
        assert content not in str(err)


def test_i2b2_type_not_in_the_map_is_an_error_naming_file_and_tag() -> None:
    path = I2B2 / "bad" / "312-01-unknown-type.xml"
    err = read_error("i2b2", path)
    assert (err.path, err.record) == (str(path), "tag P1 <LOCATION>")
    assert err.problem == "unknown label 'COUNTY'"
    assert err.hint is not None and "labels.mapping" in err.hint
    assert_quotes_nothing(err, "Middlesex", "Lives in")


def test_i2b2_file_without_tags_is_refused() -> None:
    """The release's unlabelled test files hold TEXT only: not a note without PHI."""
    path = I2B2 / "bad" / "312-02-no-tags.xml"
    err = read_error("i2b2", path)
    assert (err.path, err.record) == (str(path), None)
    assert err.problem.startswith("no TAGS element")
    assert_quotes_nothing(err, "Okafor", "Hargrove")


def test_i2b2_crlf_offsets_that_fit_neither_reading_are_an_error() -> None:
    path = I2B2 / "bad" / "312-03-crlf-misfit.xml"
    err = read_error("i2b2", path)
    assert (err.path, err.record) == (str(path), "tag P1 <NAME>")
    assert err.problem.startswith("surface mismatch at 38-44")
    assert err.hint is not None and "fit neither the text as stored" in err.hint
    assert_quotes_nothing(err, "Okafor", "kafor")


# --- BRAT standoff ----------------------------------------------------------------------


def brat_notes() -> tuple[int, dict[str, Note]]:
    brat = reader("brat", patient_id_regex=r"^(\d+)-")
    notes = brat.read(BRAT / "good")
    return brat.surfaces_verified, {note.note_id: note for note in notes}


def test_brat_corpus_reads_with_the_shipped_map() -> None:
    verified, notes = brat_notes()
    assert [(n.note_id, n.patient_id) for n in notes.values()] == [
        ("310-01a", "310"),
        ("310-01b", "310"),
        ("320-01", "320"),
        ("330-01", "330"),
    ]
    assert verified == 6 + 3 + 4  # one per entity, however many fragments


def test_brat_discontinuous_entity_and_lines_that_are_not_entities() -> None:
    """T2 has two fragments; the event trigger T5 and the E, R, *, A, N, # lines are no spans."""
    note = brat_notes()[1]["310-01a"]
    assert labelled(note) == [
        ("Hargrove, Wilma", "PATIENT"),
        ("Lee", "DOCTOR"),  # T2, first fragment
        ("Leland", "DOCTOR"),
        ("Okafor", "DOCTOR"),  # T2, second fragment
        ("Wilma", "PATIENT"),
        ("Fairview Medical Center", "HOSPITAL"),
        ("2067-05-03", "DATE"),
    ]


def test_brat_multiline_text_counts_newlines_and_a_surface_may_hold_a_tab() -> None:
    note = brat_notes()[1]["310-01b"]
    assert note.text.count("\n") == 4
    assert note.spans == (
        Span(16, 30, "PATIENT"),
        Span(36, 46, "DATE"),
        Span(54, 63, "LOCATION"),
    )
    assert labelled(note)[0] == ("Wilma\tHargrove", "PATIENT")
    assert note.text.split("\n")[2][5:15] == "2067-06-14"  # line 3, after 10 + 16 characters


def test_brat_offsets_count_code_points_and_ann_lines_end_at_newlines_only() -> None:
    """Non-ASCII text (one character outside the BMP), and a note holding U+2028."""
    note = brat_notes()[1]["320-01"]
    assert labelled(note) == [
        ("Z\u00fcrich", "LOCATION"),
        ("Jos\u00e9 M\u00fcller-\u0141ukasiewicz", "PATIENT"),
        ("\U00020bb7\u7530 \u82b1\u5b50", "PATIENT"),
        ("Zo\u00eb \u00c5ngstr\u00f6m", "DOCTOR"),
    ]
    kin = note.spans[2]
    assert (kin.start, kin.end) == (63, 68)  # five code points (six UTF-16 units)
    assert "\u2028T" in (BRAT / "good" / "320-01.ann").read_text(encoding="utf-8")


def test_brat_ann_without_entities_is_a_note_without_phi() -> None:
    assert (BRAT / "good" / "330-01.ann").stat().st_size == 0
    assert brat_notes()[1]["330-01"].spans == ()


def test_brat_text_without_ann_is_refused_naming_the_missing_file() -> None:
    folder = BRAT / "bad" / "no-ann"
    err = read_error("brat", folder)
    assert (err.path, err.record) == (str(folder / "340-01.ann"), None)
    assert err.problem == "annotation file missing for 340-01.txt"
    assert err.hint is not None and "empty .ann" in err.hint


def test_brat_byte_offsets_are_a_surface_mismatch_that_quotes_nothing() -> None:
    folder = BRAT / "bad" / "byte-offsets"
    err = read_error("brat", folder)
    assert (err.path, err.record) == (str(folder / "320-01.ann"), "line 1 (T1)")
    assert err.problem.startswith("surface mismatch at 12-19")
    assert_quotes_nothing(err, "rich", "\u00fc")


def test_brat_space_instead_of_tab_before_the_surface(tmp_path: Path) -> None:
    (tmp_path / "n.txt").write_text("Seen by Dr. Okafor.\n", encoding="utf-8")
    ann = tmp_path / "n.ann"
    ann.write_text("T1\tDOCTOR 12 18 Okafor\n", encoding="utf-8")
    err = read_error("brat", tmp_path)
    assert (err.path, err.record) == (str(ann), "line 1 (T1)")
    assert err.problem.startswith("malformed offsets")
    assert err.hint == "a space instead of a tab before the surface?"
    assert_quotes_nothing(err, "Okafor", "12 18")


def test_brat_stray_line_starting_with_t_is_refused_unquoted(tmp_path: Path) -> None:
    (tmp_path / "n.txt").write_text("Seen by Dr. Okafor.\n", encoding="utf-8")
    ann = tmp_path / "n.ann"
    ann.write_text("T1\tDOCTOR 12 18\tOkafor\nTanaka reading\tchecked\n", encoding="utf-8")
    err = read_error("brat", tmp_path)
    assert (err.path, err.record) == (str(ann), "line 2")
    assert err.problem.startswith("malformed annotation id")
    assert_quotes_nothing(err, "Tanaka", "checked")


def test_brat_ann_with_crlf_line_ends(tmp_path: Path) -> None:
    (tmp_path / "n.txt").write_bytes(b"Seen by Dr. Okafor.\n")
    (tmp_path / "n.ann").write_bytes(b"T1\tDOCTOR 12 18\tOkafor\r\n#1\tAnnotatorNotes T1\tok\r\n")
    (note,) = reader("brat").read(tmp_path)
    assert labelled(note) == [("Okafor", "DOCTOR")]
