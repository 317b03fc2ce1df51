"""No surrogate equals another original of its scope (same patient, or corpus-wide)."""

from __future__ import annotations

import hashlib
import json

import pytest

from synthdeid.cli import main
from synthdeid.notes import Note, Span, read_notes, write_notes
from synthdeid.surrogate.keying import SECRET_VARIABLE, SurrogateKey
from synthdeid.surrogate.operators import formats, normalize, places, simple
from synthdeid.surrogate.operators.base import (
    Mention,
    Originals,
    SurrogateOperator,
    register,
)
from synthdeid.surrogate.operators.names import NameOperator, initial_letters, name_words
from synthdeid.surrogate.release_ids import read_id_map, restore_ids
from synthdeid.surrogate.replace import SurrogateReplacer

KEY = SurrogateKey(b"originals test key")
SECRET = hashlib.sha256(b"surrogate originals tests").hexdigest()


@register
class ConstantOperator(SurrogateOperator):
    """Always ``Zed``: lets the engine's own check meet a surrogate equal to an original."""

    name = "test_constant"

    def replace(self, mention: Mention) -> str:
        return "Zed"


def labelled(note_id: str, patient: str, *pieces: str | tuple[str, str]) -> Note:
    """A note from plain text pieces and (surface, label) pieces, spans where the labels are."""
    text, spans = "", []
    for piece in pieces:
        if isinstance(piece, tuple):
            surface, label = piece
            spans.append(Span(len(text), len(text) + len(surface), label))
            text += surface
        else:
            text += piece
    return Note(note_id, patient, text, tuple(spans), "test", "seed")


def collisions(notes: list[Note], replaced: list[Note], casefold: bool = True) -> list[str]:
    """Surrogates equal to an original of the same patient (each span's own original aside)."""
    originals: dict[str, set[str]] = {}
    for note in notes:
        for span in note.spans:
            originals.setdefault(note.patient_id, set()).add(normalize(span.surface(note.text)))
    found = []
    for note, out in zip(notes, replaced, strict=True):
        for old, new in zip(note.spans, out.spans, strict=True):
            before, after = old.surface(note.text), new.surface(out.text)
            if after != before and normalize(after) in originals[note.patient_id]:
                found.append(after)
    return found


def replace_all(notes: list[Note], collect: bool = True, **options) -> list[Note]:
    replacer = SurrogateReplacer(KEY, **options)
    if collect:
        replacer.collect(notes)
    return [replacer.replace_note(note).note for note in notes]


def test_a_doctor_surrogate_is_never_another_doctors_real_name() -> None:
    # "Dr. X" is the real name another doctor of the same patient has, where X is
    # exactly what "Ames" would become if the other originals were not known
    taken = NameOperator(KEY).surrogate_word("p1", "last", "Ames")
    note = labelled(
        "n1", "p1", "Seen by ", ("Dr. Ames", "DOCTOR"), " and ", (f"Dr. {taken}", "DOCTOR")
    )
    assert collisions([note], replace_all([note], collect=False)) == [f"Dr. {taken}"]
    replaced = replace_all([note])
    assert collisions([note], replaced) == []
    assert taken.casefold() not in replaced[0].text.casefold()[: replaced[0].spans[1].start]


def test_names_are_compared_case_insensitively_across_notes_and_labels() -> None:
    taken = NameOperator(KEY).surrogate_word("p1", "last", "Ames")
    notes = [
        labelled("n1", "p1", ("Ames", "DOCTOR"), " visited."),
        labelled("n2", "p1", "Family: ", (taken.upper(), "PATIENT")),
    ]
    assert collisions(notes, replace_all(notes, collect=False)) == [taken]
    assert collisions(notes, replace_all(notes)) == []
    # another patient's originals do not constrain this patient ...
    other = [notes[0], labelled("n3", "p2", (taken, "PATIENT"))]
    assert replace_all(other)[0].text.startswith(taken)
    # ... unless consistency is corpus-wide
    corpus = replace_all(other, consistency="corpus")
    assert collisions(other, corpus) == [] and not corpus[0].text.startswith(taken)


def test_an_initial_is_never_another_originals_initial() -> None:
    taken = NameOperator(KEY).surrogate_letter("p1", "J")
    note = labelled("n1", "p1", ("J", "PATIENT"), " and ", (taken, "PATIENT"))
    assert collisions([note], replace_all([note], collect=False)) == [taken]
    assert collisions([note], replace_all([note])) == []


def test_a_place_surrogate_is_never_another_place_of_the_patient() -> None:
    taken = places.LocationOperator(KEY).replace(Mention("Springfield", "LOCATION", "p1", "n1"))
    note = labelled("n1", "p1", "From ", ("Springfield", "LOCATION"), " via ", (taken, "LOCATION"))
    assert collisions([note], replace_all([note], collect=False)) == [taken]
    assert collisions([note], replace_all([note])) == []


@pytest.mark.parametrize(
    ("operator", "policy"),
    [
        (formats.FormatPreservingOperator(KEY), {"operator": "format_preserving"}),
        (simple.HashOperator(KEY), {"operator": "hash"}),
    ],
)
def test_an_identifier_surrogate_is_never_another_identifier(operator, policy) -> None:
    taken = operator.replace(Mention("A12", "ID", "p1", "n1"))
    note = labelled("n1", "p1", "MRN ", ("A12", "ID"), ", old MRN ", (taken, "ID"))
    policies = {"ID": policy}
    assert collisions([note], replace_all([note], collect=False, policies=policies)) == [taken]
    assert collisions([note], replace_all([note], policies=policies)) == []


def test_a_date_is_never_shifted_onto_another_date_of_the_patient() -> None:
    policies = {"DATE": {"operator": "date_shift", "options": {"min_days": 3, "max_days": 4}}}
    notes = [
        labelled(f"n{i}", f"p{i}", ("3/30", "DATE"), " and ", ("4/2", "DATE")) for i in range(30)
    ]
    notes += [labelled(f"m{i}", f"p{i}", ("3/27", "DATE")) for i in range(30)]
    assert collisions(notes, replace_all(notes, collect=False, policies=policies))
    assert collisions(notes, replace_all(notes, policies=policies)) == []


def test_the_engine_counts_a_surrogate_equal_to_an_original() -> None:
    # Zed is an original of the patient (of a label left as it is)
    note = labelled("n1", "p1", ("Amy", "DOCTOR"), " from ", ("Zed", "LOCATION"))
    replacer = SurrogateReplacer(KEY, {"DOCTOR": {"operator": "test_constant"}}, labels=["DOCTOR"])
    replacer.collect([note])
    replacer.replace_note(note)
    assert replacer.collisions == {"DOCTOR": 1}


def test_originals_are_collected_before_any_replacement() -> None:
    note = labelled("n1", "p1", ("Ames", "DOCTOR"))
    replacer = SurrogateReplacer(KEY)
    replacer.replace_note(note)
    with pytest.raises(RuntimeError, match="before replacing"):
        replacer.collect([note])


def test_originals_keep_normalised_surfaces_by_scope() -> None:
    originals = Originals()
    originals.add("p1", "  Dr.  AMES ")
    originals.add("p2", "3/30")
    assert "dr. ames" in originals.taken("p1") and "3/30" not in originals.taken("p1")
    assert "dr. ames" in originals.taken("*") and "3/30" in originals.taken("*")
    assert "Dr. Ames" not in originals.taken("p1")  # asked normalised, as kept
    patients = Originals(["patient"])
    patients.add("p1", "Ames")
    assert "ames" in patients.taken("p1") and "ames" not in patients.taken("*")
    with pytest.raises(RuntimeError, match="before the first original"):
        patients.keep_scopes(["corpus"])


def test_originals_keep_the_parts_each_view_takes() -> None:
    originals = Originals()
    originals.add_view("words", str.split)
    originals.add_view("words", str.upper)  # a view registered again keeps its first parts
    originals.add("p1", "Dr. Ames")
    assert {"dr.", "ames"} <= {
        w for w in ["dr.", "ames", "x"] if w in originals.taken("p1", "words")
    }
    assert "dr. ames" not in originals.taken("p1", "words")
    assert "ames" not in originals.taken("p1")  # the surfaces view keeps whole surfaces
    with pytest.raises(RuntimeError, match="before the first original"):
        originals.add_view("letters", list)


def test_name_views_take_words_and_initials_as_the_operator_avoids_them() -> None:
    surface = normalize("Dr. O'Brien-Smith, J.S. and JS Lee")
    assert set(name_words(surface)) == {"dr", "o'brien", "o", "brien", "smith", "and", "js", "lee"}
    assert set(initial_letters(surface)) == {"j", "s"}


def test_the_originals_are_collected_once() -> None:
    note = labelled("n1", "p1", ("Ames", "DOCTOR"))
    replacer = SurrogateReplacer(KEY)
    replacer.collect([note])
    with pytest.raises(RuntimeError, match="once"):
        replacer.collect([note])


def test_cli_avoids_originals_of_later_batches(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(SECRET_VARIABLE, SECRET)
    # what "Ames" would become under the CLI's key if later originals were not known
    taken = NameOperator(SurrogateKey(SECRET.encode())).surrogate_word("p1", "last", "Ames")
    notes = [
        labelled("n1", "p1", "Seen by ", ("Dr. Ames", "DOCTOR"), "."),
        *[labelled(f"f{i}", f"q{i}", "Nothing here.") for i in range(3)],
        labelled("n2", "p1", "Call ", (f"Dr. {taken}", "DOCTOR"), "."),
    ]
    source, out = tmp_path / "in.parquet", tmp_path / "out" / "notes.parquet"
    write_notes(notes, source)
    # one note a batch: the colliding original is read three batches later
    assert main(["replace-surrogates", str(source), str(out), "--batch-rows", "1"]) == 0
    id_map = out.parent / "local" / "notes.offsets.parquet"  # released ids -> original ids
    restored = restore_ids(read_notes(out), read_id_map(id_map), id_map)
    replaced = {note.note_id: note for note in restored}
    assert collisions(notes, [replaced[n.note_id] for n in notes]) == []
    assert taken not in replaced["n1"].text
    summary = json.loads((out.parent / "notes.summary.json").read_text())["summary"]
    assert summary["surrogates_equal_to_an_original"] == {}
