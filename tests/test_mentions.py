"""SurfaceIndex: many surfaces found at once, whole word, any case and spacing."""

from __future__ import annotations

from synthdeid.mentions import SurfaceIndex, surface_mentions


def test_whole_word_any_case_any_spacing():
    index = SurfaceIndex(["Dr. Okafor", "Ann", "Lakeside Clinic", "10/15"])
    text = "seen by DR.  OKAFOR at lakeside\nclinic on 10/15; Annual review, ann agrees"
    found = [text[a:b] for a, b in index.find(text)]
    assert found == ["DR.  OKAFOR", "lakeside\nclinic", "10/15", "ann"]


def test_short_surfaces_are_skipped_and_counted():
    index = SurfaceIndex(["B", "74", "Bo", "Ann"], min_chars=3)
    assert index.skipped == 3 and len(index) == 1
    assert not index.contains_any("B 74 Bo")


def test_agrees_with_the_single_surface_finder():
    text = "Mr Quill and quill-pen; QUILLS; Quill."
    index = SurfaceIndex(["Quill"])
    assert index.find(text) == surface_mentions(text, "Quill")
