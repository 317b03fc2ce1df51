"""The name operator: Faker surrogates, consistent per token, shape kept, never identity."""

from __future__ import annotations

import random
import re

import faker
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synthdeid.errors import ConfigError
from synthdeid.surrogate.keying import SurrogateKey
from synthdeid.surrogate.operators.base import OPERATORS, Mention, build_operator
from synthdeid.surrogate.operators.names import NameOperator, NamePool

KEY = SurrogateKey(b"test key for names")


def operator(key: SurrogateKey = KEY, **options: object) -> NameOperator:
    return NameOperator(key, options)


def mention(surface: str, patient: str = "pat-1", label: str = "PATIENT") -> Mention:
    return Mention(surface, label, patient, "note-1")


def words(text: str) -> list[str]:
    return re.findall(r"[^\W\d_]+", text)


@pytest.fixture(scope="module")
def op() -> NameOperator:
    return operator()


def test_registered_under_name() -> None:
    assert OPERATORS["name"] is NameOperator
    assert isinstance(build_operator(KEY, "name", {"consistency": "corpus"}), NameOperator)


def test_same_original_same_surrogate_in_any_order() -> None:
    surfaces = ["Alvin Quarrington", "Quarrington", "Dr. Bettany Ploss", "Alvin", "A. Quarrington"]
    first = operator()
    expected = {s: first.replace(mention(s)) for s in surfaces}
    assert {s: first.replace(mention(s)) for s in surfaces} == expected  # repeat, cached
    shuffled = surfaces[:]
    random.Random(3).shuffle(shuffled)
    second = operator()  # a fresh instance, other order
    assert {s: second.replace(mention(s)) for s in shuffled} == expected


def test_surname_and_first_name_shared_across_forms(op: NameOperator) -> None:
    full = op.replace(mention("Alvin Quarrington"))
    first, last = full.split(" ")
    assert op.replace(mention("Quarrington")) == last
    assert op.replace(mention("QUARRINGTON'S")) == last.upper() + "'S"
    assert op.replace(mention("Quarrington's")) == last + "'s"
    assert op.replace(mention("Quarrington, Alvin")) == f"{last}, {first}"
    assert op.replace(mention("quarrington")) == last.lower()
    assert op.replace(mention("Alvin")) == first
    assert op.replace(mention("Mr. Quarrington")) == f"Mr. {last}"
    assert op.replace(mention("Alvin Quarrington-Vell")).startswith(f"{first} {last}-")


def test_plural_possessive_uses_the_family_name(op: NameOperator) -> None:
    # "Smiths'" is the Smith family's: "Smith" is a Faker surname, "Smiths" is not
    smith = op.replace(mention("Smith"))
    assert op.replace(mention("Smiths'")) == smith + "s'"
    jones = op.replace(mention("Jones"))
    assert op.replace(mention("Jones'")) == jones + "'"


def test_different_patients_generally_differ(op: NameOperator) -> None:
    surrogates = {op.replace(mention("Quarrington", patient=f"p{i}")) for i in range(20)}
    assert len(surrogates) >= 10


def test_corpus_consistency_ignores_the_patient() -> None:
    corpus = operator(consistency="corpus")
    surrogates = {corpus.replace(mention("Alvin Quarrington", patient=f"p{i}")) for i in range(10)}
    assert len(surrogates) == 1


def test_label_does_not_change_the_surrogate(op: NameOperator) -> None:
    # a relative (PATIENT) and a mention labelled DOCTOR of one patient share the family name
    assert op.replace(mention("Quarrington", label="DOCTOR")) == op.replace(mention("Quarrington"))


def test_another_key_gives_other_surrogates() -> None:
    a, b = operator(), operator(SurrogateKey(b"another key"))
    surfaces = [f"{f} {g}" for f in ("Alvin", "Bettany", "Corwin") for g in ("Ploss", "Vell")]
    differ = sum(a.replace(mention(s)) != b.replace(mention(s)) for s in surfaces)
    assert differ >= len(surfaces) - 1


@pytest.mark.parametrize(
    ("surface", "check"),
    [
        ("QUARRINGTON", str.isupper),
        ("quarrington", str.islower),
        ("Quarrington", lambda s: s[0].isupper() and s[1:].islower()),
        ("McQuarrie", lambda s: s[0].isupper() and not s.isupper()),
        ("ALVIN QUARRINGTON", str.isupper),
        ("alvin quarrington", str.islower),
    ],
)
def test_case_is_kept(op: NameOperator, surface: str, check: object) -> None:
    result = op.replace(mention(surface))
    assert check(result), result  # type: ignore[operator]
    assert result.casefold() != surface.casefold()


@pytest.mark.parametrize(
    ("surface", "pattern"),
    [
        ("Dr. Bettany Ploss", r"Dr\. [A-Z][a-z]+ [A-Z]\w+"),
        ("Dr Ploss", r"Dr [A-Z]\w+"),
        ("DR PLOSS", r"DR [A-Z]+"),
        ("Mrs. Ploss", r"Mrs\. [A-Z]\w+"),
        ("Ms Ploss", r"Ms [A-Z]\w+"),
        ("Miss Ploss", r"Miss [A-Z]\w+"),
        ("Prof. Ploss", r"Prof\. [A-Z]\w+"),
        ("Bettany Ploss, MD", r"[A-Z]\w+ [A-Z]\w+, MD"),
        ("Bettany Ploss, M.D.", r"[A-Z]\w+ [A-Z]\w+, M\.D\."),
        ("Bettany Ploss RN", r"[A-Z]\w+ [A-Z]\w+ RN"),
        ("Ploss, Bettany, NP", r"[A-Z]\w+, [A-Z]\w+, NP"),
        ("Corwin Ploss Jr.", r"[A-Z]\w+ [A-Z]\w+ Jr\."),
        ("Dr. Ploss, PhD", r"Dr\. [A-Z]\w+, PhD"),
    ],
)
def test_titles_and_credentials_are_kept(op: NameOperator, surface: str, pattern: str) -> None:
    result = op.replace(mention(surface, label="DOCTOR"))
    assert re.fullmatch(pattern, result), result
    assert "Ploss" not in result and "PLOSS" not in result and "Bettany" not in result


@pytest.mark.parametrize(
    ("surface", "pattern"),
    [
        ("J. Ploss", r"[A-Z]\. [A-Z]\w+"),
        ("J Ploss", r"[A-Z] [A-Z]\w+"),
        ("Ploss, J.", r"[A-Z]\w+, [A-Z]\."),
        ("J.P.", r"[A-Z]\.[A-Z]\."),
        ("J.P.Q.", r"[A-Z]\.[A-Z]\.[A-Z]\."),
        ("JP", r"[A-Z][A-Z]"),
        ("j.p.", r"[a-z]\.[a-z]\."),
        ("Bettany Q. Ploss", r"[A-Z]\w+ [A-Z]\. [A-Z]\w+"),
    ],
)
def test_initials_become_other_letters(op: NameOperator, surface: str, pattern: str) -> None:
    result = op.replace(mention(surface))
    assert re.fullmatch(pattern, result), result
    for original, new in zip(
        re.findall(r"\b\w\b", surface), re.findall(r"\b\w\b", result), strict=True
    ):
        assert original.casefold() != new.casefold()


def test_initials_agree_with_each_other(op: NameOperator) -> None:
    letter = op.replace(mention("J."))[0]
    assert op.replace(mention("J.P."))[0] == letter
    assert op.replace(mention("J. Ploss"))[0] == letter


def test_last_first_order_kept(op: NameOperator) -> None:
    forward = op.replace(mention("Corwin Delacroix"))
    backward = op.replace(mention("Delacroix, Corwin"))
    first, last = forward.split()
    assert backward == f"{last}, {first}"
    with_middle = op.replace(mention("Delacroix, Corwin Alvin"))
    assert with_middle.startswith(f"{last}, {first} ")
    assert with_middle.split()[-1] == op.replace(mention("Alvin"))


def test_hyphenated_parts_each_replaced(op: NameOperator) -> None:
    result = op.replace(mention("Bettany Ploss-Vell"))
    _, double = result.split(" ")
    left, right = double.split("-")
    assert left == op.replace(mention("Ploss"))
    assert right == op.replace(mention("Vell"))
    assert re.fullmatch(r"[A-Z]\w+-[A-Z]\w+", op.replace(mention("Anne-Bettany")))
    upper = op.replace(mention("PLOSS-VELL"))
    assert upper.isupper() and upper.count("-") == 1


def test_punctuation_and_whitespace_inside_the_surface_kept(op: NameOperator) -> None:
    result = op.replace(mention("  Bettany  Ploss\n(Vell) "))
    assert re.fullmatch(r"  [A-Z]\w+  [A-Z]\w+\n\([A-Z]\w+\) ", result), result
    assert op.replace(mention("O'Ploss")) != "O'Ploss"


def test_single_word_roles(op: NameOperator) -> None:
    # a common first name alone is a first name, anything else a surname
    assert op.replace(mention("John")) == op.replace(mention("John Ploss")).split()[0]
    assert op.replace(mention("Ploss")) == op.replace(mention("John Ploss")).split()[1]
    # after a title, a first-name-like word is a surname
    assert op.replace(mention("Dr. James")) == "Dr. " + op.replace(mention("Al James")).split()[1]


def test_given_names_keep_their_gender(op: NameOperator) -> None:
    from faker.providers.person.en_US import Provider

    female = {n.casefold() for n in Provider.first_names_female}
    male = {n.casefold() for n in Provider.first_names_male}
    for patient in range(10):
        assert op.replace(mention("Mary", f"p{patient}")).casefold() in female
        assert op.replace(mention("Robert", f"p{patient}")).casefold() in male


def test_pool_draw_is_fakers_draw() -> None:
    from faker.providers.person.en_US import Provider

    fake = faker.Faker("en_US")
    pool = NamePool.of(Provider.last_names)
    for seed in range(50):
        fake.seed_instance(seed)
        expected = fake.last_name()
        fake.seed_instance(seed)
        assert pool.draw(fake.random) == expected


def test_degenerate_surfaces_still_change(op: NameOperator) -> None:
    for surface in ["Dr.", "MD", "123", "", " - ", "Mrs"]:
        result = op.replace(mention(surface))
        assert result != surface
        assert words(result)
    assert op.counts["names_without_letters"] >= 3


def test_counts_names_replaced() -> None:
    counted = operator()
    for surface in ["Alvin", "Ploss", "Alvin Ploss"]:
        counted.replace(mention(surface))
    assert counted.counts["names_replaced"] == 3


def test_other_locale_and_bad_options() -> None:
    british = operator(locale="en_GB")
    result = british.replace(mention("Alvin Quarrington"))
    assert len(result.split()) == 2 and result != "Alvin Quarrington"
    with pytest.raises(ConfigError, match="locale"):
        operator(locale="xx_YY")
    with pytest.raises(ConfigError, match="unknown options"):
        operator(gender="any")


_LETTERS = st.sampled_from("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZéÖñ")
_WORD = st.text(_LETTERS, min_size=1, max_size=10)
_SEPARATOR = st.sampled_from([" ", ", ", "-", ". ", "'s ", "  ", "\n"])


@st.composite
def names(draw: st.DrawFn) -> str:
    parts = draw(st.lists(_WORD, min_size=1, max_size=4))
    text = parts[0]
    for part in parts[1:]:
        text += draw(_SEPARATOR) + part
    prefix = draw(st.sampled_from(["", "Dr. ", "Mrs ", "(", " "]))
    suffix = draw(st.sampled_from(["", ", MD", " RN", "'s", "'", ".", ")"]))
    return prefix + text + suffix


@settings(max_examples=300, deadline=None)
@given(surface=names(), patient=st.sampled_from(["p1", "p2", "p3"]))
def test_never_identity_and_deterministic(surface: str, patient: str) -> None:
    a, b = _SHARED
    result = a.replace(mention(surface, patient))
    assert result != surface
    assert result.casefold() != surface.casefold()
    assert b.replace(mention(surface, patient)) == result
    # the shape is kept: as many letter runs as before
    original_words, new_words = words(surface), words(result)
    assert len(new_words) == len(original_words)


_SHARED = (operator(), operator())
