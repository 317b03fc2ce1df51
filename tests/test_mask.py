from __future__ import annotations

import pytest

from synthdeid.errors import InputError
from synthdeid.labels import DEFAULT_COARSE_VIEW
from synthdeid.mask import PLACEHOLDER_RE, mask_note, unlabelled_mentions
from synthdeid.mentions import surface_mentions, surfaces_left
from synthdeid.notes import Note, Span


def note_with(text: str, marks: list[tuple[str, str]]) -> Note:
    """A note whose spans are the first unused occurrence of each (surface, label)."""
    spans, taken = [], 0
    for surface, label in marks:
        start = text.index(surface, taken)
        spans.append(Span(start, start + len(surface), label))
        taken = start + len(surface)
    return Note("n1", "p1", text, tuple(spans), "test", "seed")


def test_repeated_surfaces_share_a_placeholder_and_offsets_are_exact() -> None:
    note = note_with(
        "Dr. Ames saw pt on 3/14. ames called back 3/15. Dr. Bell agreed.",
        [
            ("Ames", "DOCTOR"),
            ("3/14", "DATE"),
            ("ames", "DOCTOR"),
            ("3/15", "DATE"),
            ("Bell", "DOCTOR"),
        ],
    )
    result = mask_note(note)
    masked = result.note
    assert masked.text == (
        "Dr. [[DOCTOR_1]] saw pt on [[DATE_1]]. [[DOCTOR_1]] called back [[DATE_2]]. "
        "Dr. [[DOCTOR_2]] agreed."
    )
    for span in masked.spans:
        assert PLACEHOLDER_RE.fullmatch(span.surface(masked.text))
        assert span.surface(masked.text).startswith(f"[[{span.label}_")
    for removed in result.removed:
        assert note.text[removed.start : removed.end] == removed.surface
        assert masked.text[removed.masked_start : removed.masked_end] == removed.placeholder
    assert not any(r.propagated for r in result.removed)


def test_unmarked_mentions_are_masked_with_the_same_placeholder() -> None:
    note = note_with("John Smith here. Smith said JOHN SMITH left.", [("John Smith", "PATIENT")])
    result = mask_note(note)
    assert result.note.text == "[[PATIENT_1]] here. Smith said [[PATIENT_1]] left."
    assert [r.propagated for r in result.removed] == [False, True]
    # "Smith" alone is not a gold surface: it stays (only gold surfaces are propagated)
    assert surfaces_left(result.note, ["John Smith"]) == []


def test_without_propagation_unmarked_mentions_stay_and_are_detected() -> None:
    note = note_with("GH today; back to GH.", [("GH", "HOSPITAL")])
    result = mask_note(note, propagate=False)
    assert result.note.text == "[[HOSPITAL_1]] today; back to GH."
    assert surfaces_left(result.note, ["GH"]) == ["GH"]


def test_mentions_are_whole_words_only() -> None:
    assert surface_mentions("age 92, BP 92/60, 1992, 920", "92") == [(4, 6), (11, 13)]
    note = note_with("In 92 and 1992.", [("92", "DATE")])
    assert unlabelled_mentions(note.text, note.spans) == []


def test_placeholder_digits_do_not_count_as_leaks() -> None:
    note = note_with("Age 1 today.", [("1", "AGE")])
    masked = mask_note(note).note
    assert masked.text == "Age [[AGE_1]] today."
    assert surfaces_left(masked, ["1"]) == []


def test_coarse_view_numbers_per_coarse_label() -> None:
    note = note_with("Dr. Ames and Mr. Cole.", [("Ames", "DOCTOR"), ("Cole", "PATIENT")])
    masked = mask_note(note, DEFAULT_COARSE_VIEW).note
    assert masked.text == "Dr. [[PER_1]] and Mr. [[PER_2]]."
    assert [s.label for s in masked.spans] == ["PER", "PER"]


def test_text_with_placeholder_syntax_is_refused() -> None:
    note = Note("n9", "p1", "already [[DATE_1]] here", (), "test", "seed")
    with pytest.raises(InputError, match=r"note 'n9'.*placeholder-like"):
        mask_note(note)
