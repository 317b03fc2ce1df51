"""Aligning extracted strings to note offsets: every occurrence, relaxed match, boundaries."""

from __future__ import annotations

from synthdeid.teacher.alignment import align_entities
from synthdeid.teacher.extraction import Extracted
from synthdeid.teacher.silver import COUNT_FIELDS, ScoredSpan


def counts(**nonzero: int) -> dict[str, int]:
    found = dict.fromkeys(
        ("aligned_exact", "aligned_relaxed", "occurrences", "absent", "inside_word", "malformed"),
        0,
    )
    found.update(nonzero)
    return found


def texts(text: str, spans: list[ScoredSpan]) -> list[str]:
    return [text[s.start : s.end] for s in spans]


def test_every_occurrence_becomes_a_span() -> None:
    text = "Mr. Smith was seen on 3/14. Smith denies pain; Smith's wife agrees."
    spans, found = align_entities(text, [Extracted("PATIENT", "Smith", 0.9)])
    assert spans == [
        ScoredSpan(4, 9, "PATIENT", 0.9),
        ScoredSpan(28, 33, "PATIENT", 0.9),
        ScoredSpan(47, 52, "PATIENT", 0.9),
    ]
    assert texts(text, spans) == ["Smith"] * 3
    assert found == counts(aligned_exact=1, occurrences=3)
    assert set(found) <= set(COUNT_FIELDS)


def test_relaxed_match_ignores_case_and_whitespace() -> None:
    text = "Patient: JOHN\n  SMITH, 45 y/o.\nSeen by john smith's team."
    spans, found = align_entities(text, [Extracted("PATIENT", "john  smith", None)])
    # no exact occurrence of "john  smith": both relaxed occurrences, offsets of the note text
    assert spans == [ScoredSpan(9, 21, "PATIENT", None), ScoredSpan(39, 49, "PATIENT", None)]
    assert texts(text, spans) == ["JOHN\n  SMITH", "john smith"]
    assert found == counts(aligned_relaxed=1, occurrences=2)


def test_relaxed_only_when_exact_finds_nothing() -> None:
    text = "John Smith and JOHN SMITH"
    spans, found = align_entities(text, [Extracted("PATIENT", "John Smith", 0.8)])
    assert texts(text, spans) == ["John Smith"]
    assert found == counts(aligned_exact=1, occurrences=1)


def test_absent_string_is_a_hallucination() -> None:
    text = "Seen on 3/14 by Dr. Lee."
    spans, found = align_entities(text, [Extracted("PATIENT", "Jane Doe", 0.99)])
    assert spans == []
    assert found == counts(absent=1)


def test_string_only_inside_a_word() -> None:
    text = "Admitted in 2012 to the Annual clinic."
    spans, found = align_entities(
        text, [Extracted("AGE", "12", 0.6), Extracted("PATIENT", "ann", 0.6)]
    )
    assert spans == []
    assert found == counts(inside_word=2)


def test_inside_word_occurrence_does_not_hide_a_standalone_one() -> None:
    text = "In 2012 she was 12."
    spans, found = align_entities(text, [Extracted("AGE", "12", 0.7)])
    assert spans == [ScoredSpan(16, 18, "AGE", 0.7)]
    assert found == counts(aligned_exact=1, occurrences=1)


def test_rejected_occurrence_does_not_hide_an_overlapping_later_one() -> None:
    # "1.1" first occurs at 1 (preceded by "1": rejected); the scan resumes at 2 and finds 3
    text = "11.1.1"
    spans, found = align_entities(text, [Extracted("ID", "1.1", None)])
    assert spans == [ScoredSpan(3, 6, "ID", None)]
    assert found == counts(aligned_exact=1, occurrences=1)


def test_boundaries_with_punctuation() -> None:
    text = "Dr. Lee, (555) 123-4567;Dr. Lee.x(555) 123-4567"
    spans, found = align_entities(
        text, [Extracted("DOCTOR", "Dr. Lee", 1.0), Extracted("PHONE", "(555) 123-4567", 1.0)]
    )
    # "Dr. Lee" is followed by "," and "."; "(555)..." starts with "(", so the "x" before
    # its second occurrence does not matter
    assert texts(text, spans) == ["Dr. Lee", "(555) 123-4567", "Dr. Lee", "(555) 123-4567"]
    assert [s.start for s in spans] == [0, 9, 24, 33]
    assert found == counts(aligned_exact=2, occurrences=4)


def test_word_end_rejects_following_letters_but_not_punctuation_entities() -> None:
    text = "Dr. Leeds saw Dr. Lee"
    spans, found = align_entities(text, [Extracted("DOCTOR", "Dr. Lee", 0.9)])
    assert spans == [ScoredSpan(14, 21, "DOCTOR", 0.9)]
    assert found == counts(aligned_exact=1, occurrences=1)


def test_underscore_counts_as_a_word_character() -> None:
    text = "file_Smith and Smith_2"
    spans, found = align_entities(text, [Extracted("PATIENT", "Smith", None)])
    assert spans == []
    assert found == counts(inside_word=1)


def test_unicode_letters_are_word_characters() -> None:
    text = "Zoë Müller met Müllerová and MÜLLER."
    spans, found = align_entities(
        text, [Extracted("PATIENT", "Zoë", 0.5), Extracted("PATIENT", "Müller", 0.5)]
    )
    # "Müller" is exact once ("Müllerová" is rejected: "o" follows); relaxed is not tried
    assert texts(text, spans) == ["Zoë", "Müller"]
    assert found == counts(aligned_exact=2, occurrences=2)

    spans, found = align_entities("Ünal Öz", [Extracted("PATIENT", "ünal öz", None)])
    assert spans == [ScoredSpan(0, 7, "PATIENT", None)]
    assert found == counts(aligned_relaxed=1, occurrences=1)

    # "é" is alphanumeric, so "Jos" is not found inside "José"
    assert align_entities("José", [Extracted("PATIENT", "Jos", None)])[1] == counts(inside_word=1)


def test_surrounding_whitespace_is_stripped_and_empty_is_malformed() -> None:
    text = "Seen 3/14."
    spans, found = align_entities(
        text,
        [Extracted("DATE", "  3/14\n", 0.9), Extracted("DATE", "", 0.9), Extracted("DATE", " ", 1)],
    )
    assert spans == [ScoredSpan(5, 9, "DATE", 0.9)]
    assert found == counts(aligned_exact=1, occurrences=1, malformed=2)


def test_overlaps_are_left_for_later_and_spans_are_sorted() -> None:
    text = "John Smith; later Smith."
    entities = [
        Extracted("PATIENT", "Smith", None),
        Extracted("PATIENT", "John Smith", 0.9),
        Extracted("DOCTOR", "Smith", 0.3),
    ]
    spans, found = align_entities(text, entities)
    assert spans == [
        ScoredSpan(0, 10, "PATIENT", 0.9),
        ScoredSpan(5, 10, "DOCTOR", 0.3),
        ScoredSpan(5, 10, "PATIENT", None),
        ScoredSpan(18, 23, "DOCTOR", 0.3),
        ScoredSpan(18, 23, "PATIENT", None),
    ]
    assert found == counts(aligned_exact=3, occurrences=5)


def test_same_span_with_and_without_confidence_sorts() -> None:
    # ScoredSpan ordering would compare None with a float here; alignment must not
    spans, found = align_entities(
        "Smith", [Extracted("PATIENT", "Smith", 0.4), Extracted("PATIENT", "Smith", None)]
    )
    assert spans == [ScoredSpan(0, 5, "PATIENT", 0.4), ScoredSpan(0, 5, "PATIENT", None)]
    assert found == counts(aligned_exact=2, occurrences=2)


def test_regex_metacharacters_are_literal() -> None:
    text = "Visit www.site.org or wwwXsiteXorg; see (a+b)*."
    spans, found = align_entities(
        text, [Extracted("OTHER", "www.site.org", None), Extracted("OTHER", "(a+b)*", None)]
    )
    assert texts(text, spans) == ["www.site.org", "(a+b)*"]
    assert found == counts(aligned_exact=2, occurrences=2)


def test_no_entities_and_empty_note() -> None:
    assert align_entities("Some note.", []) == ([], counts())
    assert align_entities("", [Extracted("DATE", "3/14", None)]) == ([], counts(absent=1))
