from __future__ import annotations

import random
import time

import pytest

from synthdeid.errors import InputError
from synthdeid.labels import DEFAULT_COARSE_VIEW
from synthdeid.mask import PLACEHOLDER_RE, mask_note, normalize_surface, unlabelled_mentions
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


def pairwise_unlabelled_mentions(text: str, spans: tuple[Span, ...]) -> list[Span]:
    """The definition of unlabelled_mentions, by comparing every mention with every span."""
    label_of: dict[str, tuple[str, str]] = {}
    for span in sorted(spans):
        label_of.setdefault(normalize_surface(span.surface(text)), (span.surface(text), span.label))
    taken = [(s.start, s.end) for s in spans]
    found = []
    for surface, label in sorted(label_of.values(), key=lambda v: -len(v[0])):
        for start, end in surface_mentions(text, surface):
            if all(end <= a or start >= b for a, b in taken):
                taken.append((start, end))
                found.append(Span(start, end, label))
    return found


WORDS = [
    "Ames",
    "ames",
    "AMES",
    "John",
    "Smith",
    "SMITH",
    "1/",
    "1/2",
    "3/14",
    "Dr.",
    "Dr",
    "(",
    ",",
]
GAPS = [" ", "  ", "\n", "", "-", " / "]


def test_unlabelled_mentions_agree_with_the_pairwise_definition() -> None:
    rng = random.Random(3)
    for _ in range(500):
        pieces, starts = [], []
        length = 0
        for _ in range(rng.randint(1, 25)):
            starts.append((length, length + len(word := rng.choice(WORDS))))
            pieces.append(word + (gap := rng.choice(GAPS)))
            length += len(word) + len(gap)
        text = "".join(pieces)
        spans, end = [], 0
        for start, stop in starts:
            if rng.random() < 0.3 and start >= end:
                if rng.random() < 0.3:  # two words as one span, when the next one fits
                    following = [s for s in starts if s[0] >= stop]
                    stop = following[0][1] if following else stop
                spans.append(Span(start, stop, rng.choice(["DOCTOR", "PATIENT", "DATE"])))
                end = stop
        gold = tuple(spans)
        assert unlabelled_mentions(text, gold) == pairwise_unlabelled_mentions(text, gold), text


def best_seconds(note: Note, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        mask_note(note)
        times.append(time.perf_counter() - start)
    return min(times)


def date_tokens(n: int) -> Note:
    """n ``1/`` tokens, every tenth a gold DATE: the rest are unmarked mentions."""
    spans = tuple(Span(3 * i, 3 * i + 2, "DATE") for i in range(0, n, 10))
    return Note("n1", "p1", "1/ " * n, spans, "test", "seed")


def test_masking_time_grows_linearly_with_the_mentions() -> None:
    small, large = date_tokens(4000), date_tokens(16000)
    masked = mask_note(large)
    assert masked.note.text == "[[DATE_1]] " * 16000
    assert sum(r.propagated for r in masked.removed) == 16000 - 1600
    # four times the mentions: about four times the time (pairwise checks took sixteen)
    assert best_seconds(large) < 8 * best_seconds(small)
