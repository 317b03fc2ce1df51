"""Person names (PATIENT, DOCTOR, relatives): realistic Faker surrogates, token by token.

A name mention is split into tokens; titles ("Dr.", "Mrs") and credentials
(", MD", "RN", "Jr.") are kept as they are, every other word gets a surrogate
name and every initial another letter. Punctuation, whitespace, possessive
endings ("'s", "s'") and the order ("Smith, John") stay, and each surrogate
takes the case of the word it replaces (``SMITH`` -> ``GARCIA``, ``smith`` ->
``garcia``, ``Smith`` / ``McDonald`` -> ``Garcia`` as Faker spells it).

Consistency is per token, not per mention: a word's surrogate derives only
from the key, the scope (patient id, or ``*`` with ``consistency: corpus``),
its role (first or last name) and the casefolded word, so "John Smith",
"Smith", "SMITH'S" and "Smith, John" of one patient share the surrogate
surname and "John" always becomes the same first name. The mention's label
is not part of the derivation, so a patient's relatives (labelled PATIENT or
not) keep the family surname. Initials map letter to letter within the scope,
whatever their role ("J. Smith" and "J.S." agree on "J").

Roles (heuristics):

* a comma after the first name word ("Smith, John [A.]") means surname first;
* otherwise, with two or more name words, the last word is the surname and
  the others are given names ("John [Paul] Smith", "Mary Smith-Jones");
* a lone name word (initials aside: "Smith J", "John S.") is a given name if
  it is in the locale's Faker first-name list and no title precedes it, else a
  surname ("Smith", "Dr. James"). Words that are both ("James", "Lee") count as
  given names without a title, so "James" and "James Smith" agree.

Given names keep their gender where the Faker lists tell it (a name only in
the female list gets a female surrogate). Surrogates are drawn from the
locale's weighted Faker name lists with the Faker instance reseeded from an
HMAC before each draw (exactly what ``fake.last_name()`` would return for that
seed, without recomputing the weights each time), so a draw depends on
nothing but its inputs, never on call order. A draw equal to the original
word, or not a plain word, is redrawn with a counter in the HMAC.

The result never equals the original: every name word and initial is
replaced by a different one, separators are kept, and a surface with no name
word at all ("Dr.", "MD") has its titles replaced as names; a surface without
letters becomes a surname.

Nor is a surrogate another real name of the scope: a drawn word equal
(case-insensitively) to any word of any original of the scope, whatever its
label, is redrawn like one equal to the word itself, and an initial's letter is
drawn among the letters no original of the scope uses as an initial (while one
is left). Otherwise one doctor's surrogate could be another doctor's real name
in the same note, and that real name would then pass for a surrogate.
"""

from __future__ import annotations

import random
import re
import string
from collections import OrderedDict
from collections.abc import Container, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any, ClassVar, Literal

import faker

from synthdeid.errors import ConfigError
from synthdeid.surrogate.operators.base import (
    Mention,
    SurrogateOperator,
    normalize,
    register,
)

Role = Literal["first", "last"]
Kind = Literal["word", "initials", "title", "credential"]

# leading honorifics, compared casefolded without the period
TITLES = frozenset(
    {
        "dr", "doctor", "mr", "mrs", "ms", "miss", "mx", "mstr", "master", "prof",
        "professor", "rev", "reverend", "fr", "father", "sister", "sir", "dame", "madam",
        "lady", "lord", "capt", "sgt", "col", "hon",
    }
)  # fmt: skip
# trailing credentials and generational suffixes, after at least one name word
CREDENTIALS = frozenset(
    {
        "md", "do", "rn", "np", "pa", "pac", "phd", "dds", "dmd", "dnp", "pharmd", "crna",
        "lpn", "lvn", "aprn", "fnp", "msn", "bsn", "mph", "mba", "facs", "facp", "ccc", "slp",
        "ot", "pt", "pta", "cna", "jr", "sr", "ii", "iii", "iv", "esq",
    }
)  # fmt: skip
# credentials that are also plausible names or words: kept only when written as a
# credential (upper case, followed by a period, or after a comma)
AMBIGUOUS_CREDENTIALS = frozenset({"do", "pa", "pt", "ot", "ii", "iii", "iv"})

_APOSTROPHES = "'\u2019"  # ASCII and typographic
_LETTER = r"[^\W\d_]"
_PART = rf"{_LETTER}+(?:[{_APOSTROPHES}]{_LETTER}+)*"
# a dotted group ("J.S.", "M.D.", "Ph.D.") or a word, hyphenated parts allowed,
# with a trailing apostrophe ("Smiths'") taken along
_TOKEN = re.compile(
    rf"(?P<dotted>(?:{_LETTER}{{1,2}}\.){{2,}})"
    rf"|(?P<word>{_PART}(?:-{_PART})*)(?P<apos>[{_APOSTROPHES}](?!{_LETTER}))?"
)
_PLAIN_NAME = re.compile(_PART)
_POSSESSIVE_S = re.compile(rf"[{_APOSTROPHES}][sS]$")
_VOWELS = frozenset("aeiouy")
_MAX_DRAWS = 64
_CACHE_LIMIT = 1 << 16


@dataclass
class Token:
    """One name-like piece of a surface: its span, kind, role and possessive ending."""

    start: int
    end: int
    text: str
    kind: Kind
    suffix: str = ""  # possessive ending kept verbatim ("'s", "'", "s'")
    role: Role = "last"

    @property
    def stem(self) -> str:
        return self.text[: len(self.text) - len(self.suffix)]


@dataclass(frozen=True)
class NamePool:
    """A Faker name list: the names and, when weighted, their cumulative weights."""

    names: tuple[str, ...]
    cum_weights: tuple[float, ...] | None

    @classmethod
    def of(cls, elements: Sequence[str] | Mapping[str, float]) -> NamePool:
        if isinstance(elements, Mapping):
            return cls(tuple(elements), tuple(accumulate(elements.values())))
        return cls(tuple(elements), None)

    def draw(self, rng: random.Random) -> str:
        """What Faker's ``random_element`` returns for these elements from ``rng``."""
        if self.cum_weights is None:
            return rng.choice(self.names)
        return rng.choices(self.names, cum_weights=self.cum_weights)[0]

    def casefolded(self) -> frozenset[str]:
        return frozenset(name.casefold() for name in self.names)


@dataclass(frozen=True)
class Lexicon:
    """The casefolded Faker name lists the role and gender heuristics consult."""

    first: frozenset[str]
    female: frozenset[str]
    male: frozenset[str]
    last: frozenset[str]

    def is_known(self, word: str) -> bool:
        folded = word.casefold()
        return folded in self.first or folded in self.last


NAME_WORDS = "name words"  # the views of the originals this operator asks (Originals)
INITIALS = "initials"


def name_words(surface: str) -> Iterator[str]:
    """The words a normalised (casefolded) original uses, as surrogates must avoid them.

    The letter runs with their inner apostrophes ("o'brien") and without ("o",
    "brien"), each part of a hyphenated word on its own.
    """
    for match in _TOKEN.finditer(surface):
        word = match.group("word")
        if word:
            for part in word.casefold().split("-"):
                yield part
                yield from (p for p in re.split(f"[{_APOSTROPHES}]", part) if p)


def initial_letters(surface: str) -> Iterator[str]:
    """The letters a normalised original uses as initials.

    Those of single letters, dotted groups ("j.s.") and 2-3 letters without a
    vowel ("js") that are no title or credential.
    """
    for match in _TOKEN.finditer(surface):
        text = match.group().casefold()
        if match.group("dotted") or len(text) == 1 or _initials_like(text.replace(".", "")):
            yield from (char for char in text if char.isalpha())


@dataclass(frozen=True)
class TakenNames:
    """What the originals of one scope use as name words and as initials, casefolded."""

    words: Container[str]
    initials: Container[str]


def _initials_like(word: str) -> bool:
    """2-3 letters without a vowel that are no title or credential ("js", not "dr")."""
    return (
        2 <= len(word) <= 3
        and word.isalpha()
        and not _VOWELS & set(word)
        and word not in TITLES
        and word not in CREDENTIALS
    )


def tokenize(surface: str, lexicon: Lexicon) -> list[Token]:
    """The name-like tokens of ``surface`` in order; everything between them is kept.

    Single letters, dotted groups ("J.S.") and 2-3 upper-case letters without a
    vowel ("JS") are initials; possessive endings are split off the word.
    """
    tokens = []
    for match in _TOKEN.finditer(surface):
        text = match.group()
        if match.group("dotted") or len(text) == 1 or _looks_like_initials(text):
            tokens.append(Token(match.start(), match.end(), text, "initials"))
            continue
        word, apos = match.group("word"), match.group("apos") or ""
        suffix = possessive_suffix(word, apos, lexicon)
        tokens.append(Token(match.start(), match.end(), text, "word", suffix))
    return tokens


def _looks_like_initials(word: str) -> bool:
    return (
        2 <= len(word) <= 3
        and word.isalpha()
        and word.isupper()
        and not _VOWELS & set(word.casefold())
    )


def possessive_suffix(word: str, apos: str, lexicon: Lexicon) -> str:
    """The possessive ending of ``word`` (+ a trailing apostrophe ``apos``), or "".

    "Smith's" -> "'s"; "Jones'" -> "'"; "Smiths'" -> "s'" when "Smiths" is no
    known name but "Smith" is (a family's plural), else "'".
    """
    if apos:
        if word[-1:] in ("s", "S") and lexicon.is_known(word[:-1]) and not lexicon.is_known(word):
            return word[-1] + apos
        return apos
    match = _POSSESSIVE_S.search(word)
    return match.group() if match and len(word) > 2 else ""


def classify(surface: str, tokens: list[Token]) -> None:
    """Mark leading titles and trailing credentials among the word tokens."""
    seen_name = False
    for token in tokens:
        folded = token.stem.replace(".", "").casefold()
        if not seen_name and folded in TITLES:
            token.kind = "title"
        elif seen_name and folded in CREDENTIALS and _written_as_credential(surface, token):
            token.kind = "credential"
        seen_name = seen_name or token.kind in ("word", "initials")


def _written_as_credential(surface: str, token: Token) -> bool:
    folded = token.stem.replace(".", "").casefold()
    if folded not in AMBIGUOUS_CREDENTIALS:
        return True
    after = surface[token.end : token.end + 1]
    return token.text.isupper() or after == "." or surface[: token.start].rstrip().endswith(",")


def assign_roles(surface: str, tokens: list[Token], lexicon: Lexicon) -> None:
    """Set each name word's role (first or last name): see the module docstring."""
    slots = [token for token in tokens if token.kind in ("word", "initials")]
    words = [token for token in slots if token.kind == "word"]
    if not words:
        return
    if len(slots) >= 2 and "," in surface[slots[0].end : slots[1].start]:
        for token in slots:
            token.role = "first"
        slots[0].role = "last"
        return
    if len(words) == 1:
        word = words[0]
        titled = any(token.kind == "title" for token in tokens)
        is_first = word.stem.split("-")[0].casefold() in lexicon.first
        word.role = "first" if is_first and not titled else "last"
        return
    for token in words:
        token.role = "first"
    words[-1].role = "last"


def restore_case(template: str, surrogate: str) -> str:
    """``surrogate`` in the case of ``template``: UPPER, lower, else Faker's own."""
    if template.isupper():
        return surrogate.upper()
    if template.islower():
        return surrogate.lower()
    return surrogate


def name_pools(fake: faker.Faker) -> dict[str, NamePool]:
    """The person provider's name lists for the Faker instance's locale."""
    provider = next(
        (p for p in fake.get_providers() if hasattr(p, "first_names") and hasattr(p, "last_names")),
        None,
    )
    if provider is None:
        raise ConfigError("operator name: this Faker locale has no first and last name lists")
    pools = {
        "first": NamePool.of(provider.first_names),
        "last": NamePool.of(provider.last_names),
    }
    for gender in ("female", "male"):
        elements = getattr(provider, f"first_names_{gender}", None)
        if isinstance(elements, OrderedDict | list | tuple) and elements:
            pools[gender] = NamePool.of(elements)
    return pools


@register
class NameOperator(SurrogateOperator):
    """Person names, token by token, with Faker surrogates (see the module docstring)."""

    name = "name"
    defaults: ClassVar[Mapping[str, Any]] = {"locale": "en_US"}

    def configure(self) -> None:
        locale = self.options["locale"]
        try:
            self._fake = faker.Faker(locale)
        except AttributeError as error:
            raise ConfigError(f"operator name: unknown Faker locale {locale!r}") from error
        self._fake.seed_instance(0)  # gives the instance its own random.Random
        self._pools = name_pools(self._fake)
        empty: frozenset[str] = frozenset()
        self._lexicon = Lexicon(
            first=self._pools["first"].casefolded(),
            female=self._pools["female"].casefolded() if "female" in self._pools else empty,
            male=self._pools["male"].casefolded() if "male" in self._pools else empty,
            last=self._pools["last"].casefolded(),
        )
        self._cache: dict[tuple[str, str, str], str] = {}
        self.originals.add_view(NAME_WORDS, name_words)
        self.originals.add_view(INITIALS, initial_letters)

    def replace(self, mention: Mention) -> str:
        surface = mention.surface
        scope = self.scope(mention)
        tokens = tokenize(surface, self._lexicon)
        classify(surface, tokens)
        if not any(token.kind in ("word", "initials") for token in tokens):
            # only titles or credentials ("Dr.", "MD"): replace them as names
            for token in tokens:
                token.kind = "word" if len(token.stem) > 1 and "." not in token.stem else "initials"
        self.counts["names_replaced"] += 1
        if not tokens:
            self.counts["names_without_letters"] += 1
            stripped = surface.strip()
            word = self.surrogate_word(scope, "last", normalize(surface) or "-")
            start = surface.find(stripped) if stripped else len(surface)
            return surface[:start] + word + surface[start + len(stripped) :]
        assign_roles(surface, tokens, self._lexicon)
        pieces, position = [], 0
        for token in tokens:
            pieces.append(surface[position : token.start])
            pieces.append(self._replace_token(scope, token))
            position = token.end
        pieces.append(surface[position:])
        return "".join(pieces)

    def _replace_token(self, scope: str, token: Token) -> str:
        if token.kind in ("title", "credential"):
            return token.text
        if token.kind == "initials":
            return "".join(
                self.surrogate_letter(scope, ch) if ch.isalpha() else ch for ch in token.text
            )
        parts = token.stem.split("-")
        replaced = "-".join(
            restore_case(part, self.surrogate_word(scope, token.role, part)) for part in parts
        )
        return replaced + token.suffix

    def surrogate_word(self, scope: str, role: Role, word: str) -> str:
        """The surrogate name (Faker's spelling) for ``word`` in ``role`` within ``scope``."""
        folded = word.casefold()
        cache_key = (scope, role, folded)
        cached = self._cache.get(cache_key)
        if cached is not None:
            return cached
        pool = self._pool_for(role, folded)
        taken = self.taken(scope).words
        fallback = None
        for attempt in range(_MAX_DRAWS):
            self._fake.seed_instance(self.key.integer(self.name, scope, role, folded, str(attempt)))
            candidate = pool.draw(self._fake.random)
            if candidate.casefold() == folded or not _PLAIN_NAME.fullmatch(candidate):
                continue
            if candidate.casefold() not in taken:
                break
            fallback = fallback or candidate
        else:
            if fallback is None:
                raise ConfigError(
                    f"operator name: no usable {role} name for locale "
                    f"{self.options['locale']!r} after {_MAX_DRAWS} draws"
                )
            # every draw was another original's word; the engine counts the collision
            candidate = fallback
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[cache_key] = candidate
        return candidate

    def surrogate_letter(self, scope: str, letter: str) -> str:
        """Another letter for an initial, the same for that letter within ``scope``."""
        folded = letter.casefold()
        cache_key = (scope, "initial", folded)
        cached = self._cache.get(cache_key)
        if cached is None:
            rng = self.key.rng(self.name, scope, "initial", folded)
            letters = [c for c in string.ascii_uppercase if c.casefold() != folded]
            taken = self.taken(scope).initials
            cached = rng.choice([c for c in letters if c.casefold() not in taken] or letters)
            self._cache[cache_key] = cached
        return cached.lower() if letter.islower() else cached

    def taken(self, scope: str) -> TakenNames:
        """The words and initials the originals of ``scope`` use (see the module docstring)."""
        return TakenNames(
            self.originals.taken(scope, NAME_WORDS), self.originals.taken(scope, INITIALS)
        )

    def _pool_for(self, role: Role, folded: str) -> NamePool:
        if role == "last":
            return self._pools["last"]
        female, male = folded in self._lexicon.female, folded in self._lexicon.male
        if female and not male and "female" in self._pools:
            return self._pools["female"]
        if male and not female and "male" in self._pools:
            return self._pools["male"]
        return self._pools["first"]
