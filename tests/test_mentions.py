"""Finding surfaces: SurfaceIndex (token keys) and MentionFinder (surface_mentions, in one pass)."""

from __future__ import annotations

import random
import re
import sys

from synthdeid.mentions import MentionFinder, SurfaceIndex, surface_mentions


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


# characters whose case or spacing the regex engine treats specially: the Kelvin
# sign and long s fold to ASCII letters, dotted and dotless i, final sigma, ...
TRICKY = [*"aAkKsSiI19/.-éÉ", "\u212a", "\u017f", "\u0130", "\u0131", "\u00df", "\u1e9e"]
TRICKY += ["\u03c3", "\u03a3", "\u03c2", "\u0390", "\u1fd3", "\ufb05", "\ufb06"]
SPACES = [" ", "  ", "\n", "\t", "\u00a0", "\u2028", "\x1c", "\x85"]


def test_finder_gives_what_surface_mentions_gives_on_random_text() -> None:
    rng = random.Random(7)
    alphabet = TRICKY + SPACES
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        surfaces = []
        for _ in range(rng.randint(1, 5)):
            if text and rng.random() < 0.7:
                start = rng.randrange(len(text))
                surfaces.append(text[start : start + rng.randint(1, 6)])
            else:
                surfaces.append("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 4))))
        expected = [surface_mentions(text, surface) for surface in surfaces]
        assert MentionFinder(surfaces).find(text) == expected, (text, surfaces)


def test_finder_folds_case_and_space_as_the_regex_engine_does() -> None:
    characters = "".join(chr(c) for c in range(sys.maxunicode + 1) if not 0xD800 <= c < 0xE000)
    assert set(re.findall(r"\s", characters)) == {c for c in characters if c.isspace()}
    # every character with a case mapping, each a word of its own
    cased = [c for c in characters if (c.lower() != c or c.upper() != c) and not c.isspace()]
    text = " ".join(cased)
    expected = [surface_mentions(text, c) for c in cased]
    assert MentionFinder(cased).find(text) == expected
