"""The template validator: every rejection reason on a hand-made answer."""

from __future__ import annotations

import json

import pytest

from synthdeid.synthesis.validator import copied_share, parse_answer
from synthesis_helpers import SEED_TEXT, prompt, validator

GOOD = (
    "Transferred from [[HOSPITAL_1]] on [[DATE_1]] after an episode of dyspnea at rest. "
    "Evaluated by [[DOCTOR_1]], who started diuresis with good urine output overnight. "
    "Son called for an update and was reassured. Plan to wean oxygen, check electrolytes "
    "twice daily, and review fluid balance with [[DOCTOR_1]] on rounds."
)


def answer(note: str) -> str:
    return json.dumps({"note": note})


def verdict(note_answer: str, variant: str = "standard", **settings: object):
    return validator(**settings).validate_answer(note_answer, prompt().variant(variant), SEED_TEXT)


def test_good_template_is_accepted():
    result = verdict(answer(GOOD))
    assert result.accepted and result.template == GOOD


def test_code_fence_is_tolerated_but_prose_is_not():
    assert verdict("```json\n" + answer(GOOD) + "\n```").accepted
    assert verdict("Sure! " + answer(GOOD)).reason == "invalid_json"


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("not json at all", "invalid_json"),
        ('{"note": "unterminated', "invalid_json"),
        (json.dumps(["a", "list"]), "missing_note"),
        (json.dumps({"text": GOOD}), "missing_note"),
        (json.dumps({"note": 42}), "missing_note"),
        (json.dumps({"note": "   "}), "empty"),
    ],
)
def test_unparseable_answers(raw, reason):
    assert parse_answer(raw).reason == reason


@pytest.mark.parametrize(
    ("swap", "reason"),
    [
        ("[[EMAIL_1]]", "placeholder_not_allowlisted"),
        ("[[doctor_1]]", "malformed_placeholder"),
        ("[DOCTOR_1]", "malformed_placeholder"),
        ("{{DOCTOR}}", "malformed_placeholder"),
        ("[[DOCTOR]]", "malformed_placeholder"),
    ],
)
def test_bad_placeholders(swap, reason):
    assert verdict(answer(GOOD.replace("[[DOCTOR_1]]", swap, 1))).reason == reason


def test_variant_restricts_placeholders():
    # per_absent_dates allows DATE only: a DOCTOR placeholder breaks it
    assert verdict(answer(GOOD), "per_absent_dates").reason == "placeholder_not_in_variant"
    only_dates = GOOD.replace("[[HOSPITAL_1]]", "the ward").replace("[[DOCTOR_1]]", "the team")
    assert verdict(answer(only_dates), "per_absent_dates").accepted


def test_variant_expectations():
    no_placeholders = (
        GOOD.replace("[[HOSPITAL_1]]", "the ward")
        .replace("[[DOCTOR_1]]", "the team")
        .replace("[[DATE_1]]", "admission")
    )
    assert verdict(answer(no_placeholders)).reason == "missing_placeholder"
    assert verdict(answer(no_placeholders), "no_pii").accepted
    assert verdict(answer(GOOD), "no_pii").reason == "unexpected_placeholder"
    once = GOOD.replace("with [[DOCTOR_1]] on rounds", "on rounds")
    assert verdict(answer(once), "repeated_mentions").reason == "missing_repetition"
    assert verdict(answer(GOOD), "repeated_mentions").accepted


@pytest.mark.parametrize(
    ("insert", "kind"),
    [
        ("on 3/14/2019", "date"),
        ("call 617-555-0199", "phone"),
        ("email jdoe@example.org", "email"),
        ("see https://example.org/x", "url"),
        ("by Dr. Jennifer", "name"),
    ],
)
def test_identifier_like_strings_are_rejected(insert, kind):
    result = verdict(answer(GOOD.replace("on rounds", f"on rounds {insert}")))
    assert result.reason == f"identifier_like:{kind}"
    # the detail names the kind and offset, never the string itself
    assert insert.split()[-1] not in result.detail


def test_length_ratio():
    assert verdict(answer("Seen by [[DOCTOR_1]].")).reason == "length_ratio"
    assert verdict(answer(GOOD + (" Stable overnight." * 60))).reason == "length_ratio"
    assert verdict(answer("Seen by [[DOCTOR_1]]."), length_ratio=(0.0, 2.0)).accepted


def test_copied_seed_is_rejected_and_check_can_be_switched_off():
    assert verdict(answer(SEED_TEXT)).reason == "copied_seed"
    assert verdict(answer(SEED_TEXT), max_copied_ngram_share=None).accepted


def test_copied_share():
    words = " ".join(f"w{i}" for i in range(20))
    assert copied_share(words, words) == 1.0
    assert copied_share(words, "unrelated text entirely") == 0.0
    assert copied_share("too short", "too short") == 0.0
