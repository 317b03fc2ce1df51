"""Surrogates on the PhysioNet deid developer part (PHYSIONET_DEID_DIR): counts computed from the files."""

from __future__ import annotations

import hashlib

import pytest

from synthdeid.ingest import IngestResult
from synthdeid.notes import Note
from synthdeid.surrogate.keying import SurrogateKey
from synthdeid.surrogate.operators import normalize
from synthdeid.surrogate.replace import SurrogateReplacer

# labels whose operator writes a category, not a value ("90+", "[OTHER]")
CATEGORY_LABELS = {"AGE", "OTHER"}
SECRETS = [hashlib.sha256(f"physionet surrogates {i}".encode()).hexdigest() for i in range(2)]


@pytest.fixture(scope="module")
def notes(physionet_ingest: IngestResult) -> list[Note]:
    return physionet_ingest.notes


def collisions(notes: list[Note], replacer: SurrogateReplacer) -> int:
    """Spans whose surrogate equals (casefolded) any original surface of the same patient."""
    originals: dict[str, set[str]] = {}
    for note in notes:
        for span in note.spans:
            originals.setdefault(note.patient_id, set()).add(normalize(span.surface(note.text)))
    found = 0
    for note in notes:
        out = replacer.replace_note(note).note
        for old, new in zip(note.spans, out.spans, strict=True):
            before, after = old.surface(note.text), new.surface(out.text)
            if old.label in CATEGORY_LABELS or after == before:
                continue
            found += normalize(after) in originals[note.patient_id]
    return found


@pytest.mark.parametrize("secret", SECRETS)
def test_no_surrogate_equals_an_original_of_its_patient(notes: list[Note], secret: str) -> None:
    key = SurrogateKey(secret.encode())
    # without the originals, draws do land on other originals of the patient
    assert collisions(notes, SurrogateReplacer(key)) > 0
    replacer = SurrogateReplacer(key)
    replacer.collect(notes)
    assert collisions(notes, replacer) == 0
    assert replacer.collisions == {}


def test_dates_rarely_fall_back_to_same_shape_surrogates(notes: list[Note]) -> None:
    replacer = SurrogateReplacer(SurrogateKey(SECRETS[0].encode()), labels=["DATE"])
    replacer.collect(notes)
    for note in notes:
        replacer.replace_note(note)
    counts = replacer.operators["DATE"].counts
    dates = sum(span.label == "DATE" for note in notes for span in note.spans)
    assert counts["shifted_dates"] + counts["unparsed_dates"] == dates
    # month names, ordinal days, two-digit years and ranges are all shifted; what
    # is left is no date (a lone digit, a decade, a day past the month's end)
    assert counts["unparsed_dates"] <= 5
    assert counts["dates_colliding_with_originals"] == 0
