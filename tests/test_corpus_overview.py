from __future__ import annotations

from matplotlib.colors import to_hex

from synthdeid.corpus_overview import WITHOUT_PHI_ALPHA, overview_table, plot_overview
from synthdeid.figures import SERIES_COLORS
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
    fig = plot_overview(overview_table(notes), figure, "test")
    assert figure.read_bytes().startswith(b"\x89PNG")
    left, right = fig.axes
    assert left.get_xlabel() == "part of the split" and left.get_ylabel() == "notes"
    assert right.get_xlabel() == "canonical PHI label" and right.get_ylabel() == "gold spans"
    assert "n = 3" in left.get_title() and "n = 3" in right.get_title()
    # the counts are written on the bars, so the figure needs no table beside it
    assert {t.get_text() for t in left.texts} == {"1", ""}  # empty bars stay unlabelled
    assert {t.get_text() for t in right.texts} == {"1", ""}
    # a colour means a part in both panels (with / without PHI: solid / light and hatched)
    parts = ["seed", "train", "holdout"]
    solid = [to_hex(bar.get_facecolor(), keep_alpha=False) for bar in left.patches[:3]]
    assert solid == [to_hex(c) for c in SERIES_COLORS[:3]]
    assert [bar.get_alpha() for bar in left.patches[3:]] == [WITHOUT_PHI_ALPHA] * 3
    assert [to_hex(bar.get_facecolor(), keep_alpha=False) for bar in left.patches[3:]] == solid
    by_part = {c.get_label(): c for c in right.containers}
    for part, colour in zip(parts, solid, strict=True):
        assert {to_hex(bar.get_facecolor()) for bar in by_part[part]} == {colour}
    assert [t.get_text() for t in left.get_legend().get_texts()] == ["with PHI", "without PHI"]
