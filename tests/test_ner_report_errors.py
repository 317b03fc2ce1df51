"""report-errors: missed, mislabelled and spurious spans with P(O), on hand-made notes."""

from __future__ import annotations

import numpy as np
import pytest

from synthdeid.errors import ConfigError
from synthdeid.local_only import LOCAL_ONLY_KEY
from synthdeid.ner.report_errors import (
    development_notes,
    errors_table,
    note_errors,
    span_p_o,
    summarize,
)
from synthdeid.notes import Note, Span

TEXT = "Dr Quill saw Vera Moss on 3/14 at noon."
#       0123456789012345678901234567890123456789
GOLD = (Span(3, 8, "DOCTOR"), Span(13, 22, "PATIENT"), Span(26, 30, "DATE"))


def tokens() -> tuple[np.ndarray, np.ndarray]:
    """Word offsets and P(tags) (O first) with a known P(O) per word."""
    words = [(0, 2), (3, 8), (9, 12), (13, 17), (18, 22), (23, 25), (26, 30), (31, 33), (34, 38)]
    p_o = [0.99, 0.10, 0.98, 0.55, 0.65, 0.97, 0.999, 0.2, 0.9]
    probs = np.array([[p, 1 - p] for p in p_o])
    return np.array(words), probs


def test_each_kind_with_its_p_o() -> None:
    note = Note("n1", "p1", TEXT, GOLD, "unit", "seed")
    offsets, probs = tokens()
    predicted = [Span(3, 8, "DOCTOR"), Span(13, 17, "DOCTOR"), Span(31, 33, "LOCATION")]
    errors = note_errors(note, predicted, offsets, probs)
    assert [(e.kind, e.gold_label, e.predicted_label, e.start) for e in errors] == [
        ("mislabelled", "PATIENT", "DOCTOR", 13),
        ("missed", "DATE", None, 26),
        ("spurious", None, "LOCATION", 31),
    ]
    mislabelled, missed, spurious = errors
    assert mislabelled.p_o_min == pytest.approx(0.55)
    assert mislabelled.p_o_mean == pytest.approx(0.60)
    assert missed.p_o_min == pytest.approx(0.999)
    assert spurious.p_o_min == pytest.approx(0.2)


def test_a_span_without_tokens_has_no_p_o() -> None:
    offsets, probs = tokens()
    assert span_p_o(Span(38, 39, "OTHER"), offsets, probs) == (None, None)


def test_table_is_local_only_with_context_and_summary_has_no_text() -> None:
    note = Note("n1", "p1", TEXT, GOLD, "unit", "seed")
    offsets, probs = tokens()
    errors = note_errors(note, [Span(31, 33, "LOCATION")], offsets, probs)
    table = errors_table(errors, {"n1": note})
    assert table.schema.metadata[LOCAL_ONLY_KEY] == b"true"
    rows = table.to_pylist()
    assert [r["text"] for r in rows] == ["Quill", "Vera Moss", "3/14", "at"]
    assert (
        rows[1]["left_context"] == "Dr Quill saw "
        and rows[1]["right_context"] == " on 3/14 at noon."
    )
    summary = summarize(errors, [note])
    assert summary["errors"]["missed"]["count"] == 3
    assert summary["errors"]["missed"]["by_label"] == {"DATE": 1, "DOCTOR": 1, "PATIENT": 1}
    assert summary["errors"]["spurious"]["by_label"] == {"LOCATION": 1}
    assert summary["errors"]["mislabelled"]["p_o_min"]["median"] is None
    assert "Quill" not in repr(summary)


def test_development_notes_never_include_holdout_or_trained_notes() -> None:
    notes = [
        Note("s1", "p1", "a", (), "unit", "seed"),
        Note("s2", "p2", "b", (), "unit", "seed"),
        Note("h1", "p3", "c", (), "unit", "holdout"),
    ]
    validation = [Note("v1", "p4", "d", (), "unit", "validation")]
    chosen = development_notes(notes, ["seed"], validation, trained={"s2"})
    assert [n.note_id for n in chosen] == ["s1", "v1"]
    with pytest.raises(ConfigError, match="holdout"):
        development_notes(notes, ["seed", "holdout"], validation, trained=set())
