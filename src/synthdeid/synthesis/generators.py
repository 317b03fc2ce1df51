"""Local value generators for the template fill: one per allowlisted generator name.

The fill (:mod:`synthdeid.synthesis.fill`) replaces every template placeholder
by a value drawn here. Values are drawn with a caller's ``random.Random`` only:
the Faker-derived material (name lists, cities, street addresses) is computed
once per process from a Faker instance with a fixed locale and seed
(:func:`value_pools`), because calling Faker per value is far too slow for the
fill's throughput target and would tie the draws to Faker's global state.
Given the same ``random.Random`` state and the same Faker version, a generator
always returns the same value.

Every generator is a :class:`ShapedGenerator`: a weighted set of *shapes*,
``str.format`` strings over named fields (``"Dr. {last}"``,
``"{mm}/{dd}/{yyyy}"``). A draw picks a shape by weight and renders it; the
fields are drawn lazily and once per draw, so ``"{last}, {first}"`` and
``"{LAST}"`` in one shape speak of the same person. Fields:

* persons: ``gender``, ``first`` (given name of that gender where the Faker
  locale tells genders), ``last``, ``last2`` (another surname), ``f`` / ``l``
  (their initials), ``mi`` (a middle initial), ``title`` (Mr./Mrs./Ms. by
  gender), ``cred`` (MD, M.D., DO, NP, PA-C, PhD), ``nurse`` (RN, LPN, NP),
  ``saint`` (for hospital names);
* places: ``city``, ``state``, ``ST`` (USPS code), ``street``, ``address``,
  ``zip``, ``country``, ``acronym`` (hospital initials such as ``BMC``);
* dates: one date in 1995-2025 per draw, shown as ``yyyy``, ``yy``, ``m``,
  ``mm``, ``d``, ``dd``, ``month`` (March), ``mon`` (Mar), ``dth`` (14th);
* numbers: ``area``, ``exch``, ``line``, ``ext`` (phones), ``age`` (90-104,
  weighted towards the lower end), ``floor`` and ``wing`` (hospital units),
  ``domain`` (reserved ``example`` domains);
* ``d<n>`` (n random digits) and ``A<n>`` (n random capitals), with an optional
  ``_suffix`` to draw a second, independent run (``{d3}-{d3_b}``);
* ``<FIELD>`` in capitals is the field upper-cased (``LAST``, ``MONTH``), and
  ``<field>_lower`` the field lower-cased.

What each generator produces (shapes and weights in :data:`SHAPES`):

``doctor_name``
    "Dr. Smith", "Dr Jane Smith", "Smith", "J. Smith", "Jane Smith, MD",
    "Jane M. Smith, M.D.", "SMITH", "Smith, Jane", nurse-style "Jane RN" and
    "Jane Smith, RN", a bare first name, initials "J.S.".
``patient_name``
    "Jane Smith", "Mrs. Smith", "Mr. John Smith", "Smith", "Jane", "Smith, Jane",
    "SMITH, JANE", "Jane M. Smith", initials "J.S." / "JS".
``date``
    "3/14", "03/14/2019", "3/14/19", "3/14/2019", "3-14-2019", "2019-03-14",
    "March 14", "March 14th", "March 14, 2019", "Mar 14, 2019", "Mar. 14, 2019",
    "14-Mar-2019", "14 March 2019", "March 2019", "3/2019", "2019": every shape is
    one that :func:`synthdeid.detectors.parse_date` reads (US
    month-first order; two-digit years are 1995-2025 so they pivot correctly).
``location``
    a city, "City, ST", "City, State", a state, a street address (Faker's, with
    an apartment or suite sometimes), a full postal address, a street name, a
    ZIP code, a country.
``hospital``
    "<City> General Hospital", "<City> Medical Center", "St. Mary's Hospital",
    "<Name> Memorial Hospital", "<Name> Memorial", "<Name> Clinic",
    "<City> VA Medical Center", "University of <State> Medical Center",
    "<Name>-<Name> Hospital", "<Name> Nursing Home", initials "BMC" / "NWH".
``phone``
    "(617) 555-0123", "617-555-0123", "555-0123", "617.555.0123",
    "617-555-0123 x123", "1-617-555-0123", "+1 617 555 0123", and internal
    extensions "4-5678" / "x45678". Area codes and exchanges start with 2-9.
``age``
    "90" to "104" (only ages over 89 are PHI under HIPAA), as bare numbers.
``identifier``
    MRN-like runs of 7-10 digits, "A1234567", "MR123456", "12-3456789",
    accession-style "S19-12345", "123-456-789", and SSN-shaped "9xx-xx-xxxx"
    (area numbers 900-999 are never issued, so these are never a real SSN).
``other``
    what the canonical OTHER label gathers (PhysioNet "Other"): pager numbers
    ("p12345", "#12345", "12345"), hospital unit names after a building
    ("Ellison 12", "Blake 7A"), e-mail addresses and web addresses on reserved
    ``example`` domains, device serial numbers ("SN AB123456").
"""

from __future__ import annotations

import hashlib
import random
import re
import string
from collections.abc import Callable, Iterable, Mapping
from datetime import date
from functools import cache
from itertools import accumulate
from typing import Protocol

import faker

from synthdeid.detectors import MONTHS
from synthdeid.errors import ConfigError
from synthdeid.surrogate.operators.names import NamePool, name_pools
from synthdeid.surrogate.operators.places import US_STATES

POOL_LOCALE = "en_US"
POOL_SEED = 20240601  # fixed: the pools are part of the generators' definition
POOL_SIZE = 2000  # Faker draws per precomputed place pool (duplicates dropped)

FIRST_DATE = date(1995, 1, 1)
LAST_DATE = date(2025, 12, 31)
AGES = tuple(range(90, 105))
AGE_WEIGHTS = tuple(0.8**offset for offset in range(len(AGES)))  # fewer centenarians

SAINTS = (
    "Mary", "Joseph", "Luke", "Elizabeth", "Francis", "Vincent", "Anne", "John", "Jude",
    "Catherine", "Michael", "Peter", "Paul", "Agnes", "Clare", "Rose", "Anthony",
    "Patrick", "Theresa", "Margaret", "James", "Andrew", "Raphael", "Jerome", "Helen",
)  # fmt: skip
COUNTRIES = (
    "Canada", "Mexico", "Guatemala", "El Salvador", "Haiti", "Dominican Republic",
    "Jamaica", "Brazil", "Colombia", "Peru", "Ireland", "England", "Italy", "Portugal",
    "Greece", "Poland", "Russia", "Israel", "Nigeria", "Ethiopia", "India", "China",
    "Vietnam", "Philippines", "Korea", "Japan", "Cape Verde", "Puerto Rico",
)  # fmt: skip
CREDENTIALS = {"MD": 60, "M.D.": 15, "DO": 8, "NP": 6, "PA-C": 5, "PhD": 3}
NURSE_CREDENTIALS = {"RN": 80, "LPN": 8, "NP": 12}
DOMAINS = ("example.org", "example.com", "example.net", "mail.example.org", "hosp.example")
ACRONYM_SUFFIXES = ("H", "H", "MC", "GH", "HC")
WINGS = "ABCDEFGHJKLMNPRSTW"

# Shapes per generator: format string -> weight (see the module docstring).
DOCTOR_SHAPES: Mapping[str, float] = {
    "Dr. {last}": 22,
    "Dr {last}": 4,
    "Dr. {first} {last}": 10,
    "Dr {first} {last}": 2,
    "Dr. {f}. {last}": 3,
    "{first} {last}": 10,
    "{last}": 8,
    "{f}. {last}": 5,
    "{first} {last}, {cred}": 8,
    "{first} {mi}. {last}, {cred}": 3,
    "{first} {last} {cred}": 2,
    "{f}. {last}, {cred}": 2,
    "{last}, {first}": 3,
    "{LAST}": 2,
    "DR. {LAST}": 1,
    "{first} {nurse}": 3,
    "{first} {last}, {nurse}": 3,
    "{first}": 2,
    "{f}.{l}.": 1,
}
PATIENT_SHAPES: Mapping[str, float] = {
    "{first} {last}": 22,
    "{title} {last}": 18,
    "{title} {first} {last}": 4,
    "{last}": 8,
    "{first}": 8,
    "{first} {mi}. {last}": 5,
    "{last}, {first}": 8,
    "{LAST}, {FIRST}": 3,
    "{LAST}, {FIRST} {mi}": 1,
    "{LAST}": 2,
    "{f}.{l}.": 3,
    "{f}{l}": 1,
}
DATE_SHAPES: Mapping[str, float] = {
    "{m}/{d}": 14,
    "{mm}/{dd}/{yyyy}": 14,
    "{m}/{d}/{yy}": 10,
    "{m}/{d}/{yyyy}": 10,
    "{m}-{d}-{yyyy}": 3,
    "{yyyy}-{mm}-{dd}": 8,
    "{month} {d}": 6,
    "{month} {dth}": 2,
    "{month} {d}, {yyyy}": 8,
    "{mon} {d}, {yyyy}": 5,
    "{mon}. {d}, {yyyy}": 2,
    "{dd}-{mon}-{yyyy}": 5,
    "{d} {month} {yyyy}": 2,
    "{month} {yyyy}": 4,
    "{m}/{yyyy}": 3,
    "{yyyy}": 3,
}
LOCATION_SHAPES: Mapping[str, float] = {
    "{city}": 28,
    "{city}, {ST}": 16,
    "{city}, {state}": 5,
    "{city} {ST}": 2,
    "{CITY}": 2,
    "{state}": 10,
    "{address}": 12,
    "{address}, {city}, {ST} {zip}": 4,
    "{address}, {city}": 3,
    "{street}": 5,
    "{zip}": 3,
    "{country}": 4,
}
HOSPITAL_SHAPES: Mapping[str, float] = {
    "{city} General Hospital": 8,
    "{city} Hospital": 6,
    "{city} Medical Center": 8,
    "{city} Regional Medical Center": 4,
    "{city} Community Hospital": 4,
    "{city} Children's Hospital": 2,
    "{city} VA Medical Center": 2,
    "{CITY} GENERAL": 1,
    "St. {saint}'s Hospital": 4,
    "St. {saint}'s Medical Center": 4,
    "Saint {saint}'s": 2,
    "{last} Memorial Hospital": 6,
    "{last} Memorial": 3,
    "{last} Clinic": 3,
    "{last} Rehabilitation Center": 2,
    "{last} Rehab": 2,
    "{last} Nursing Home": 2,
    "{last}-{last2} Hospital": 2,
    "University of {state} Medical Center": 2,
    "{acronym}": 6,
}
PHONE_SHAPES: Mapping[str, float] = {
    "({area}) {exch}-{line}": 30,
    "{area}-{exch}-{line}": 28,
    "{exch}-{line}": 12,
    "{area}.{exch}.{line}": 5,
    "{area} {exch} {line}": 4,
    "({area}){exch}-{line}": 2,
    "({area}) {exch}-{line} x{ext}": 4,
    "{area}-{exch}-{line} ext. {ext}": 3,
    "1-{area}-{exch}-{line}": 3,
    "+1 {area} {exch} {line}": 2,
    "{d1}-{d4}": 6,
    "x{d5}": 3,
}
AGE_SHAPES: Mapping[str, float] = {"{age}": 1}
IDENTIFIER_SHAPES: Mapping[str, float] = {
    "{d7}": 12,
    "{d8}": 12,
    "{d9}": 6,
    "{d10}": 4,
    "{A1}{d7}": 10,
    "{A2}{d6}": 6,
    "{d2}-{d7}": 4,
    "{A1}{yy}-{d5}": 5,
    "{d3}-{d3_b}-{d3_c}": 3,
    "{d6}{A1}": 3,
    "9{d2}-{d2_b}-{d4}": 6,
}
OTHER_SHAPES: Mapping[str, float] = {
    "p{d5}": 3,
    "#{d5}": 2,
    "{d5}": 2,
    "{last} {floor}": 3,
    "{last} {floor}{wing}": 2,
    "{LAST} {floor}": 1,
    "{first_lower}.{last_lower}@{domain}": 2,
    "{f_lower}{last_lower}@{domain}": 1,
    "www.{last_lower}{d2}.example.org": 1,
    "SN {A2}{d6}": 1,
}

SHAPES: Mapping[str, Mapping[str, float]] = {
    "doctor_name": DOCTOR_SHAPES,
    "patient_name": PATIENT_SHAPES,
    "date": DATE_SHAPES,
    "location": LOCATION_SHAPES,
    "hospital": HOSPITAL_SHAPES,
    "phone": PHONE_SHAPES,
    "age": AGE_SHAPES,
    "identifier": IDENTIFIER_SHAPES,
    "other": OTHER_SHAPES,
}


class ValueGenerator(Protocol):
    """Draws one value (a non-empty string) from ``rng``."""

    def draw(self, rng: random.Random) -> str: ...


# --- precomputed pools -----------------------------------------------------


class ValuePools:
    """Faker material drawn once: name lists and place pools (see :func:`value_pools`)."""

    def __init__(self, fake: faker.Faker, size: int) -> None:
        names = name_pools(fake)
        self.first: NamePool = names["first"]
        self.last: NamePool = names["last"]
        self.by_gender: dict[str, NamePool] = {
            gender: names.get(gender, self.first) for gender in ("female", "male")
        }
        self.cities = _distinct(fake.city for _ in range(size))
        self.addresses = _distinct(fake.street_address for _ in range(size))
        self.streets = _distinct(fake.street_name for _ in range(size // 2))
        self.state_codes: tuple[str, ...] = tuple(US_STATES)


def _distinct(makers: Iterable[Callable[[], str]]) -> tuple[str, ...]:
    """The made values, duplicates dropped, in first-seen order (no set: stable order)."""
    return tuple(dict.fromkeys(make() for make in makers))


@cache
def value_pools(
    locale: str = POOL_LOCALE, seed: int = POOL_SEED, size: int = POOL_SIZE
) -> ValuePools:
    """The pools for ``locale`` from Faker seeded with ``seed``: built once per process."""
    try:
        fake = faker.Faker(locale)
    except AttributeError as error:
        raise ConfigError(f"synthesis generators: unknown Faker locale {locale!r}") from error
    fake.seed_instance(seed)
    return ValuePools(fake, size)


# --- fields ----------------------------------------------------------------


class _Fields(dict[str, str]):
    """The fields of one draw, each drawn on first use (``str.format_map`` asks here)."""

    def __init__(self, pools: ValuePools, rng: random.Random) -> None:
        super().__init__()
        self.pools = pools
        self.rng = rng

    def __missing__(self, key: str) -> str:
        value = self[key] = _field(key, self)
        return value


def _weighted(choices: Mapping[str, float]) -> Callable[[random.Random], str]:
    values, cum = tuple(choices), tuple(accumulate(choices.values()))
    return lambda rng: rng.choices(values, cum_weights=cum)[0]


_credential = _weighted(CREDENTIALS)
_nurse = _weighted(NURSE_CREDENTIALS)
_age = _weighted({str(age): weight for age, weight in zip(AGES, AGE_WEIGHTS, strict=True)})


def _title(fields: _Fields) -> str:
    if fields["gender"] == "male":
        return fields.rng.choices(("Mr.", "Mr"), (9, 1))[0]
    return fields.rng.choices(("Mrs.", "Ms.", "Mrs", "Ms", "Miss"), (5, 4, 1, 1, 1))[0]


def _other_last(fields: _Fields) -> str:
    first = candidate = fields["last"]
    for _ in range(8):
        candidate = fields.pools.last.draw(fields.rng)
        if candidate != first:
            break
    return candidate


def _iso_date(fields: _Fields) -> str:
    ordinal = fields.rng.randint(FIRST_DATE.toordinal(), LAST_DATE.toordinal())
    return date.fromordinal(ordinal).isoformat()


def _ordinal(day: int) -> str:
    suffix = "th" if 11 <= day % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")
    return f"{day}{suffix}"


def _acronym(fields: _Fields) -> str:
    rng = fields.rng
    letters = "".join(rng.choice(string.ascii_uppercase) for _ in range(rng.randint(1, 2)))
    return letters + rng.choice(ACRONYM_SUFFIXES)


_FIELDS: dict[str, Callable[[_Fields], str]] = {
    # persons
    "gender": lambda f: f.rng.choice(("female", "male")),
    "first": lambda f: f.pools.by_gender[f["gender"]].draw(f.rng),
    "last": lambda f: f.pools.last.draw(f.rng),
    "last2": _other_last,
    "f": lambda f: f["first"][0],
    "l": lambda f: f["last"][0],
    "mi": lambda f: f.rng.choice(string.ascii_uppercase),
    "title": _title,
    "cred": lambda f: _credential(f.rng),
    "nurse": lambda f: _nurse(f.rng),
    "saint": lambda f: f.rng.choice(SAINTS),
    # places
    "city": lambda f: f.rng.choice(f.pools.cities),
    "ST": lambda f: f.rng.choice(f.pools.state_codes),
    "state": lambda f: US_STATES[f["ST"]],
    "street": lambda f: f.rng.choice(f.pools.streets),
    "address": lambda f: f.rng.choice(f.pools.addresses),
    "zip": lambda f: f"{f.rng.randrange(1000, 100000):05d}",
    "country": lambda f: f.rng.choice(COUNTRIES),
    "acronym": _acronym,
    # dates: every date field reads the one ISO date of the draw
    "iso": _iso_date,
    "yyyy": lambda f: f["iso"][:4],
    "yy": lambda f: f["iso"][2:4],
    "mm": lambda f: f["iso"][5:7],
    "m": lambda f: str(int(f["iso"][5:7])),
    "dd": lambda f: f["iso"][8:10],
    "d": lambda f: str(int(f["iso"][8:10])),
    "month": lambda f: MONTHS[int(f["iso"][5:7]) - 1],
    "mon": lambda f: MONTHS[int(f["iso"][5:7]) - 1][:3],
    "dth": lambda f: _ordinal(int(f["iso"][8:10])),
    # numbers
    "area": lambda f: f"{f.rng.randint(2, 9)}{f.rng.randint(0, 8)}{f.rng.randint(0, 9)}",
    "exch": lambda f: f"{f.rng.randint(2, 9)}{f.rng.randrange(100):02d}",
    "line": lambda f: f"{f.rng.randrange(10000):04d}",
    "ext": lambda f: str(f.rng.randrange(10, 10000)),
    "age": lambda f: _age(f.rng),
    "floor": lambda f: str(f.rng.randint(1, 22)),
    "wing": lambda f: f.rng.choice(WINGS),
    "domain": lambda f: f.rng.choice(DOMAINS),
}
_RUN = re.compile(r"(?P<kind>[dA])(?P<length>[1-9][0-9]?)(?:_[a-z0-9]+)?")


def _field(key: str, fields: _Fields) -> str:
    """Draw the field ``key`` (see the module docstring for the names)."""
    make = _FIELDS.get(key)
    if make is not None:
        return make(fields)
    run = _RUN.fullmatch(key)
    if run is not None:
        alphabet = string.digits if run["kind"] == "d" else string.ascii_uppercase
        return "".join(fields.rng.choices(alphabet, k=int(run["length"])))
    if key.endswith("_lower"):
        return fields[key.removesuffix("_lower")].lower()
    if key.isupper() and key.lower() in _FIELDS:
        return fields[key.lower()].upper()
    raise KeyError(key)


def shape_fields(shape: str) -> tuple[str, ...]:
    """The field names a shape uses, in order."""
    return tuple(name for _, name, _, _ in string.Formatter().parse(shape) if name is not None)


def is_known_field(key: str) -> bool:
    if key in _FIELDS or _RUN.fullmatch(key):
        return True
    if key.endswith("_lower"):
        return is_known_field(key.removesuffix("_lower"))
    return key.isupper() and key.lower() in _FIELDS


# --- generators ------------------------------------------------------------


class ShapedGenerator:
    """Draws a shape by weight and renders it with fields drawn from the caller's RNG."""

    def __init__(self, name: str, shapes: Mapping[str, float], pools: ValuePools) -> None:
        if not shapes or any(weight <= 0 for weight in shapes.values()):
            raise ConfigError(f"generator {name}: needs shapes with positive weights")
        for shape in shapes:
            unknown = [key for key in shape_fields(shape) if not is_known_field(key)]
            if unknown:
                raise ConfigError(f"generator {name}: shape {shape!r} has unknown fields {unknown}")
        self.name = name
        self.pools = pools
        self.shapes: tuple[str, ...] = tuple(shapes)
        self._cum_weights = tuple(accumulate(shapes.values()))

    def draw(self, rng: random.Random) -> str:
        shape = rng.choices(self.shapes, cum_weights=self._cum_weights)[0]
        return self.render(shape, rng)

    def render(self, shape: str, rng: random.Random) -> str:
        """``shape`` with its fields drawn from ``rng``."""
        return shape.format_map(_Fields(self.pools, rng))


def _shaped(name: str) -> Callable[[ValuePools], ShapedGenerator]:
    return lambda pools: ShapedGenerator(name, SHAPES[name], pools)


# generator name (as resources/placeholders.yaml names it) -> factory over the pools
GENERATORS: Mapping[str, Callable[[ValuePools], ValueGenerator]] = {
    name: _shaped(name) for name in SHAPES
}


def build_generators(
    names: Iterable[str] | None = None, pools: ValuePools | None = None
) -> dict[str, ValueGenerator]:
    """Generators by name (all of them when ``names`` is None) over ``pools``.

    Raises :class:`ConfigError` for a name that is not in :data:`GENERATORS`.
    """
    wanted = list(GENERATORS) if names is None else list(dict.fromkeys(names))
    unknown = [name for name in wanted if name not in GENERATORS]
    if unknown:
        raise ConfigError(
            f"unknown value generators {unknown}; known: {', '.join(sorted(GENERATORS))}"
        )
    pools = value_pools() if pools is None else pools
    return {name: GENERATORS[name](pools) for name in wanted}


def generators_fingerprint() -> str:
    """A short hash of the shapes, weights and pool settings, for provenance."""
    parts = [POOL_LOCALE, str(POOL_SEED), str(POOL_SIZE), faker.VERSION]
    parts += [f"{FIRST_DATE}..{LAST_DATE}", repr(AGE_WEIGHTS)]
    for name, shapes in SHAPES.items():
        parts += [name, *(f"{shape}={weight}" for shape, weight in shapes.items())]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
