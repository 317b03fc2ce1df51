"""The surrogate operators: format-preserving, location, age, redact, hash, keep."""

from __future__ import annotations

import re
import string
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synthdeid.errors import ConfigError
from synthdeid.surrogate.keying import SurrogateKey
from synthdeid.surrogate.operators import formats, places, simple
from synthdeid.surrogate.operators.base import OPERATORS, Mention, build_operator, normalize

KEY = SurrogateKey(b"test key one")
OTHER_KEY = SurrogateKey(b"test key two")


def mention(surface: str, label: str = "PHONE", patient: str = "p1") -> Mention:
    return Mention(surface=surface, label=label, patient_id=patient, note_id="n1")


def test_operators_are_registered() -> None:
    for name in ("format_preserving", "location", "age", "redact", "hash", "keep"):
        assert name in OPERATORS
    assert isinstance(build_operator(KEY, "keep"), simple.KeepOperator)


def test_unknown_option_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown options"):
        build_operator(KEY, "hash", {"colour": "blue"})


# ---------------------------------------------------------------- format preserving

PHONE_LIKE = st.text(alphabet=string.digits + string.ascii_letters + " -()+./#", max_size=24)


def assert_same_format(original: str, surrogate: str) -> None:
    assert len(surrogate) == len(original)
    for before, after in zip(original, surrogate, strict=True):
        if before.isdecimal():
            assert after in string.digits
        elif before.isalpha():
            assert after in string.ascii_letters
            assert after.isupper() == before.isupper()
        else:
            assert after == before


@settings(max_examples=200, deadline=None)
@given(PHONE_LIKE)
def test_format_preserving_keeps_shape_and_changes_value(surface: str) -> None:
    operator = formats.FormatPreservingOperator(KEY)
    surrogate = operator.replace(mention(surface))
    if any(char.isalnum() for char in surface):
        assert_same_format(surface, surrogate)
        assert surrogate != surface
        assert operator.counts["format_preserved"] == 1
    else:
        assert surrogate == "X" * max(1, len(surface))
        assert operator.counts["format_unchangeable"] == 1


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=12))
def test_format_preserving_on_any_text(surface: str) -> None:
    surrogate = formats.FormatPreservingOperator(KEY).replace(mention(surface, "ID"))
    assert surrogate != surface
    if any(formats.is_changeable(char) for char in surface):
        assert_same_format(surface, surrogate)


def test_format_preserving_examples() -> None:
    operator = formats.FormatPreservingOperator(KEY)
    phone = operator.replace(mention("(555) 012-3456"))
    assert re.fullmatch(r"\(\d{3}\) \d{3}-\d{4}", phone)
    identifier = operator.replace(mention("MRN-00417a", "ID"))
    assert re.fullmatch(r"[A-Z]{3}-\d{5}[a-z]", identifier)
    # a single digit has only nine other values, and still always changes
    for digit in string.digits:
        assert operator.replace(mention(digit, patient=f"p{digit}")) != digit


def test_format_preserving_is_keyed_and_scoped() -> None:
    surface = "+1 617-555-0199"
    operator = formats.FormatPreservingOperator(KEY)
    first = operator.replace(mention(surface))
    assert operator.replace(mention(surface)) == first
    assert formats.FormatPreservingOperator(KEY).replace(mention(surface)) == first
    assert formats.FormatPreservingOperator(OTHER_KEY).replace(mention(surface)) != first
    assert operator.replace(mention(surface, patient="p2")) != first
    corpus = formats.FormatPreservingOperator(KEY, {"consistency": "corpus"})
    assert corpus.replace(mention(surface, patient="p1")) == corpus.replace(
        mention(surface, patient="p2")
    )


# ---------------------------------------------------------------- locations


@pytest.mark.parametrize(
    ("surface", "label", "kind"),
    [
        ("Springfield", "LOCATION", places.CITY),
        ("St. Louis", "LOCATION", places.CITY),
        ("12 Oak Street", "LOCATION", places.ADDRESS),
        ("4417B Maple Ave.", "LOCATION", places.ADDRESS),
        ("Oak Street", "LOCATION", places.STREET),
        ("Mercy Hospital", "LOCATION", places.HOSPITAL),
        ("Lakeside Medical Center", "LOCATION", places.HOSPITAL),
        ("Northfield", "HOSPITAL", places.HOSPITAL),
        ("MA", "LOCATION", places.STATE),
        ("new hampshire", "LOCATION", places.STATE),
        ("Canada", "LOCATION", places.COUNTRY),
        ("United Kingdom", "LOCATION", places.COUNTRY),
        ("02115", "LOCATION", places.ZIP),
        ("02115-1234", "LOCATION", places.ZIP),
        ("4410", "LOCATION", places.CODE),
    ],
)
def test_location_kinds(surface: str, label: str, kind: str) -> None:
    assert places.classify(surface, label) == kind


def location(surface: str, label: str = "LOCATION", patient: str = "p1", **options) -> str:
    return places.LocationOperator(KEY, options).replace(mention(surface, label, patient))


def test_location_surrogates_keep_their_kind() -> None:
    assert re.match(r"\d+ ", location("12 Oak Street"))
    assert location("Oak Street").split()[-1].isalpha()
    assert location("Mercy Hospital", "HOSPITAL").endswith(" Hospital")
    assert location("Lakeside Medical Center").endswith(" Medical Center")
    assert location("Pinecrest Hosp.", "HOSPITAL").endswith(" Hosp.")
    assert location("Hospital of the Valley", "HOSPITAL").startswith("Hospital of ")
    assert re.fullmatch(r"[A-Z]{3}", location("QRH", "HOSPITAL"))
    assert location("MA").upper() in places.US_STATES
    assert location("Ohio").casefold() in places.STATE_NAMES
    assert re.fullmatch(r"\d{5}-\d{4}", location("02115-1234"))
    assert re.fullmatch(r"[A-Z]{3}", location("USA"))


def test_location_keeps_case_style() -> None:
    upper = location("SPRINGFIELD")
    assert upper == upper.upper()
    lower = location("springfield")
    assert lower == lower.lower()
    assert upper.casefold() == lower.casefold()  # keyed on the normalised original
    hospital = location("MERCY HOSPITAL", "HOSPITAL")
    assert hospital == hospital.upper()
    assert hospital.endswith(" HOSPITAL")


def test_location_composite_address_is_replaced_part_by_part() -> None:
    surface = "12 Oak St, Springfield, MA 01234"
    surrogate = location(surface)
    street, city, state_zip = surrogate.split(", ")
    assert re.match(r"\d+ ", street)
    assert city == location("Springfield")
    state, zip_code = state_zip.split(" ")
    assert state in places.US_STATES
    assert re.fullmatch(r"\d{5}", zip_code) and zip_code != "01234"


def test_location_hospital_followed_by_a_town() -> None:
    surrogate = location("Mercy Hospital, Springfield", "HOSPITAL")
    hospital, town = surrogate.split(", ")
    assert hospital.endswith(" Hospital")
    assert town and "Hospital" not in town and town != "Springfield"


def test_location_is_deterministic_and_keyed() -> None:
    first = location("Springfield")
    assert location("Springfield") == first
    assert location("Springfield", patient="p2") != first
    other = places.LocationOperator(OTHER_KEY).replace(mention("Springfield", "LOCATION"))
    assert other != first


@settings(max_examples=40, deadline=None)
@given(st.text(alphabet=string.ascii_letters + " ,.-0123456789", min_size=1, max_size=30))
def test_location_never_returns_the_original(surface: str) -> None:
    operator = places.LocationOperator(KEY)
    surrogate = operator.replace(mention(surface, "LOCATION"))
    assert normalize(surrogate) != normalize(surface)
    assert operator.replace(mention(surface, "LOCATION")) == surrogate


def test_location_gazetteer() -> None:
    towns = ["Amberford", "Brookvale", "Cinderbury"]
    operator = places.LocationOperator(KEY, {"gazetteer": {"city": towns}})
    for surface in ("Springfield", "Northfield", "Eastport"):
        assert operator.replace(mention(surface, "LOCATION")) in towns
    # the original itself is never drawn from the list
    assert operator.replace(mention("Brookvale", "LOCATION")) in {"Amberford", "Cinderbury"}
    assert operator.replace(mention("AMBERFORD", "LOCATION")) in {"BROOKVALE", "CINDERBURY"}
    # a kind the gazetteer does not list still comes from Faker
    assert re.match(r"\d+ ", operator.replace(mention("12 Oak Street", "LOCATION")))
    assert operator.counts["location_city"] == 5


def test_location_bad_options() -> None:
    with pytest.raises(ConfigError, match="gazetteer kind"):
        places.LocationOperator(KEY, {"gazetteer": {"planet": ["Mars"]}})
    with pytest.raises(ConfigError, match="list of names"):
        places.LocationOperator(KEY, {"gazetteer": {"city": "Amberford"}})
    with pytest.raises(ConfigError, match="locale"):
        places.LocationOperator(KEY, {"locale": "xx_YY"})


# the specification of a trailing zip code: what split_trailing_zip computes, as
# one regex (a full match of it is quadratic in the text's length)
TRAILING_ZIP_SPEC = re.compile(r"(?P<head>.*[^\W\d_].*?)(?P<space>\s+)(?P<zip>\d{5}(?:-\d{4})?)")


def spec_split(text: str) -> tuple[str, str, str] | None:
    match = TRAILING_ZIP_SPEC.fullmatch(text)
    return (match["head"], match["space"], match["zip"]) if match else None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Springfield MA 01234", ("Springfield MA", " ", "01234")),
        ("Boston  02115-1234", ("Boston", "  ", "02115-1234")),
        ("Boston \n 02115", ("Boston", " \n ", "02115")),
        ("Boston\nMA 02115", None),  # a line break in the head: not one place
        ("02115", None),
        ("12 02115", None),  # no letter before the zip
        ("Boston 2115", None),
        ("Boston 021155", None),
        ("Boston x02115", None),
        ("Boston 02115-123", None),
        ("Boston 02115 ", None),  # the caller strips the text first
        ("A 12345 67890", ("A 12345", " ", "67890")),
        ("\u00e9 12345", ("\u00e9", " ", "12345")),
        ("x\u00a012345", ("x", "\u00a0", "12345")),
    ],
)
def test_trailing_zip_examples(text: str, expected: tuple[str, str, str] | None) -> None:
    assert places.split_trailing_zip(text) == expected == spec_split(text)


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet="aZ\u00e9_1234-5 \t\n\u00a0.,", max_size=24))
def test_trailing_zip_agrees_with_its_specification(text: str) -> None:
    assert places.split_trailing_zip(text) == spec_split(text)


def test_trailing_zip_is_linear_on_a_long_span() -> None:
    # 120,000 characters without a zip: the specification regex takes minutes
    operator = places.LocationOperator(KEY)
    for surface in ("a " * 60_000, "a" * 120_000, "Main St " * 15_000 + "02115"):
        started = time.perf_counter()
        assert operator.replace(mention(surface, "LOCATION")) != surface
        assert time.perf_counter() - started < 5


# ---------------------------------------------------------------- ages


@pytest.mark.parametrize(
    ("surface", "expected"),
    [
        ("89", "89"),
        ("90", "90+"),
        ("92", "90+"),
        ("93 yo", "90+ yo"),
        ("95 y/o", "90+ y/o"),
        ("age 101", "age 90+"),
        ("91-year-old", "90+-year-old"),
        ("in her 90s", "in her 90+"),
        ("85-92", "90+"),
        ("90+", "90+"),
        ("ninety-one", "90+"),
        ("ninety-one years old", "90+ years old"),
        ("one hundred and two", "90+"),
        ("eighty-nine", "eighty-nine"),
        ("95 months", "95 months"),
        ("18-month-old", "18-month-old"),
    ],
)
def test_age_safe_harbor(surface: str, expected: str) -> None:
    operator = simple.AgeOperator(KEY)
    assert operator.replace(mention(surface, "AGE")) == expected
    assert operator.allows_identity(mention(surface, "AGE")) == (expected == surface)


@given(st.integers(min_value=0, max_value=150))
def test_age_threshold_on_numbers(age: int) -> None:
    operator = simple.AgeOperator(KEY)
    expected = f"{age} yo" if age < 90 else "90+ yo"
    assert operator.replace(mention(f"{age} yo", "AGE")) == expected


def test_age_unparsed_is_redacted_and_threshold_option() -> None:
    operator = simple.AgeOperator(KEY)
    assert operator.replace(mention("elderly", "AGE")) == "[AGE]"
    assert not operator.allows_identity(mention("elderly", "AGE"))
    assert operator.counts == {"unparsed_ages": 1}
    strict = simple.AgeOperator(KEY, {"threshold": 85})
    assert strict.replace(mention("86", "AGE")) == "85+"
    assert strict.replace(mention("84", "AGE")) == "84"
    with pytest.raises(ConfigError, match="threshold"):
        simple.AgeOperator(KEY, {"threshold": "ninety"})


@pytest.mark.parametrize(
    ("surface", "expected"),
    [
        ("43 yo", "40-44 yo"),
        ("age 0", "age 0-4"),
        ("41-47", "40-49"),
        ("forty-one", "40-44"),
        ("88", "85-89"),
        ("93 yo", "90+ yo"),  # over the threshold: capped as before
        ("85-92", "90+"),
        ("18-month-old", "18-month-old"),  # under a year's unit: kept
    ],
)
def test_age_banding_is_an_operator_choice(surface: str, expected: str) -> None:
    operator = simple.AgeOperator(KEY, {"band": 5})
    assert operator.replace(mention(surface, "AGE")) == expected
    assert operator.allows_identity(mention(surface, "AGE")) == (expected == surface)


def test_age_banding_counts_and_band_option() -> None:
    operator = simple.AgeOperator(KEY, {"band": 10, "threshold": 85})
    assert operator.replace(mention("83 yo", "AGE")) == "80-84 yo"  # the last band stops short
    assert operator.replace(mention("57", "AGE")) == "50-59"
    assert operator.replace(mention("86", "AGE")) == "85+"
    assert operator.counts == {"ages_banded": 2, "ages_capped": 1}
    for band in (1, "5", True):
        with pytest.raises(ConfigError, match="band"):
            simple.AgeOperator(KEY, {"band": band})


# ---------------------------------------------------------------- redact, hash, keep


def test_redact() -> None:
    operator = simple.RedactOperator(KEY)
    assert operator.replace(mention("Dr. Quill", "DOCTOR")) == "[DOCTOR]"
    assert operator.allows_identity(mention("[DOCTOR]", "DOCTOR"))
    custom = simple.RedactOperator(KEY, {"template": "<{label}>"})
    assert custom.replace(mention("Ann Example", "PATIENT")) == "<PATIENT>"
    assert operator.counts["redacted"] == 1
    with pytest.raises(ConfigError, match="template"):
        simple.RedactOperator(KEY, {"template": "[{kind}]"})


def test_hash() -> None:
    operator = simple.HashOperator(KEY)
    first = operator.replace(mention("A-4410-77", "ID"))
    assert re.fullmatch(r"[0-9a-f]{10}", first)
    assert operator.replace(mention("a-4410-77 ", "ID")) == first  # normalised original
    assert operator.replace(mention("A-4410-78", "ID")) != first
    assert operator.replace(mention("A-4410-77", "ID", patient="p2")) != first
    assert simple.HashOperator(OTHER_KEY).replace(mention("A-4410-77", "ID")) != first
    corpus = simple.HashOperator(KEY, {"consistency": "corpus", "prefix": "ID-", "length": 16})
    across = corpus.replace(mention("A-4410-77", "ID", patient="p1"))
    assert re.fullmatch(r"ID-[0-9a-f]{16}", across)
    assert corpus.replace(mention("A-4410-77", "ID", patient="p2")) == across
    assert operator.counts["hashed"] == 4
    with pytest.raises(ConfigError, match="length"):
        simple.HashOperator(KEY, {"length": 100})


def test_keep() -> None:
    operator = simple.KeepOperator(KEY)
    assert operator.replace(mention("Ann Example", "PATIENT")) == "Ann Example"
    assert operator.allows_identity(mention("Ann Example", "PATIENT"))
    assert operator.counts == {"kept": 1}
