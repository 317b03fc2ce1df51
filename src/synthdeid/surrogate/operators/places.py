"""Type-consistent surrogates for locations and hospitals.

:class:`LocationOperator` decides what kind of place the original is (street
address, street, hospital, US state, country, zip code, other number, or,
failing all of those, a city or town) and draws a surrogate of the same kind:
from a gazetteer when one is configured for that kind, else from Faker seeded
by the key's HMAC, so the draw depends only on key, scope, label and the
normalised original. The original's case style (UPPER, lower, or as written)
is kept, and the surrogate never equals the original.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace as replace_field
from functools import cache
from typing import TYPE_CHECKING, Any, ClassVar

from synthdeid.errors import ConfigError
from synthdeid.surrogate.operators.base import (
    Mention,
    SurrogateOperator,
    normalize,
    register,
)
from synthdeid.surrogate.operators.formats import preserve_format, unchangeable_fill

if TYPE_CHECKING:
    from faker import Faker

# place kinds, also the keys of the ``gazetteer`` option and of the counts
ADDRESS = "address"  # house number + street: "12 Oak Street"
STREET = "street"  # street without number: "Oak Street"
HOSPITAL = "hospital"
STATE = "state"  # US state, full name or USPS code
COUNTRY = "country"
ZIP = "zip"  # 12345 or 12345-6789, digits replaced format-preserving
CODE = "code"  # any other surface without letters, format-preserving
CITY = "city"  # everything else
GAZETTEER_KINDS = (ADDRESS, STREET, HOSPITAL, STATE, COUNTRY, CITY)

MAX_DRAWS = 8


def _wordset(text: str, separator: str | None = None) -> frozenset[str]:
    """The entries of ``text``, split on whitespace or on ``separator``."""
    return frozenset(entry.strip() for entry in text.split(separator) if entry.strip())


STREET_SUFFIXES = _wordset(
    """
    st street ave av avenue rd road blvd boulevard ln lane dr drive way ct court pl place
    ter terrace pkwy parkway hwy highway cir circle sq square trl trail plz plaza aly alley
    cres crescent row walk loop pike tpke turnpike expy expressway
    """
)
# any one of these makes a place a hospital
HOSPITAL_KEYWORDS = _wordset(
    """
    hospital hospitals hosp clinic clinics health healthcare infirmary general memorial
    hospice sanatorium sanitarium
    """
)
HOSPITAL_PHRASES = ("medical center", "medical centre", "medical ctr", "med ctr", "med center")
# words kept around a hospital keyword as the facility type ("Cancer Center")
FACILITY_WORDS = HOSPITAL_KEYWORDS | _wordset(
    """
    medical med center centre ctr cancer institute rehabilitation rehab nursing home care
    university regional community county children's childrens women's womens
    """
)
CONNECTORS = frozenset({"of", "for", "at"})

US_STATES = {
    "AL": "Alabama",
    "AK": "Alaska",
    "AZ": "Arizona",
    "AR": "Arkansas",
    "CA": "California",
    "CO": "Colorado",
    "CT": "Connecticut",
    "DE": "Delaware",
    "DC": "District of Columbia",
    "FL": "Florida",
    "GA": "Georgia",
    "HI": "Hawaii",
    "ID": "Idaho",
    "IL": "Illinois",
    "IN": "Indiana",
    "IA": "Iowa",
    "KS": "Kansas",
    "KY": "Kentucky",
    "LA": "Louisiana",
    "ME": "Maine",
    "MD": "Maryland",
    "MA": "Massachusetts",
    "MI": "Michigan",
    "MN": "Minnesota",
    "MS": "Mississippi",
    "MO": "Missouri",
    "MT": "Montana",
    "NE": "Nebraska",
    "NV": "Nevada",
    "NH": "New Hampshire",
    "NJ": "New Jersey",
    "NM": "New Mexico",
    "NY": "New York",
    "NC": "North Carolina",
    "ND": "North Dakota",
    "OH": "Ohio",
    "OK": "Oklahoma",
    "OR": "Oregon",
    "PA": "Pennsylvania",
    "PR": "Puerto Rico",
    "RI": "Rhode Island",
    "SC": "South Carolina",
    "SD": "South Dakota",
    "TN": "Tennessee",
    "TX": "Texas",
    "UT": "Utah",
    "VT": "Vermont",
    "VA": "Virginia",
    "WA": "Washington",
    "WV": "West Virginia",
    "WI": "Wisconsin",
    "WY": "Wyoming",
}
STATE_CODES = frozenset(code.casefold() for code in US_STATES)
STATE_NAMES = frozenset(name.casefold() for name in US_STATES.values())
# a small list; one country per comma-separated entry
COUNTRIES = _wordset(
    """
    usa, u.s., u.s.a., us, america, united states, united states of america, canada,
    mexico, guatemala, el salvador, cuba, haiti, dominican republic, jamaica, brazil,
    argentina, colombia, peru, chile, venezuela, ecuador, uk, u.k., united kingdom,
    great britain, england, scotland, wales, ireland, france, germany, italy, spain,
    portugal, netherlands, belgium, switzerland, austria, poland, russia, ukraine,
    greece, turkey, israel, egypt, nigeria, ghana, kenya, ethiopia, south africa,
    morocco, iran, iraq, pakistan, india, bangladesh, china, japan, korea, south korea,
    north korea, vietnam, thailand, philippines, indonesia, malaysia, australia,
    new zealand
    """,
    ",",
)

_ZIP = re.compile(r"\d{5}(?:-\d{4})?")
_LETTER = re.compile(r"[^\W\d_]")
_HOUSE_NUMBER = re.compile(r"\d+[A-Za-z]?(?:-\d+)?,?")
_COMMA = re.compile(r"(\s*,\s*)")
_ACRONYM = re.compile(r"[A-Z&]{2,6}")


def split_trailing_zip(text: str) -> tuple[str, str, str] | None:
    """``(head, space, zip)`` when ``text`` ends in whitespace and a zip code, else None.

    The zip is ``12345`` or ``12345-6789`` at the very end, after at least one
    whitespace character (all of them go to ``space``); ``head`` is everything
    before, holds a letter and no line break. Linear in the length of ``text``:
    only the fixed-size end is matched, the head is scanned once.
    """
    for width in (10, 5):
        zip_code = text[-width:]
        if len(text) > width and _ZIP.fullmatch(zip_code):
            break
    else:
        return None
    before = text[: len(text) - width]
    head = before.rstrip()
    space = before[len(head) :]
    if not space or "\n" in head or not _LETTER.search(head):
        return None
    return head, space, zip_code


def _word(token: str) -> str:
    """A token without surrounding punctuation, casefolded (``"Hosp."`` -> ``hosp``)."""
    return token.strip('.,;:()[]"').casefold()


def case_style(text: str) -> str:
    """``upper`` (a lone capital counts), ``lower`` or ``as_is`` (mixed or title case, or no letters)."""
    letters = [char for char in text if char.isalpha()]
    if letters and all(char.isupper() for char in letters):
        return "upper"
    if letters and all(char.islower() for char in letters):
        return "lower"
    return "as_is"


def apply_case(text: str, style: str) -> str:
    if style == "upper":
        return text.upper()
    if style == "lower":
        return text.lower()
    return text


def _hospital_span(tokens: Sequence[str]) -> tuple[int, int] | None:
    """Token range [start, end) of the facility words around the first hospital keyword."""
    words = [_word(token) for token in tokens]
    first = None
    for index, word in enumerate(words):
        pair = f"{word} {words[index + 1]}" if index + 1 < len(words) else ""
        if word in HOSPITAL_KEYWORDS or pair in HOSPITAL_PHRASES:
            first = index
            break
    if first is None:
        return None
    start = first
    while start > 0 and words[start - 1] in FACILITY_WORDS:
        start -= 1
    end = first + 1
    while end < len(words) and words[end] in FACILITY_WORDS:
        end += 1
    return start, end


def classify(surface: str, label: str) -> str:
    """The kind of place ``surface`` names (one of the module's kind constants)."""
    text = " ".join(surface.split())
    folded = text.casefold()
    tokens = text.split()
    if not any(char.isalpha() for char in text):
        return ZIP if _ZIP.fullmatch(text) else CODE
    if label.upper() == "HOSPITAL" or _hospital_span(tokens) is not None:
        return HOSPITAL
    words = [_word(token) for token in tokens]
    has_number = bool(_HOUSE_NUMBER.fullmatch(tokens[0]))
    if has_number and len(tokens) >= 3 and any(word in STREET_SUFFIXES for word in words[2:]):
        return ADDRESS
    if len(tokens) >= 2 and words[-1] in STREET_SUFFIXES and not has_number:
        return STREET
    if folded in STATE_CODES or folded in STATE_NAMES:
        return STATE
    if folded in COUNTRIES:
        return COUNTRY
    return CITY


@cache
def _faker(locale: str) -> Faker:
    """One Faker per locale; every draw reseeds it, so sharing it is harmless."""
    import faker

    try:
        return faker.Faker(locale)
    except AttributeError as error:
        raise ConfigError(f"operator location: unknown Faker locale {locale!r} ({error})") from None


def _first_method(fake: Faker, *names: str) -> Callable[[], str]:
    for name in names:
        method: Callable[[], str] | None = getattr(fake, name, None)
        if method is not None:
            return method
    raise AttributeError(names[0])


@register
class LocationOperator(SurrogateOperator):
    """A surrogate place of the same kind as the original, in the original's case.

    For LOCATION and HOSPITAL mentions. Kinds and their surrogates:

    - ``address`` (house number then a street suffix: "12 Oak St"): Faker
      ``street_address()``;
    - ``street`` (ends in a street suffix, no number: "Oak Street"): ``street_name()``;
    - ``hospital`` (the HOSPITAL label, or a keyword such as Hospital, Hosp, Clinic,
      Medical Center, Health, Infirmary, General, Memorial): a Faker last name or
      city followed by the original's facility words ("Mercy Hospital" ->
      "Calderon Hospital"); without facility words, an all-caps acronym gets random
      capitals ("MGH" -> "QTV") and a plain name another name;
    - ``state`` (US state name or code): ``state()`` / ``state_abbr()``;
    - ``country`` (a short list of countries): ``country()``, or a country code for a
      2- or 3-letter code;
    - ``zip`` (12345, 12345-6789) and ``code`` (anything without letters): digits
      replaced format-preserving;
    - ``city``: everything else, ``city()``.

    Comma-separated parts ("12 Oak St, Springfield, MA 01234") are replaced part by
    part (under the HOSPITAL label only the first part is a hospital: "Mercy
    Hospital, Springfield"), and a trailing zip code is split off its part; each
    part is keyed on its own text, so "Springfield" gets the same surrogate alone
    and inside an address.

    Options: ``locale`` (Faker locale, default ``en_US``) and ``gazetteer`` (a mapping
    from kind to a list of names; a kind listed there is drawn from it, excluding
    the original, instead of from Faker). A draw equal to any original of the
    mention's scope (another place of the same patient) is redrawn like one
    equal to the original itself. Counts ``location_<kind>`` per part,
    ``location_fallback`` when no different draw was found (the letters and digits
    are then scrambled) and ``location_unchangeable`` for a surface without
    letters or digits (replaced by ``X``).
    """

    name = "location"
    defaults: ClassVar[Mapping[str, Any]] = {"locale": "en_US", "gazetteer": None}

    def configure(self) -> None:
        self.locale = str(self.options["locale"])
        self.gazetteer = self._check_gazetteer(self.options["gazetteer"])
        self.fake = _faker(self.locale)

    def _check_gazetteer(self, value: Any) -> dict[str, list[str]]:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise ConfigError(
                f"operator {self.name}: gazetteer must map a place kind to a list of names, "
                f"got {type(value).__name__}"
            )
        gazetteer: dict[str, list[str]] = {}
        for kind, names in value.items():
            if kind not in GAZETTEER_KINDS:
                raise ConfigError(
                    f"operator {self.name}: gazetteer kind {kind!r} is unknown; "
                    f"use one of {', '.join(GAZETTEER_KINDS)}"
                )
            if isinstance(names, str) or not isinstance(names, Sequence):
                raise ConfigError(f"operator {self.name}: gazetteer.{kind} must be a list of names")
            cleaned = [str(name).strip() for name in names if str(name).strip()]
            if not cleaned:
                raise ConfigError(f"operator {self.name}: gazetteer.{kind} is empty")
            gazetteer[kind] = cleaned
        return gazetteer

    def replace(self, mention: Mention) -> str:
        surface = mention.surface
        if not any(char.isalnum() for char in surface):
            self.counts["location_unchangeable"] += 1
            return unchangeable_fill(surface)
        if "," in surface:
            pieces = _COMMA.split(surface)
            # odd indices are the separators, kept as written; the HOSPITAL label
            # applies to the first part, later ones ("..., Springfield") are places
            out = [
                piece
                if index % 2 or not piece.strip()
                else self._part(mention, piece, mention.label if index == 0 else "LOCATION")
                for index, piece in enumerate(pieces)
            ]
            surrogate = "".join(out)
        else:
            surrogate = self._part(mention, surface, mention.label)
        # parts differ, the whole must too, and from every other original of the scope
        if normalize(surrogate) == normalize(surface) or self.is_original(mention, surrogate):
            surrogate = self._scramble(mention, surface)
        return surrogate

    def _part(self, mention: Mention, text: str, label: str) -> str:
        """The surrogate of one place (no commas), keyed on its own text.

        ``label`` decides the kind (HOSPITAL forces a hospital); the key uses the
        mention's label.
        """
        part = replace_field(mention, surface=text)
        trailing = split_trailing_zip(text.strip())
        if trailing and classify(trailing[0], label) != HOSPITAL:
            head_text, space, zip_text = trailing
            head = self._part(mention, head_text, label)
            zip_code = self._part(mention, zip_text, label)
            leading = text[: len(text) - len(text.lstrip())]
            trailing_space = text[len(text.rstrip()) :]
            return f"{leading}{head}{space}{zip_code}{trailing_space}"
        kind = classify(text, label)
        self.counts[f"location_{kind}"] += 1
        if kind in (ZIP, CODE):
            return self._scramble(part, text)
        if kind in self.gazetteer:
            candidates = [
                name
                for name in self.gazetteer[kind]
                if normalize(name) != normalize(text) and not self.is_original(mention, name)
            ]
            if candidates:
                choice = self.rng(part, "gazetteer", kind).choice(candidates)
                return apply_case(choice, case_style(text))
        draw = self._drawer(kind, text)
        for attempt in range(MAX_DRAWS):
            self.fake.seed_instance(self.rng(part, kind, str(attempt)).getrandbits(128))
            candidate = apply_case(draw(), case_style(text))
            if normalize(candidate) != normalize(text) and not self.is_original(mention, candidate):
                return candidate
        self.counts["location_fallback"] += 1
        return self._scramble(part, text)

    def _scramble(self, mention: Mention, text: str) -> str:
        def rng_for(attempt: int) -> random.Random:
            return self.rng(mention, "scramble", str(attempt))

        def accept(candidate: str) -> bool:
            return not self.is_original(mention, candidate)

        return preserve_format(text, rng_for, accept) or unchangeable_fill(text)

    def _drawer(self, kind: str, text: str) -> Callable[[], str]:
        """A function drawing one surrogate of ``kind`` from the (seeded) Faker."""
        fake = self.fake
        if kind == ADDRESS:
            return fake.street_address
        if kind == STREET:
            return fake.street_name
        if kind == HOSPITAL:
            return lambda: self._hospital(text)
        if kind == STATE:
            if len(text.strip()) == 2:
                if hasattr(fake, "state_abbr"):
                    return lambda: fake.state_abbr(
                        include_territories=False, include_freely_associated_states=False
                    )
                return lambda: _first_method(fake, "administrative_unit", "city")()[:2].upper()
            return _first_method(fake, "state", "administrative_unit", "city")
        if kind == COUNTRY:
            letters = text.replace(".", "").strip()
            if len(letters) in (2, 3) and letters.isupper():
                representation = "alpha-2" if len(letters) == 2 else "alpha-3"
                return lambda: fake.country_code(representation=representation)
            return fake.country
        return fake.city

    def _hospital(self, text: str) -> str:
        """One hospital-like draw: a name plus the original's facility words."""
        fake = self.fake
        name = fake.last_name() if fake.random.random() < 0.5 else fake.city()
        tokens = text.split()
        span = _hospital_span(tokens)
        if span is None:
            if len(tokens) == 1 and _ACRONYM.fullmatch(tokens[0]):
                return "".join(
                    char if char == "&" else fake.random.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
                    for char in tokens[0]
                )
            return name
        start, end = span
        facility = " ".join(tokens[start:end]).rstrip(",;:")
        if start == 0 and end < len(tokens) and _word(tokens[end]) in CONNECTORS:
            # "Hospital of the University of X" -> "Hospital of <name>"
            return f"{facility} {tokens[end]} {name}"
        return f"{name} {facility}"
