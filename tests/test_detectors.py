"""The shared date vocabulary, date reading and span selection of synthdeid.detectors.

The detection patterns themselves are tested in test_regex_detectors.py, date
shifting in test_surrogate_dates.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from synthdeid.detectors import (
    FORMS,
    MONTHS,
    WEEKDAYS,
    DateValue,
    abbreviations,
    date_levels,
    detect,
    name_index,
    non_overlapping,
    parse_date,
    read_date,
    year_value,
)


def test_abbreviations() -> None:
    assert abbreviations(MONTHS) == (
        *("Jan", "Feb", "Mar", "Apr", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"),
        "Sept",
    )
    assert abbreviations(WEEKDAYS) == (
        *("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"),
        *("Tues", "Thur", "Thurs"),
    )


@pytest.mark.parametrize(
    ("token", "index"), [("jan", 0), ("MAY", 4), ("Sept", 8), ("september", 8), ("dec", 11)]
)
def test_name_index_of_months(token: str, index: int) -> None:
    assert name_index(MONTHS, token) == index


@pytest.mark.parametrize(("token", "index"), [("Mon", 0), ("TUES", 1), ("thurs", 3), ("Sun", 6)])
def test_name_index_of_weekdays(token: str, index: int) -> None:
    assert name_index(WEEKDAYS, token) == index


@pytest.mark.parametrize(
    ("token", "year"),
    [("2006", 2006), ("06", 2006), ("'29", 2029), ("\u201930", 1930), ("99", 1999)],
)
def test_year_value_pivots_two_digit_years_at_30(token: str, year: int) -> None:
    assert year_value(token) == year


@pytest.mark.parametrize("word", [*MONTHS, *abbreviations(MONTHS)])
def test_one_month_vocabulary_for_finding_and_reading(word: str) -> None:
    month = name_index(MONTHS, word) + 1
    for written in (word, word.upper(), word.lower()):
        assert parse_date(written) == DateValue(None, month, None)
        assert parse_date(f"{written} 3") == DateValue(None, month, 3)
    for written in (word, word.upper()):  # lower case is a word ("may", "march"), not a date
        text = f"Seen {written} 3 in clinic."
        assert [s.surface(text) for s in detect(text, ["DATE"])] == [f"{written} 3"]


def test_read_date_keeps_edges_and_reads_ranges() -> None:
    reading = read_date(" (6/30-7/2).")
    assert reading is not None
    assert (reading.head, reading.joints, reading.tail) == (" (", ("-",), ").")
    assert [piece.value for piece in reading.pieces] == [
        DateValue(None, 6, 30),
        DateValue(None, 7, 2),
    ]
    assert reading.levels() == {"day"}
    assert parse_date("6/30-7/2") is None  # a range is not one date
    assert date_levels("July 2006 to 2008") == {"month", "year"}


def test_read_date_gives_each_form_its_value_fields() -> None:
    reading = read_date("Tue, Jul. 22nd, '06")
    assert reading is not None
    (piece,) = reading.pieces
    groups = piece.match.groupdict()
    assert (groups["weekday"], groups["month"], groups["day"]) == ("Tue", "Jul", "22")
    assert (groups["suffix"], groups["year"]) == ("nd", "'06")
    assert piece.value == DateValue(2006, 7, 22)
    assert piece.match.re is next(f.pattern for f in FORMS if f.name == "name_day_year")


@pytest.mark.parametrize(
    ("text", "level"), [("7/22/2006", "day"), ("11th", "day"), ("8/88", "month"), ("'06", "year")]
)
def test_date_value_level(text: str, level: str) -> None:
    value = parse_date(text)
    assert value is not None
    assert value.level == level


@pytest.mark.parametrize("text", ["2/30/2006", "13/14", "Tuesday", "xmas", "10:30", ""])
def test_no_date(text: str) -> None:
    assert read_date(text) is None
    assert date_levels(text) == frozenset()


@dataclass(frozen=True)
class Item:
    start: int
    end: int
    kind: str


def test_non_overlapping_prefers_earliest_then_longest_then_order() -> None:
    items = [Item(5, 9, "b"), Item(0, 4, "b"), Item(0, 4, "a"), Item(2, 8, "a"), Item(4, 6, "b")]
    kept = non_overlapping(items, ["a", "b"], lambda item: item.kind)
    assert kept == [Item(0, 4, "a"), Item(4, 6, "b")]
    assert non_overlapping(items, ["b", "a"], lambda item: item.kind)[0] == Item(0, 4, "b")
