"""The replacement engine: offsets, offset map, checks, streaming, keys."""

from __future__ import annotations

import hashlib
import json

import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synthdeid.cli import main
from synthdeid.errors import ConfigError
from synthdeid.labels import CANONICAL_LABELS
from synthdeid.notes import Note, Span, read_notes, write_notes
from synthdeid.surrogate.keying import SECRET_VARIABLE, SurrogateKey, load_key
from synthdeid.surrogate.operators.base import Mention, SurrogateOperator, register
from synthdeid.surrogate.replace import (
    IdentityReplacementError,
    OffsetEntry,
    SurrogateReplacer,
    carry_spans,
    project_offset,
)
from synthdeid.surrogate.replace_table import SURROGATE_SCHEMA

KEY = SurrogateKey(b"unit-test-key")
# a secret that load_key accepts (64 hex digits, like `openssl rand -hex 32`)
SECRET = hashlib.sha256(b"surrogate replacement tests").hexdigest()
# label-independent operators, so properties hold whatever the text looks like
HASHED = {label: {"operator": "hash", "options": {"length": 6}} for label in CANONICAL_LABELS}


@register
class EchoOperator(SurrogateOperator):
    """Returns the original: the engine must refuse it (it does not allow identity)."""

    name = "test_echo"

    def replace(self, mention: Mention) -> str:
        return mention.surface


def note(text: str, *spans: tuple[int, int, str], patient: str = "p1") -> Note:
    return Note("n1", patient, text, tuple(Span(*s) for s in spans), "test", "seed")


def test_offsets_are_recorded_at_insertion_and_text_outside_is_kept() -> None:
    source = note(
        "Dr. Ames on 3/14 at GH.", (4, 8, "DOCTOR"), (12, 16, "DATE"), (20, 22, "HOSPITAL")
    )
    result = SurrogateReplacer(KEY, HASHED).replace_note(source)
    out = result.note
    assert [s.label for s in out.spans] == ["DOCTOR", "DATE", "HOSPITAL"]
    assert out.text.startswith("Dr. ") and out.text.endswith(".")
    for old, entry in zip(source.spans, result.offset_map, strict=True):
        assert (entry.old_start, entry.old_end) == (old.start, old.end)
        assert len(out.text[entry.new_start : entry.new_end]) == 6
    assert out.text[result.offset_map[0].new_end : result.offset_map[1].new_start] == " on "


def test_labels_not_selected_are_copied_with_offsets_moved() -> None:
    source = note("Dr. Ames on 3/14.", (4, 8, "DOCTOR"), (12, 16, "DATE"))
    result = SurrogateReplacer(KEY, HASHED, labels=["DOCTOR"]).replace_note(source)
    date = result.note.spans[1]
    assert result.note.text[date.start : date.end] == "3/14"


def test_identity_replacement_is_an_error_unless_allowed() -> None:
    policies = {"DOCTOR": {"operator": "test_echo"}}
    with pytest.raises(IdentityReplacementError, match=r"note 'n1'.*test_echo"):
        SurrogateReplacer(KEY, policies, labels=["DOCTOR"]).replace_note(
            note("Dr. Ames", (4, 8, "DOCTOR"))
        )
    kept = SurrogateReplacer(KEY, {"DOCTOR": {"operator": "keep"}}, labels=["DOCTOR"])
    assert kept.replace_note(note("Dr. Ames", (4, 8, "DOCTOR"))).note.text == "Dr. Ames"
    assert kept.kept_deliberately["DOCTOR"] == 1


def test_surfaces_left_elsewhere_are_reported() -> None:
    # the second "Ames" was missed by the annotation: it survives and is reported
    source = note("Dr. Ames saw pt. Ames agreed.", (4, 8, "DOCTOR"))
    assert SurrogateReplacer(KEY, HASHED).replace_note(source).surfaces_left == ["Ames"]


def test_project_offset_and_carry_spans() -> None:
    offset_map = [OffsetEntry(4, 8, 4, 14), OffsetEntry(12, 16, 18, 20)]
    assert project_offset(offset_map, 0) == 0
    assert project_offset(offset_map, 4) == 4
    assert project_offset(offset_map, 6) == 4  # inside a replaced span: its start
    assert project_offset(offset_map, 8) == 14
    assert project_offset(offset_map, 10) == 16
    assert project_offset(offset_map, 16) == 20
    assert project_offset(offset_map, 20) == 24
    assert carry_spans([Span(0, 8, "SENT"), Span(9, 16, "X")], offset_map) == [
        Span(0, 14, "SENT"),
        Span(15, 20, "X"),
    ]


def test_unknown_policies_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="unknown surrogate operator 'nope'"):
        SurrogateReplacer(KEY, {"DATE": {"operator": "nope"}})
    with pytest.raises(ConfigError, match="unknown labels"):
        SurrogateReplacer(KEY, {"NAME": {"operator": "redact"}})


@st.composite
def notes_with_spans(draw: st.DrawFn) -> Note:
    text = draw(
        st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=80)
    )
    cuts = sorted(set(draw(st.lists(st.integers(0, len(text)), max_size=8))))
    spans = []
    for start, end in zip(cuts[::2], cuts[1::2], strict=False):
        if start < end:
            spans.append((start, end, draw(st.sampled_from(CANONICAL_LABELS))))
    return note(text, *spans, patient=draw(st.sampled_from(["p1", "p2"])))


@settings(max_examples=200, deadline=None)
@given(notes_with_spans())
def test_property_offsets_valid_and_text_outside_spans_unchanged(source: Note) -> None:
    result = SurrogateReplacer(KEY, HASHED).replace_note(source)
    out = result.note
    previous_old, previous_new = 0, 0
    for old, new, entry in zip(source.spans, out.spans, result.offset_map, strict=True):
        assert 0 <= new.start <= new.end <= len(out.text)
        assert (new.start, new.end) == (entry.new_start, entry.new_end)
        # the text between spans is the same, byte for byte
        assert out.text[previous_new : new.start] == source.text[previous_old : old.start]
        previous_old, previous_new = old.end, new.end
    assert out.text[previous_new:] == source.text[previous_old:]


def test_key_loading(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv(SECRET_VARIABLE, raising=False)
    with pytest.raises(ConfigError, match=f"set the environment variable {SECRET_VARIABLE}"):
        load_key()
    with pytest.raises(ConfigError, match="does not exist"):
        load_key(tmp_path / "missing.key")
    (tmp_path / "empty.key").write_text("\n")
    with pytest.raises(ConfigError, match="is empty"):
        load_key(tmp_path / "empty.key")
    monkeypatch.setenv(SECRET_VARIABLE, SECRET)
    key = load_key()
    assert SECRET not in repr(key)
    assert key.fingerprint() == SurrogateKey(SECRET.encode()).fingerprint()
    assert SurrogateKey(b"a").fingerprint() != SurrogateKey(b"b").fingerprint()


def test_cli_streams_and_writes_schema_summary_without_the_key(tmp_path, monkeypatch) -> None:
    notes = [
        Note(
            f"n{i}",
            f"p{i % 3}",
            "Seen by Dr. Ames on 3/14.",
            (Span(12, 16, "DOCTOR"),),
            "t",
            "seed",
        )
        for i in range(25)
    ]
    source, out = tmp_path / "in.parquet", tmp_path / "out" / "notes.parquet"
    write_notes(notes, source)
    monkeypatch.setenv(SECRET_VARIABLE, SECRET)
    policies = json.dumps(HASHED)
    assert (
        main(
            [
                "replace-surrogates",
                str(source),
                str(out),
                "--policies",
                policies,
                "--batch-rows",
                "4",
            ]
        )
        == 0
    )
    assert pq.read_schema(out).remove_metadata() == SURROGATE_SCHEMA
    # read in batches of 4, written in the fixed row groups of artifacts.parquet_writer
    assert pq.ParquetFile(out).metadata.num_row_groups == 1
    replaced = read_notes(out)
    assert len(replaced) == 25 and all("Ames" not in n.text for n in replaced)
    written = "".join(p.read_text(errors="ignore") for p in out.parent.rglob("*") if p.is_file())
    written += out.read_bytes().decode("latin-1")
    assert SECRET not in written
    summary = json.loads((out.parent / "notes.summary.json").read_text())
    assert summary["summary"]["replaced_by_label"] == {"DOCTOR": 25}
    assert (
        summary["provenance"]["params"]["key_fingerprint"]
        == SurrogateKey(SECRET.encode()).fingerprint()
    )


def test_cli_without_key_fails_before_writing(tmp_path, monkeypatch) -> None:
    write_notes([note("Dr. Ames", (4, 8, "DOCTOR"))], tmp_path / "in.parquet")
    monkeypatch.delenv(SECRET_VARIABLE, raising=False)
    out = tmp_path / "out"
    out.mkdir()
    assert (
        main(["replace-surrogates", str(tmp_path / "in.parquet"), str(out / "notes.parquet")]) == 2
    )
    assert list(out.iterdir()) == []
