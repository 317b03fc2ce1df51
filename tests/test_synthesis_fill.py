"""Local template fill: exact offsets, consistent placeholders, forbidden surfaces, generators."""

from __future__ import annotations

import random
import re
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synthdeid.detectors import parse_date
from synthdeid.errors import ConfigError, StepError
from synthdeid.notes import Span
from synthdeid.synthesis.fill import (
    FilledNote,
    ForbiddenSurfaces,
    TemplateFiller,
    check_fill,
    normalize_surface,
)
from synthdeid.synthesis.generators import (
    AGES,
    GENERATORS,
    SHAPES,
    ShapedGenerator,
    build_generators,
    generators_fingerprint,
    is_known_field,
    shape_fields,
    value_pools,
)
from synthdeid.synthesis.placeholders import PlaceholderAllowlist, load_allowlist

REPO = Path(__file__).resolve().parents[1]
TEMPLATE = (
    "Pt [[PATIENT_1]] seen by [[DOCTOR_1]] with [[DOCTOR_2]] on [[DATE_1]].\n"
    "Plan discussed with [[PATIENT_1]]; f/u at [[HOSPITAL_1]] on [[DATE_2]]."
)


@pytest.fixture(scope="module")
def allowlist() -> PlaceholderAllowlist:
    return load_allowlist(REPO / "resources" / "placeholders.yaml")


@pytest.fixture(scope="module")
def filler(allowlist: PlaceholderAllowlist) -> TemplateFiller:
    return TemplateFiller(allowlist, seed=11)


def surfaces(filled: FilledNote) -> list[str]:
    return [filled.text[s.start : s.end] for s in filled.spans]


# --- the fill --------------------------------------------------------------


def test_offsets_exact_and_labels_from_allowlist(filler: TemplateFiller) -> None:
    filled = filler.fill(TEMPLATE, "t1")
    assert [s.label for s in filled.spans] == [
        "PATIENT", "DOCTOR", "DOCTOR", "DATE", "PATIENT", "HOSPITAL", "DATE"
    ]  # fmt: skip
    assert surfaces(filled) == [filled.values[token] for token in filled.tokens]
    assert filled.template_id == "t1"
    check_fill(filled, TEMPLATE)


def test_repeated_placeholder_same_value_different_numbers_differ(filler: TemplateFiller) -> None:
    for index in range(50):
        filled = filler.fill(TEMPLATE, f"rep-{index}")
        patient = surfaces(filled)[0]
        assert surfaces(filled)[4] == patient == filled.values["[[PATIENT_1]]"]
        doctor_1, doctor_2 = filled.values["[[DOCTOR_1]]"], filled.values["[[DOCTOR_2]]"]
        assert normalize_surface(doctor_1) != normalize_surface(doctor_2)


def test_text_outside_placeholders_unchanged(filler: TemplateFiller) -> None:
    filled = filler.fill(TEMPLATE, "outside")
    rebuilt, cursor = [], 0
    for span, token in zip(filled.spans, filled.tokens, strict=True):
        rebuilt += [filled.text[cursor : span.start], token]
        cursor = span.end
    rebuilt.append(filled.text[cursor:])
    assert "".join(rebuilt) == TEMPLATE


def test_no_placeholder_gives_text_unchanged(filler: TemplateFiller) -> None:
    text = "No PHI here. [not a placeholder] [[lower_1]] {{X}}\n\tBP 120/80."
    filled = filler.fill(text, "plain")
    assert filled.text == text
    assert filled.spans == () and filled.tokens == () and dict(filled.values) == {}


def test_adjacent_placeholders_and_edges(filler: TemplateFiller) -> None:
    template = "[[DATE_1]][[AGE_1]]"
    filled = filler.fill(template, "adjacent")
    first, second = filled.spans
    assert (first.start, second.end) == (0, len(filled.text))
    assert first.end == second.start
    check_fill(filled, template)


def test_zero_padded_number_is_the_same_placeholder(filler: TemplateFiller) -> None:
    filled = filler.fill("[[PATIENT_1]] and [[PATIENT_01]]", "padded")
    assert surfaces(filled)[0] == surfaces(filled)[1]
    assert list(filled.values) == ["[[PATIENT_1]]"]


def test_unknown_placeholder_is_an_error(filler: TemplateFiller) -> None:
    with pytest.raises(StepError, match=r"\[\[EMAIL_1\]\].*not on the allowlist"):
        filler.fill("Write to [[EMAIL_1]] or [[DOCTOR_1]].", "bad")


def test_determinism_across_order_and_instances(allowlist: PlaceholderAllowlist) -> None:
    ids = [f"note-{i}" for i in range(30)]
    first = TemplateFiller(allowlist, seed=5)
    expected = {i: first.fill(TEMPLATE, i) for i in ids}
    shuffled = ids[:]
    random.Random(1).shuffle(shuffled)
    second = TemplateFiller(allowlist, seed=5)
    assert {i: second.fill(TEMPLATE, i) for i in shuffled} == expected
    # and the id matters: two templates do not get the same values
    assert len({expected[i].text for i in ids}) == len(ids)


def test_different_seeds_differ(allowlist: PlaceholderAllowlist) -> None:
    one, two = TemplateFiller(allowlist, seed=1), TemplateFiller(allowlist, seed=2)
    texts_one = [one.fill(TEMPLATE, f"n{i}").text for i in range(20)]
    texts_two = [two.fill(TEMPLATE, f"n{i}").text for i in range(20)]
    assert sum(a != b for a, b in zip(texts_one, texts_two, strict=True)) >= 18


def test_forbidden_ages_leave_the_one_allowed(allowlist: PlaceholderAllowlist) -> None:
    forbidden = [str(age) for age in AGES if age != 97]
    filler = TemplateFiller(allowlist, seed=3, forbidden=forbidden, max_redraws=500)
    for index in range(100):
        assert filler.fill("aged [[AGE_1]]", f"a{index}").values["[[AGE_1]]"] == "97"


def test_forbidden_surnames_never_produced(allowlist: PlaceholderAllowlist) -> None:
    # every surname of the pool but those starting with S is real PHI here
    names = value_pools().last.names
    forbidden = [name for name in names if not name.startswith("S")]
    assert len(forbidden) > 800
    filler = TemplateFiller(allowlist, seed=3, forbidden=forbidden, max_redraws=500)
    # names under 3 characters ("Wu") block only an equal value, longer ones any mention
    blocked_words = {name.casefold() for name in forbidden if len(name) >= 3}
    blocked_values = {name.casefold() for name in forbidden}
    produced = 0
    for index in range(200):
        filled = filler.fill("[[DOCTOR_1]] / [[PATIENT_1]] / [[HOSPITAL_1]]", f"f{index}")
        for value in filled.values.values():
            words = set(re.findall(r"[^\W_]+", value.casefold()))
            assert not words & blocked_words, value
            assert value.casefold() not in blocked_values, value
            produced += 1
    assert produced == 600


def test_all_values_forbidden_stops_after_max_redraws(allowlist: PlaceholderAllowlist) -> None:
    filler = TemplateFiller(allowlist, seed=3, forbidden=[str(a) for a in AGES], max_redraws=20)
    with pytest.raises(StepError, match=r"'x'.*\[\[AGE_1\]\] after 20 redraws"):
        filler.fill("aged [[AGE_1]]", "x")


def test_more_placeholders_than_values_is_an_error(allowlist: PlaceholderAllowlist) -> None:
    template = " ".join(f"[[AGE_{n}]]" for n in range(1, len(AGES) + 2))
    with pytest.raises(StepError, match="another AGE placeholder"):
        TemplateFiller(allowlist, seed=0, max_redraws=200).fill(template, "ages")


def test_forbidden_surfaces_matching_rules() -> None:
    forbidden = ForbiddenSurfaces(["John  SMITH", "J. Doe", "3/14/2019", "Al", "Smith", " "])
    assert forbidden.blocks("john smith")
    assert forbidden.blocks("Dr. John Smith, MD")  # contains it as whole words
    assert forbidden.blocks("Smith-Jones")
    assert not forbidden.blocks("Smithson")
    assert forbidden.blocks("Dr J Doe")  # punctuation does not matter inside the word test
    assert forbidden.blocks("3-14-2019")
    assert not forbidden.blocks("3/14/2018")
    assert forbidden.blocks(" al ")  # short surfaces: equality only
    assert not forbidden.blocks("Al Green")
    assert not forbidden.blocks("Alvarez")
    assert len(forbidden) == 5


def test_max_redraws_must_be_a_count(allowlist: PlaceholderAllowlist) -> None:
    with pytest.raises(ConfigError, match="max_redraws"):
        TemplateFiller(allowlist, seed=0, max_redraws=-1)


def test_provenance_names_what_decides_the_output(filler: TemplateFiller) -> None:
    record = filler.provenance()
    assert record["seed"] == 11
    assert record["generators_fingerprint"] == generators_fingerprint()
    assert record["allowlist_fingerprint"] == filler.allowlist.fingerprint


# --- check_fill ------------------------------------------------------------


def test_check_fill_names_a_wrong_span(filler: TemplateFiller) -> None:
    filled = filler.fill(TEMPLATE, "check")
    span = filled.spans[1]
    moved = (*filled.spans[:1], Span(span.start + 1, span.end + 1, span.label), *filled.spans[2:])
    with pytest.raises(
        StepError, match=rf"'check'.*span {span.start + 1}-{span.end + 1} \(DOCTOR\)"
    ):
        check_fill(replace(filled, spans=moved))


def test_check_fill_refuses_overlap_and_out_of_range() -> None:
    values = {"[[AGE_1]]": "92", "[[AGE_2]]": "93"}
    tokens = ("[[AGE_1]]", "[[AGE_2]]")
    overlapping = FilledNote("9293", (Span(0, 2, "AGE"), Span(1, 3, "AGE")), values, tokens)
    with pytest.raises(StepError, match="overlaps"):
        check_fill(overlapping)
    outside = FilledNote("92", (Span(0, 2, "AGE"), Span(2, 4, "AGE")), values, tokens)
    with pytest.raises(StepError, match="outside"):
        check_fill(outside)
    untokened = FilledNote("92 94", (Span(0, 2, "AGE"), Span(3, 5, "AGE")), values)
    with pytest.raises(StepError, match="'94', which is no inserted value"):
        check_fill(untokened)


def test_check_fill_with_template_sees_changed_outside_text(filler: TemplateFiller) -> None:
    filled = filler.fill(TEMPLATE, "outside-check")
    assert filled.text.startswith("Pt ")
    changed = replace(filled, text="Px" + filled.text[2:])
    with pytest.raises(StepError, match="not the template's text"):
        check_fill(changed, TEMPLATE)


# --- property: random templates ---------------------------------------------

PLACEHOLDER_NAMES = (
    "DOCTOR",
    "PATIENT",
    "DATE",
    "LOCATION",
    "HOSPITAL",
    "PHONE",
    "AGE",
    "ID",
    "OTHER",
)
# free text may contain brackets and anything else, but no well-formed placeholder
free_text = st.text(max_size=30).filter(lambda text: "[[" not in text and "]]" not in text)
placeholder = st.builds(
    lambda name, number: f"[[{name}_{number}]]",
    st.sampled_from(PLACEHOLDER_NAMES),
    st.integers(min_value=1, max_value=3),
)


@settings(max_examples=150, deadline=None)
@given(
    parts=st.lists(st.tuples(free_text, placeholder), max_size=10),
    tail=free_text,
    template_id=st.text(max_size=12),
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_property_fill_is_exact(
    allowlist: PlaceholderAllowlist,
    parts: list[tuple[str, str]],
    tail: str,
    template_id: str,
    seed: int,
) -> None:
    template = "".join(text + token for text, token in parts) + tail
    filled = TemplateFiller(allowlist, seed).fill(template, template_id)
    check_fill(filled, template)
    assert len(filled.spans) == len(parts)
    for span, token, (_, written) in zip(filled.spans, filled.tokens, parts, strict=True):
        assert token == written
        assert filled.text[span.start : span.end] == filled.values[token]
        assert span.label == allowlist.label_of(token[2:].split("_")[0])
    by_value: dict[tuple[str, str], str] = {}
    for token, value in filled.values.items():
        name = token[2:].split("_")[0]
        assert by_value.setdefault((name, normalize_surface(value)), token) == token


# --- generators --------------------------------------------------------------


@pytest.fixture(scope="module")
def generators() -> dict[str, ShapedGenerator]:
    return build_generators()  # type: ignore[return-value]


def test_every_allowlisted_generator_exists(allowlist: PlaceholderAllowlist) -> None:
    assert {allowlist.generator_of(name) for name in allowlist.names} <= set(GENERATORS)
    with pytest.raises(ConfigError, match="unknown value generators"):
        build_generators(["doctor_name", "nope"])


def test_generators_give_non_empty_trimmed_values(generators: dict[str, ShapedGenerator]) -> None:
    rng = random.Random(0)
    for name, generator in generators.items():
        for _ in range(300):
            value = generator.draw(rng)
            assert value and value == value.strip() and "[[" not in value, (name, value)


def test_every_shape_renders(generators: dict[str, ShapedGenerator]) -> None:
    rng = random.Random(1)
    for name, shapes in SHAPES.items():
        for shape in shapes:
            value = generators[name].render(shape, rng)
            assert value and "{" not in value, (name, shape)


def test_generators_are_deterministic_given_the_rng(generators: dict[str, ShapedGenerator]) -> None:
    for name, generator in generators.items():
        first = [generator.draw(random.Random(9)) for _ in range(5)]
        assert len(set(first)) == 1, name


def test_every_date_shape_parses_as_a_date(generators: dict[str, ShapedGenerator]) -> None:
    rng = random.Random(2)
    for shape in SHAPES["date"]:
        for _ in range(40):
            value = generators["date"].render(shape, rng)
            parsed = parse_date(value)
            assert parsed is not None, (shape, value)
            if parsed.year is not None:
                assert 1995 <= parsed.year <= 2025, (shape, value)


def test_numeric_dates_read_back_the_drawn_date(generators: dict[str, ShapedGenerator]) -> None:
    rng = random.Random(3)
    for _ in range(200):
        value = generators["date"].render("{mm}/{dd}/{yyyy}", rng)
        parsed = parse_date(value)
        assert parsed is not None
        assert (parsed.month, parsed.day, parsed.year) == tuple(int(x) for x in value.split("/"))


def test_ages_are_90_to_104(generators: dict[str, ShapedGenerator]) -> None:
    rng = random.Random(4)
    ages = [generators["age"].draw(rng) for _ in range(2000)]
    assert all(age.isdigit() and 90 <= int(age) <= 104 for age in ages)
    assert {int(age) for age in ages} >= {90, 95, 100}


def test_phone_and_identifier_shapes(generators: dict[str, ShapedGenerator]) -> None:
    rng = random.Random(5)
    for _ in range(300):
        phone = generators["phone"].draw(rng)
        assert re.fullmatch(r"[0-9()+. x-]+(?:ext\. \d+)?", phone), phone
        assert sum(ch.isdigit() for ch in phone) >= 5
        identifier = generators["identifier"].draw(rng)
        assert re.search(r"\d{2}", identifier), identifier
        if re.fullmatch(r"\d{3}-\d{2}-\d{4}", identifier):
            assert identifier.startswith("9")  # SSN-shaped ones are never issued numbers


def test_name_generators_vary_their_shapes(generators: dict[str, ShapedGenerator]) -> None:
    rng = random.Random(6)
    doctors = [generators["doctor_name"].draw(rng) for _ in range(500)]
    assert any(d.startswith("Dr. ") for d in doctors)
    assert any(d.endswith((", MD", ", M.D.")) for d in doctors)
    assert any(d.isupper() for d in doctors)
    assert any(" " not in d for d in doctors)
    patients = [generators["patient_name"].draw(rng) for _ in range(500)]
    assert any(p.startswith(("Mr.", "Mrs.", "Ms.")) for p in patients)
    assert any(re.fullmatch(r"[A-Z]\.[A-Z]\.", p) for p in patients)


def test_shapes_use_only_known_fields() -> None:
    for shapes in SHAPES.values():
        for shape in shapes:
            fields = shape_fields(shape)
            assert fields and all(is_known_field(key) for key in fields), shape
    with pytest.raises(ConfigError, match="unknown fields"):
        ShapedGenerator("bad", {"{nonsense}": 1}, value_pools())


def test_pools_are_built_once_and_stable() -> None:
    pools = value_pools()
    assert value_pools() is pools
    assert len(pools.cities) > 500 and len(pools.addresses) > 1000
    assert len(set(pools.cities)) == len(pools.cities)
