from __future__ import annotations

from synthdeid.corpus_overview import overview_table, plot_overview
from synthdeid.notes import Note, Span


def test_overview_counts_per_part(tmp_path) -> None:
    notes = [
        Note("a", "p1", "Dr. Ames 3/14", (Span(4, 8, "DOCTOR"), Span(9, 13, "DATE")), "t", "seed"),
        Note("b", "p1", "no phi", (), "t", "seed"),
        Note("c", "p2", "Dr. Bell", (Span(4, 8, "DOCTOR"),), "t", "holdout"),
    ]
    table = overview_table(notes).set_index("part")
    assert table.loc["seed", ["patients", "notes", "notes_with_phi", "spans"]].tolist() == [
        1,
        2,
        1,
        2,
    ]
    assert table.loc["seed", "DOCTOR"] == 1 and table.loc["seed", "DATE"] == 1
    assert table.loc["train", "notes"] == 0
    assert table.loc["holdout", "DOCTOR"] == 1
    figure = tmp_path / "overview.png"
    plot_overview(overview_table(notes), figure, "test")
    assert figure.read_bytes().startswith(b"\x89PNG")
