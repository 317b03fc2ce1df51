"""The template validator: every rejection reason on a hand-made answer."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from synthdeid.identifiers import IdentifierScanner
from synthdeid.readers.physionet import TEXT_FILE, parse_records
from synthdeid.synthesis.validator import (
    TemplateValidator,
    copied_share,
    find_pseudo_placeholders,
    parse_answer,
)
from synthesis_helpers import SEED_TEXT, allowlist, prompt, validator

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


def test_code_fence_and_prose_around_the_object_are_tolerated():
    assert verdict("```json\n" + answer(GOOD) + "\n```").accepted
    assert verdict("Sure! " + answer(GOOD)).template == GOOD
    assert verdict("Sure! Here is the note.").reason == "invalid_json"


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
        ("[DOCTOR_1]", "pseudo_placeholder"),
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


def echo_validator() -> TemplateValidator:
    return TemplateValidator(
        allowlist(), IdentifierScanner(), instructions=prompt().instruction_texts()
    )


@pytest.mark.parametrize(
    "swap",
    [
        "[HOSPITAL_n]",
        "[PHONE_N]",
        "[DOCTOR_1]",
        "[DR_NAME]",
        "[DATE_n]",
        "[doctor_1]",
        "<DOCTOR_n>",
        "<DATE_1>",
        "{PATIENT_NAME}",
        "[NAME]",
        "[Hospital Name]",
        "[patient's name]",
        "[Doctor 1]",
        "[**Hospital 1**]",
        "[**First Name (Titles) **]",
    ],
)
def test_pseudo_placeholders_are_rejected(swap):
    result = verdict(answer(GOOD.replace("[[DOCTOR_1]]", swap, 1)))
    assert result.reason == "pseudo_placeholder"
    assert swap not in result.detail


@pytest.mark.parametrize(
    ("swap", "reason"),
    [
        ("[[DOCTOR_n]]", "malformed_placeholder"),
        ("[[PHONE_N]]", "malformed_placeholder"),
        ("[[Doctor 1]]", "malformed_placeholder"),
        ("[[DOCTOR_1]", "malformed_placeholder"),
        ("[DOCTOR_1]]", "malformed_placeholder"),
        ("[[NAME_1]]", "placeholder_not_allowlisted"),
        ("[[HOSPITAL_NAME_1]]", "malformed_placeholder"),
    ],
)
def test_double_bracket_tokens_must_be_allowlisted_placeholders(swap, reason):
    assert verdict(answer(GOOD.replace("[[DOCTOR_1]]", swap, 1))).reason == reason


@pytest.mark.parametrize(
    "text",
    [
        "Checklist: [x] lines checked, [ ] foley removed, see note [1].",
        "Keep SBP <140 and HR >60 overnight {per protocol}.",
        "Labs [see below] and the plan [unchanged] were reviewed.",
        "Seen by [[DOCTOR_1]] and [[DOCTOR_2]] on [[DATE_1]].",
    ],
)
def test_ordinary_brackets_are_not_pseudo_placeholders(text):
    assert find_pseudo_placeholders(text, allowlist().names) == []


@pytest.mark.parametrize(
    "echo",
    [
        "You write synthetic clinical notes used to train de-identification software.",
        'Reply with exactly this JSON object and nothing else: {"note": "<the new note>"}',
        "Write a new, different note of the same kind (same clinical setting and style).",
        "Do not copy sentences from the note above.",
        "The note must contain no identifiers and no placeholders at all.",
    ],
)
def test_an_answer_echoing_the_prompt_is_rejected(echo):
    result = echo_validator().validate_answer(
        answer(f"{GOOD} {echo}"), prompt().variant("standard"), SEED_TEXT
    )
    assert result.reason == "prompt_echo"
    # without the prompt's text the same answer passes: the echo is the only fault
    assert verdict(answer(f"{GOOD} {echo}")).accepted


def test_genuine_templates_and_seed_wording_are_not_echoes():
    standard = prompt().variant("standard")
    assert echo_validator().validate_answer(answer(GOOD), standard, SEED_TEXT).accepted
    # an n-gram the prompt shares with the seed is the seed's wording, not an echo
    shared = "Do not copy sentences from the note above."
    seed = f"{SEED_TEXT} {shared}"
    result = echo_validator().validate_answer(answer(f"{GOOD} {shared}"), standard, seed)
    assert result.accepted


def test_prompt_instruction_texts_hold_no_note():
    texts = prompt().instruction_texts()
    assert any("JSON" in text for text in texts)
    assert all("$" not in text for text in texts)
    assert all(SEED_TEXT[:20] not in text for text in texts)


def test_real_notes_are_neither_echoes_nor_pseudo_placeholders():
    corpus = os.environ.get("PHYSIONET_DEID_DIR")
    if not corpus:
        pytest.skip("PHYSIONET_DEID_DIR is not set: the real-note check needs the corpus")
    path = Path(corpus) / TEXT_FILE
    notes = list(parse_records(path.read_text(encoding="utf-8"), path=path).values())
    checker = echo_validator()
    echoes = sum(checker.check_echo(note, "") is not None for note in notes)
    pseudo = sum(bool(find_pseudo_placeholders(note, allowlist().names)) for note in notes)
    assert len(notes) > 1000
    assert (echoes, pseudo) == (0, 0)


def test_a_placeholder_inside_a_word_is_rejected() -> None:
    from synthdeid.identifiers import IdentifierScanner
    from synthdeid.synthesis.placeholders import load_allowlist
    from synthdeid.synthesis.prompts import seed_variant
    from synthdeid.synthesis.validator import TemplateValidator

    allowlist = load_allowlist("resources/placeholders.yaml")
    validator = TemplateValidator(allowlist, IdentifierScanner())
    variant = seed_variant(allowlist)
    glued = validator.check_placeholders("It may be misdiagno[[DOCTOR_1]]s.", variant)
    assert glued is not None and glued.reason == "placeholder_in_word"
    for fine in ("Seen by Dr.[[DOCTOR_1]] today.", "On [[DATE_1]]th.", "[[DATE_1]]"):
        assert validator.check_placeholders(fine, variant) is None, fine
