"""Safe Harbor ages: young ages written as ages are dropped, everything else is kept."""

from __future__ import annotations

import pytest

from synthdeid.ner.ages import drop_young_ages, is_young_age
from synthdeid.notes import Note, Span


def span_in(text: str, surface: str, label: str = "DATE") -> Span:
    start = text.index(surface)
    return Span(start, start + len(surface), label)


@pytest.mark.parametrize(
    ("text", "surface"),
    [
        ("79 YO FEMALE BROUGHT TO CATH LAB", "79"),
        ("Pt is an 83 y/o widowed woman", "83"),
        ("80 y.o. male", "80"),
        ("This 87 year old female", "87"),
        ("a 45-year-old man", "45"),
        ("60 yrs old, lives alone", "60"),
        ("71 years of age", "71"),
        ("age 45, smoker", "45"),
        ("Age: 62", "62"),
        ("aged 60 with COPD", "60"),
        ("79 yo female", "79 yo"),  # the unit inside the span
        ("89 yo", "89"),  # the last age Safe Harbor lets stay
    ],
)
def test_young_ages_written_as_ages_are_recognised(text: str, surface: str) -> None:
    assert is_young_age(text, span_in(text, surface))


@pytest.mark.parametrize(
    ("text", "surface"),
    [
        ("90 yo female", "90"),  # over 89: an identifier
        ("a 102 year old woman", "102"),
        ("transferred on 6 days ago", "6"),  # a number, not an age
        ("BP 83/50 at 0400", "83"),
        ("admitted 10/20, 79 yo", "10/20"),  # a date next to an age
        ("seen on 21 Apr", "21"),
        ("Mr Young 79 yo", "Mr Young"),  # a name before an age
        ("79 Main St", "79"),
        ("youngest son 45", "45"),  # "son", not "age"
        ("page 45", "45"),  # "page" is not the word "age"
    ],
)
def test_everything_else_is_kept(text: str, surface: str) -> None:
    assert not is_young_age(text, span_in(text, surface))


def test_the_limit_is_a_parameter() -> None:
    text = "a 65 yo man"
    assert is_young_age(text, span_in(text, "65"), limit=90)
    assert not is_young_age(text, span_in(text, "65"), limit=65)


def test_drop_young_ages_keeps_order_and_other_spans() -> None:
    text = "83 yo woman seen by Dr. Smith on 10/20; daughter 45 yo"
    spans = [
        span_in(text, "83", "DATE"),
        span_in(text, "Smith", "DOCTOR"),
        span_in(text, "10/20", "DATE"),
        Span(text.index("45 yo"), text.index("45 yo") + 2, "AGE"),
    ]
    assert drop_young_ages(spans, text) == [spans[1], spans[2]]
    assert drop_young_ages([], text) == []


def test_deid_drops_the_young_ages_after_the_regex_union() -> None:
    from synthdeid.detectors import add_regex_spans
    from synthdeid.ner.ages import drop_young_age_spans

    text = "83 yo F seen 10/20 by Dr. Smith; her husband, 92 yo, visited."
    note = Note("n1", "p1", text, (), "made-up", "holdout")
    model = [[span_in(text, "83"), span_in(text, "Smith", "DOCTOR")]]
    with_regex, added = add_regex_spans([note], model, ["DATE", "AGE"])
    assert added == 2  # "10/20" and the 92 of an over-89 age
    kept, dropped = drop_young_age_spans([note], with_regex)
    assert dropped == 1
    assert [text[s.start : s.end] for s in kept[0]] == ["10/20", "Smith", "92"]
