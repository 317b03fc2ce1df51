from __future__ import annotations

from itertools import pairwise

import pytest

from synthdeid.detectors import DETECTORS, detect, union_spans
from synthdeid.errors import ConfigError
from synthdeid.notes import Span


def found(text: str, label: str) -> list[str]:
    return [s.surface(text) for s in detect(text, [label])]


@pytest.mark.parametrize(
    ("text", "surface"),
    [
        ("Seen on 3/14 for follow-up.", "3/14"),
        ("Seen on 3/14/19 for follow-up.", "3/14/19"),
        ("Seen on 03/14/2019 for follow-up.", "03/14/2019"),
        ("Seen on 3-14-2019.", "3-14-2019"),
        ("Seen on 14.03.2019.", "14.03.2019"),
        ("Seen on 2019-03-14.", "2019-03-14"),
        ("Since 03/2019 no relapse.", "03/2019"),
        ("Seen Jan 3 in clinic.", "Jan 3"),
        ("Seen Jan. 3rd, 2019 in clinic.", "Jan. 3rd, 2019"),
        ("Seen January 3, 2019 in clinic.", "January 3, 2019"),
        ("Seen 3 January 2019 in clinic.", "3 January 2019"),
        ("Seen on the 3rd of January.", "3rd of January"),
        ("Seen 03-Jan-2019 in clinic.", "03-Jan-2019"),
        ("Seen in January 2019.", "January 2019"),
        ("Seen in January.", "January"),
        ("Seen May 3.", "May 3"),
        ("SEEN DECEMBER 24.", "DECEMBER 24"),
    ],
)
def test_date_forms(text: str, surface: str) -> None:
    assert found(text, "DATE") == [surface]


@pytest.mark.parametrize(
    "text",
    [
        "BP 120/80, HR 72.",
        "BP 90/60 on arrival.",
        "BP 11/7 (cuff error).",
        "Pain 5/10 at rest.",
        "Rates it 7/10 pain.",
        "Pain score: 3/10.",
        "Given at 10:30 and 14:45.",
        "ABG 7.35/40/90.",
        "Take 1/2 tab daily.",
        "Titrate 5-10-15 mg.",
        "Hgb 12.5, K 4.1.",
        "She may return next week.",
        "They march on.",
        "Smoked since 2019.",
    ],
)
def test_date_negatives(text: str) -> None:
    assert found(text, "DATE") == []


@pytest.mark.parametrize(
    ("text", "surface"),
    [
        ("Call (617) 555-1234 today.", "(617) 555-1234"),
        ("Call 617-555-1234 today.", "617-555-1234"),
        ("Call 617.555.1234 today.", "617.555.1234"),
        ("Call 617 555 1234 today.", "617 555 1234"),
        ("Call +1 617-555-1234 today.", "+1 617-555-1234"),
        ("Call 1-800-555-1234 today.", "1-800-555-1234"),
        ("Call 555-1234 today.", "555-1234"),
        ("Call 617-555-1234 x123 today.", "617-555-1234 x123"),
        ("Call 555-1234 ext. 4567 today.", "555-1234 ext. 4567"),
    ],
)
def test_phone_forms(text: str, surface: str) -> None:
    assert found(text, "PHONE") == [surface]


@pytest.mark.parametrize(
    "text",
    ["Seen 2019-03-14.", "SSN 123-45-6789.", "Dose 100-1000 mg.", "BP 120/80.", "Na 135 - 145"],
)
def test_phone_negatives(text: str) -> None:
    assert found(text, "PHONE") == []


@pytest.mark.parametrize(
    ("text", "surface"),
    [
        ("MRN: 123 on file.", "123"),
        ("MRN 4455667 on file.", "4455667"),
        ("Medical record number: 0012-A on file.", "0012-A"),
        ("Acct # A-77 billed.", "A-77"),
        ("SSN 123-45-6789 on file.", "123-45-6789"),
        ("Card 123-45-6789 on file.", "123-45-6789"),
        ("Ref 1234567 on file.", "1234567"),
        ("Ref A1234567 on file.", "A1234567"),
        ("Ref MR-0012345 on file.", "MR-0012345"),
    ],
)
def test_id_forms(text: str, surface: str) -> None:
    assert found(text, "ID") == [surface]


@pytest.mark.parametrize(
    "text",
    [
        "Give 10 mg now.",
        "Heparin 100000 units.",
        "Plt 150000 cells.",
        "Lasix 40mg, B12, COVID-19, H1N1.",
        "Weight 72.5 kg, WBC 12.3.",
        "ID consult today.",
        "Value 12345.",
    ],
)
def test_id_negatives(text: str) -> None:
    assert found(text, "ID") == []


@pytest.mark.parametrize(
    ("text", "surface"),
    [
        ("A 92 yo woman.", "92"),
        ("A 92yoF with CHF.", "92"),
        ("A 92 y.o. man.", "92"),
        ("A 93-year-old man.", "93"),
        ("He is 95 years old.", "95"),
        ("She is 95 years of age.", "95"),
        ("Age 95, lives alone.", "95"),
        ("Aged: 101.", "101"),
    ],
)
def test_age_forms_over_89(text: str, surface: str) -> None:
    assert found(text, "AGE") == [surface]


@pytest.mark.parametrize(
    "text",
    [
        "A 45 yo woman.",
        "Age 45.",
        "An 89-year-old man.",
        "Metoprolol 95 mg.",
        "See page 95.",
        "Sat 92% on RA.",
        "Age 92.5 percentile",
    ],
)
def test_age_negatives(text: str) -> None:
    assert found(text, "AGE") == []


def test_detect_all_labels_sorted_and_non_overlapping() -> None:
    text = "92 yo seen 3/14/2019, MRN: 4455667, call 555-1234. BP 120/80, 10 mg."
    spans = detect(text)
    assert [(s.label, s.surface(text)) for s in spans] == [
        ("AGE", "92"),
        ("DATE", "3/14/2019"),
        ("ID", "4455667"),
        ("PHONE", "555-1234"),
    ]
    assert all(a.end <= b.start for a, b in pairwise(spans))


def test_detect_overlap_prefers_first_start_then_longest() -> None:
    text = "ID 2019-03-14"  # the labelled ID value is also a date: the DATE detector wins a tie
    assert [(s.label, s.surface(text)) for s in detect(text)] == [("DATE", "2019-03-14")]


def test_detect_restricts_labels_and_refuses_unknown() -> None:
    assert set(DETECTORS) == {"DATE", "PHONE", "ID", "AGE"}
    assert detect("Seen 3/14, 92 yo.", ["AGE"]) == [Span(11, 13, "AGE")]
    with pytest.raises(ConfigError, match="EMAIL"):
        detect("text", ["EMAIL"])


def test_union_keeps_model_spans_and_drops_overlapping_regex() -> None:
    model = [Span(10, 20, "DOCTOR"), Span(0, 4, "DATE")]
    regex = [Span(2, 6, "DATE"), Span(15, 25, "PHONE"), Span(30, 35, "ID"), Span(36, 40, "AGE")]
    assert union_spans(model, regex) == [
        Span(0, 4, "DATE"),
        Span(10, 20, "DOCTOR"),
        Span(30, 35, "ID"),
        Span(36, 40, "AGE"),
    ]


def test_union_touching_spans_do_not_overlap_and_regex_overlaps_resolved() -> None:
    model = [Span(5, 10, "PATIENT")]
    regex = [Span(0, 5, "DATE"), Span(10, 14, "ID"), Span(12, 16, "PHONE")]
    assert union_spans(model, regex) == [
        Span(0, 5, "DATE"),
        Span(5, 10, "PATIENT"),
        Span(10, 14, "ID"),
    ]
    assert union_spans([], []) == []
