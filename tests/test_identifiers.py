"""The identifier-like string scanner: each kind, placeholders, exclusions, clean text."""

from __future__ import annotations

import itertools
import time

import pytest

from synthdeid.errors import ConfigError
from synthdeid.identifiers import NOT_NAMES, Finding, IdentifierScanner, faker_names


@pytest.fixture(scope="module")
def scanner() -> IdentifierScanner:
    return IdentifierScanner()


def found(scanner: IdentifierScanner, text: str) -> list[tuple[str, str]]:
    return [(f.kind, text[f.start : f.end]) for f in scanner.scan(text)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Seen in clinic on 3/14/2019 for follow up.", ("date", "3/14/2019")),
        ("Surgery is planned for March 3rd, 2021.", ("date", "March 3rd, 2021")),
        ("Call the clinic at (617) 555-0199 with questions.", ("phone", "(617) 555-0199")),
        ("Pager 555-0123 after hours.", ("phone", "555-0123")),
        ("MRN: 00482913 confirmed at the bedside.", ("id", "00482913")),
        ("Send the results to j.doe+lab@example.org today.", ("email", "j.doe+lab@example.org")),
        (
            "Portal at https://portal.example.org/login, then log in.",
            ("url", "https://portal.example.org/login"),
        ),
        ("See www.example.com.", ("url", "www.example.com")),
        ("Discussed with Jennifer at the bedside.", ("name", "Jennifer")),
        ("Family meeting with the GONZALEZ family.", ("name", "GONZALEZ")),
        ("Note from McDonald reviewed.", ("name", "McDonald")),
        ("Spoke with O'Brien on the phone.", ("name", "O'Brien")),
        ("Reviewed Thompson's notes.", ("name", "Thompson")),
    ],
)
def test_each_kind_is_found(
    scanner: IdentifierScanner, text: str, expected: tuple[str, str]
) -> None:
    assert found(scanner, text) == [expected]


def test_findings_are_sorted_and_do_not_overlap(scanner: IdentifierScanner) -> None:
    text = "Email john.smith@example.org or call 617-555-0199; Smith agreed on 4/2/2020."
    findings = scanner.scan(text)
    assert [f.kind for f in findings] == ["email", "phone", "name", "date"]
    assert findings == sorted(findings)
    assert all(a.end <= b.start for a, b in itertools.pairwise(findings))


def test_placeholders_are_never_reported(scanner: IdentifierScanner) -> None:
    text = (
        "[[DOCTOR_1]] saw [[PATIENT_12]] on [[DATE_3]]; call [[PHONE_1]]. [[SMITH_1]] [[ID_123456]]"
    )
    assert scanner.scan(text) == []
    # a finding right next to a placeholder is still found, with the right offsets
    text = "[[DOCTOR_1]] called Smith"
    assert found(scanner, text) == [("name", "Smith")]


def test_common_words_are_not_names(scanner: IdentifierScanner) -> None:
    text = "Taylor was tearful. Hunter returned."
    assert [k for k, _ in found(scanner, text)] == ["name", "name"]
    quiet = IdentifierScanner(common_words=["taylor", "HUNTER"])
    assert quiet.scan(text) == []
    assert quiet.excluded_words > scanner.excluded_words


def test_built_in_exclusions_and_eponyms(scanner: IdentifierScanner) -> None:
    text = (
        "Frank blood per rectum. Foley catheter in place. Colon: no masses. "
        "Wall motion normal. Murphy's sign negative. Jackson-Pratt drain removed. "
        "Cheyne-Stokes respirations overnight. Small bowel follow-through ordered."
    )
    assert scanner.scan(text) == []
    # outside an eponymous phrase the same word is a name
    assert found(scanner, "Dr. Murphy called back.") == [("name", "Murphy")]
    assert {"frank", "foley", "colon", "wall"} <= NOT_NAMES


def test_lower_case_and_short_upper_words_are_not_names() -> None:
    scanner = IdentifierScanner(names=["Quux", "Jo"])
    assert found(scanner, "quux Quux QUUX") == [("name", "Quux"), ("name", "QUUX")]
    assert scanner.scan("JO reviewed") == []  # two-letter upper case: an abbreviation
    assert found(scanner, "Jo reviewed") == [("name", "Jo")]


def test_default_names_are_the_faker_lists() -> None:
    names = faker_names()
    assert {"jennifer", "gonzalez", "smith"} <= names
    assert len(names) > 1000


def test_clinical_text_without_identifiers_yields_nothing(scanner: IdentifierScanner) -> None:
    text = (
        "HISTORY OF PRESENT ILLNESS: 67 yo M with CAD s/p PCI presents with 2 days of "
        "substernal chest pressure radiating to the left arm, worse with exertion. "
        "BP 132/84, HR 88, RR 18, SpO2 96% on RA. Pain 5/10 at 10:30, improving "
        "after SL NTG. Labs: troponin 0.04, Na 138, K 4.1, Cr 1.2, Hgb 11.8. "
        "ASSESSMENT AND PLAN: NSTEMI ruled out. Continue aspirin 81 mg daily, atorvastatin "
        "80 mg qHS, metoprolol 25 mg BID. Will obtain TTE; may need stress test. "
        "Follow up with cardiology in 2 weeks. Patient and wife agree with the plan. "
        "Discharge condition: stable. Activity as tolerated; diet low sodium, 2 g/day."
    )
    assert found(scanner, text) == []


def test_a_score_far_from_its_word_is_taken_for_a_date(scanner: IdentifierScanner) -> None:
    # known limit inherited from the DATE detector: callers that mind can drop the kind
    assert found(scanner, "Pain improved to 2/10.") == [("date", "2/10")]
    assert IdentifierScanner(kinds=["name", "phone"]).scan("Pain improved to 2/10.") == []


def test_unknown_kind_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown identifier kinds"):
        IdentifierScanner(kinds=["date", "zipcode"])


def test_finding_description_carries_no_text() -> None:
    assert Finding(3, 12, "date").describe() == "date (9 chars)"


def test_scanning_a_note_is_fast(scanner: IdentifierScanner) -> None:
    sentence = (
        "Pt seen on rounds, afebrile, tolerating diet, ambulating with PT. BP 118/72, "
        "HR 76. Plan to continue IV antibiotics and recheck CBC in the morning. "
    )
    note = sentence * (2000 // len(sentence) + 1)
    scanner.scan(note)
    start = time.perf_counter()
    for _ in range(50):
        scanner.scan(note)
    per_note = (time.perf_counter() - start) / 50
    assert per_note < 0.02  # measured about 1 ms; this only catches a pathological regex
