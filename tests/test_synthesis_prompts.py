"""Prompt files: loading, checks and rendering (only masked text is rendered)."""

from __future__ import annotations

import pytest
import yaml

from synthdeid.errors import ConfigError, InputError
from synthdeid.synthesis.placeholders import iter_placeholders, load_allowlist, parse_allowlist
from synthdeid.synthesis.prompts import load_prompt
from synthesis_helpers import PROMPT_PATH, SEED_TEXT, allowlist, prompt


def test_shipped_prompt_and_allowlist_load():
    spec = prompt()
    assert spec.version and len(spec.fingerprint) == 16
    assert {"standard", "no_pii", "per_absent_dates", "repeated_mentions"} <= set(spec.variants)
    assert not spec.variants["no_pii"].pii and spec.variants["standard"].pii
    assert allowlist().label_of("DOCTOR") == "DOCTOR"


def test_render_contains_the_masked_note_and_the_variant_placeholders():
    spec = prompt()
    system, user = spec.render(spec.variant("per_absent_dates"), SEED_TEXT)
    assert system.role == "system" and user.role == "user"
    assert SEED_TEXT in user.content
    assert "[[DATE_n]]" in user.content and "[[DOCTOR_n]]" not in user.content
    assert "$" not in user.content


def test_request_carries_generation_settings_and_seed():
    spec = prompt()
    request = spec.request(
        spec.variant("standard"), SEED_TEXT, generation={"temperature": 0.3}, seed=5
    )
    assert request.temperature == 0.3 and request.seed == 5 and request.json_mode


def test_unknown_variant_is_a_config_error():
    with pytest.raises(ConfigError, match="no variant 'bogus'"):
        prompt().variant("bogus")


def _write(tmp_path, data):
    path = tmp_path / "prompt.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_bad_prompt_files(tmp_path):
    base = yaml.safe_load(PROMPT_PATH.read_text())
    bad_sub = {**base, "user": base["user"] + " $unknown"}
    with pytest.raises(InputError, match="unknown substitutions"):
        load_prompt(_write(tmp_path, bad_sub), allowlist())
    bad_name = {
        **base,
        "variants": {"x": {**base["variants"]["standard"], "placeholders": ["EMAIL"]}},
    }
    with pytest.raises(InputError, match="not allowlisted"):
        load_prompt(_write(tmp_path, bad_name), allowlist())
    bad_expect = {
        **base,
        "variants": {"x": {**base["variants"]["no_pii"], "expect": "placeholders"}},
    }
    with pytest.raises(InputError, match="expect 'none'"):
        load_prompt(_write(tmp_path, bad_expect), allowlist())


def test_bad_allowlists(tmp_path):
    with pytest.raises(InputError, match="not one of"):
        parse_allowlist({"placeholders": {"EMAIL": {"label": "EMAIL", "generator": "x"}}}, "f")
    with pytest.raises(InputError, match="upper-case"):
        parse_allowlist({"placeholders": {"doctor": {"label": "DOCTOR", "generator": "x"}}}, "f")
    with pytest.raises(ConfigError, match="does not exist"):
        load_allowlist(tmp_path / "missing.yaml")


def test_iter_placeholders():
    found = list(iter_placeholders("a [[DOCTOR_1]] b [[DATE_12]] [[x_1]]"))
    assert [(m.name, m.number, m.token) for m in found] == [
        ("DOCTOR", 1, "[[DOCTOR_1]]"),
        ("DATE", 12, "[[DATE_12]]"),
    ]


def test_required_placeholders_and_the_placeholder_shape():
    from synthdeid.llm.constraints import ShapeMatcher
    from synthdeid.synthesis.prompts import placeholder_shape

    spec = prompt()
    seed = "Seen by [[DOCTOR_1]] on [[DATE_1]]; [[DOCTOR_1]] to call back."
    standard, dates = spec.variant("standard"), spec.variant("per_absent_dates")
    assert standard.required_placeholders(seed) == ("[[DOCTOR_1]]", "[[DATE_1]]", "[[DOCTOR_1]]")
    assert dates.required_placeholders(seed) == ("[[DATE_1]]",)
    assert dates.required_placeholders("No dates here.") == ("[[DATE_1]]",)
    assert spec.variant("no_pii").required_placeholders(seed) == ()
    repeated = spec.variant("repeated_mentions")
    assert repeated.required_placeholders("On [[DATE_1]].") == ("[[DATE_1]]", "[[DATE_1]]")

    shape = placeholder_shape(standard, seed)
    # the seed's own segments: "Seen by " (8), " on " (4), "; " (2), " to call back." (14)
    assert shape.max_chars == (52, 46, 43, 61) and shape.min_chars == (4, 2, 1, 8)
    rewrite = '{"note": "Noted by [[DOCTOR_1]] at [[DATE_1]]: [[DOCTOR_1]] will call again."}'
    assert ShapeMatcher(shape).matches(rewrite)
    short = '{"note": "By [[DOCTOR_1]] at [[DATE_1]]: [[DOCTOR_1]] calls."}'
    assert not ShapeMatcher(shape).matches(short)  # "By " is under the minimum of 4
    request = spec.request(standard, seed, generation={"constrain": "placeholders"}, seed=1)
    assert request.shape == shape and request.json_mode
    free = spec.request(standard, seed, generation={"constrain": "free"}, seed=1)
    assert free.shape is None and not free.json_mode
    with pytest.raises(ConfigError, match="constrain"):
        spec.request(standard, seed, generation={"constrain": "grammar"}, seed=1)


def test_a_seed_without_placeholders_gets_one_drawn_from_the_seeds_label_mix():
    from collections import Counter

    from synthdeid.synthesis.prompts import placeholder_mix, placeholder_shape

    spec = prompt()
    standard = spec.variant("standard")
    seeds = ["[[DATE_1]] and [[DATE_2]] then [[DATE_1]].", "[[PHONE_1]] called.", "No PHI."]
    mix = placeholder_mix(seeds)
    assert mix == Counter({"DATE": 3, "PHONE": 1})
    draws = Counter(standard.stand_in(mix, seed) for seed in range(400))
    # only names the seeds hold, in about their proportions (3:1)
    assert set(draws) == {"DATE", "PHONE"}
    assert 0.65 < draws["DATE"] / 400 < 0.85
    assert standard.stand_in(mix, 7) == standard.stand_in(mix, 7)  # seeded
    # seeds holding none of the variant's names: uniform over its names
    assert len({standard.stand_in(Counter(), s) for s in range(200)}) == len(standard.placeholders)
    assert spec.variant("no_pii").stand_in(mix, 1) is None

    assert standard.required_placeholders("No PHI.", "PHONE") == ("[[PHONE_1]]",)
    assert standard.required_placeholders(seeds[0], "PHONE")[0] == "[[DATE_1]]"  # the seed's own
    shape = placeholder_shape(standard, "No PHI.", stand_in="PHONE")
    assert shape.placeholders == ("[[PHONE_1]]",)
    request = spec.request(
        standard, "No PHI.", generation={"constrain": "placeholders"}, seed=1, stand_in="PHONE"
    )
    assert request.shape == shape
    with pytest.raises(ConfigError, match="does not allow"):
        spec.variant("per_absent_dates").required_placeholders("No PHI.", "PHONE")
