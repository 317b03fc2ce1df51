"""Parsing an LLM teacher's extraction answer: tolerance, type mapping, malformed items."""

from __future__ import annotations

import json

import pytest

from synthdeid.errors import ConfigError
from synthdeid.teacher.extraction import (
    DEFAULT_TYPES,
    Extracted,
    ExtractionError,
    check_types,
    parse_extraction,
)
from synthdeid.teacher.silver import COUNT_FIELDS


def counts(entities: int = 0, unknown_type: int = 0, malformed: int = 0) -> dict[str, int]:
    return {"entities": entities, "unknown_type": unknown_type, "malformed": malformed}


def test_plain_answer_in_order_with_confidences() -> None:
    answer = json.dumps(
        {
            "DATE": [{"text": "3/14", "confidence": 0.95}],
            "PATIENT": [{"text": "John Smith", "confidence": 0.9}, {"text": "Smith"}],
        }
    )
    entities, found = parse_extraction(answer, DEFAULT_TYPES)
    assert entities == [
        Extracted("DATE", "3/14", 0.95),
        Extracted("PATIENT", "John Smith", 0.9),
        Extracted("PATIENT", "Smith", None),
    ]
    assert found == counts(entities=3)
    assert set(found) <= set(COUNT_FIELDS)


def test_empty_object_means_no_phi() -> None:
    assert parse_extraction("{}", DEFAULT_TYPES) == ([], counts())
    assert parse_extraction('  {"DATE": []}\n', DEFAULT_TYPES) == ([], counts())


@pytest.mark.parametrize(
    "answer",
    [
        '```json\n{"AGE": [{"text": "84", "confidence": 1}]}\n```',
        '```\n{"AGE": [{"text": "84", "confidence": 1}]}\n```',
        '  ```JSON\n{"AGE": [{"text": "84", "confidence": 1}]}```  \n',
        'Here is the JSON:\n```json\n{"AGE": [{"text": "84", "confidence": 1}]}\n```\nDone.',
        'Sure! The entities are {"AGE": [{"text": "84", "confidence": 1}]} as requested.',
    ],
)
def test_fences_and_prose_are_tolerated(answer: str) -> None:
    entities, found = parse_extraction(answer, DEFAULT_TYPES)
    assert entities == [Extracted("AGE", "84", 1.0)]
    assert found == counts(entities=1)


def test_braces_in_prose_after_the_object_defeat_the_fallback() -> None:
    answer = 'Result:\n{"AGE": ["84"]}\nHope that helps {:}'
    with pytest.raises(ExtractionError):
        parse_extraction(answer, DEFAULT_TYPES)


@pytest.mark.parametrize(
    "answer",
    [
        "",
        "   ",
        "no entities here",
        '{"DATE": [{"text": "3/14"}',
        "{'DATE': []}",
        "```json\n{oops}\n```",
    ],
)
def test_invalid_json_raises(answer: str) -> None:
    with pytest.raises(ExtractionError) as info:
        parse_extraction(answer, DEFAULT_TYPES)
    assert info.value.kind == "invalid_json"


@pytest.mark.parametrize("answer", ['[{"DATE": "3/14"}]', '"John Smith"', "42", "null"])
def test_top_level_must_be_an_object(answer: str) -> None:
    with pytest.raises(ExtractionError) as info:
        parse_extraction(answer, DEFAULT_TYPES)
    assert info.value.kind == "invalid_json"
    assert "not an object" in str(info.value)


def test_error_message_does_not_quote_the_answer() -> None:
    secret = "Jonathan Q. Privatename"
    for answer in (f'{{"PATIENT": [{{"text": "{secret}"', f'["{secret}"]'):
        with pytest.raises(ExtractionError) as info:
            parse_extraction(answer, DEFAULT_TYPES)
        assert "Privatename" not in str(info.value)


def test_type_keys_are_normalised_and_web_maps_to_other() -> None:
    answer = json.dumps(
        {" date ": ["3/14"], "web": [{"text": "www.example.org"}], "Doctor": ["Dr. Lee"]}
    )
    entities, found = parse_extraction(answer, DEFAULT_TYPES)
    assert entities == [
        Extracted("DATE", "3/14", None),
        Extracted("OTHER", "www.example.org", None),
        Extracted("DOCTOR", "Dr. Lee", None),
    ]
    assert found == counts(entities=3)


def test_unknown_type_counts_each_item() -> None:
    answer = json.dumps(
        {
            "SSN": [{"text": "123-45-6789"}, "987-65-4321", {"text": 5}],
            "PROFESSION": "nurse",
            "DATE": ["3/14"],
        }
    )
    entities, found = parse_extraction(answer, DEFAULT_TYPES)
    assert entities == [Extracted("DATE", "3/14", None)]
    assert found == counts(entities=5, unknown_type=4)


def test_type_mapped_to_none_is_dropped_as_unknown() -> None:
    types = {**DEFAULT_TYPES, "AGE": None}
    answer = json.dumps({"AGE": [{"text": "45"}, {"text": "90"}], "PHONE": {"text": "555-1234"}})
    entities, found = parse_extraction(answer, types)
    assert entities == [Extracted("PHONE", "555-1234", None)]
    assert found == counts(entities=3, unknown_type=2)


def test_single_object_value_is_a_one_item_list() -> None:
    entities, found = parse_extraction(
        '{"ID": {"text": "MRN 0042", "confidence": 0.5}}', DEFAULT_TYPES
    )
    assert entities == [Extracted("ID", "MRN 0042", 0.5)]
    assert found == counts(entities=1)


@pytest.mark.parametrize("value", ['"3/14"', "3", "null", "true"])
def test_non_list_value_is_one_malformed(value: str) -> None:
    entities, found = parse_extraction(f'{{"DATE": {value}, "AGE": ["45"]}}', DEFAULT_TYPES)
    assert entities == [Extracted("AGE", "45", None)]
    assert found == counts(entities=2, malformed=1)


@pytest.mark.parametrize(
    "item",
    [
        {"text": 42},
        {"text": None},
        {"text": ""},
        {"text": "   "},
        {"confidence": 0.9},
        {"text": "3/14", "confidence": "high"},
        {"text": "3/14", "confidence": 1.5},
        {"text": "3/14", "confidence": -0.1},
        {"text": "3/14", "confidence": True},
        {"text": "3/14", "confidence": "NaN"},
        {"text": "3/14", "confidence": "1.01"},
        {"text": "3/14", "confidence": [0.9]},
        {"text": ["3/14"]},
        42,
        None,
        "",
        "  ",
        ["3/14"],
    ],
)
def test_malformed_items_are_dropped_and_counted(item: object) -> None:
    answer = json.dumps({"DATE": [item, {"text": "4/1", "confidence": 0.7}]})
    entities, found = parse_extraction(answer, DEFAULT_TYPES)
    assert entities == [Extracted("DATE", "4/1", 0.7)]
    assert found == counts(entities=2, malformed=1)


def test_huge_integer_confidence_is_malformed() -> None:
    answer = '{"DATE": [{"text": "3/14", "confidence": 1' + "0" * 400 + "}]}"
    assert parse_extraction(answer, DEFAULT_TYPES) == ([], counts(entities=1, malformed=1))


def test_json_nan_confidence_is_malformed() -> None:
    # json.loads accepts the non-standard NaN literal; it is not a confidence
    entities, found = parse_extraction(
        '{"DATE": [{"text": "3/14", "confidence": NaN}]}', DEFAULT_TYPES
    )
    assert entities == []
    assert found == counts(entities=1, malformed=1)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("0.8", 0.8), (" 1 ", 1.0), ("0", 0.0), (0, 0.0), (1, 1.0), (0.25, 0.25), (None, None)],
)
def test_usable_confidences(raw: object, expected: float | None) -> None:
    answer = json.dumps({"PATIENT": [{"text": "  John Smith ", "confidence": raw}]})
    entities, found = parse_extraction(answer, DEFAULT_TYPES)
    assert entities == [Extracted("PATIENT", "John Smith", expected)]
    assert found == counts(entities=1)


def test_unicode_text_survives() -> None:
    entities, _ = parse_extraction('{"PATIENT": ["Zoë Müller", "\\u00c9mile"]}', DEFAULT_TYPES)
    assert [e.text for e in entities] == ["Zoë Müller", "Émile"]


def test_parse_checks_the_type_map() -> None:
    with pytest.raises(ConfigError, match="SECRET"):
        parse_extraction("{}", {"SECRET": "SSN"})


def test_check_types_normalises_keys() -> None:
    assert check_types({" web ": "OTHER", "Ssn": None}) == {"WEB": "OTHER", "SSN": None}
    assert check_types(DEFAULT_TYPES) == DEFAULT_TYPES


def test_check_types_rejects_non_canonical_labels() -> None:
    with pytest.raises(ConfigError, match="'EMAIL'"):
        check_types({"PATIENT": "PATIENT", "EMAIL": "WEB"})


@pytest.mark.parametrize(
    ("types", "key"),
    [
        ({"": "DATE"}, "''"),
        ({"   ": "DATE"}, "'   '"),
        ({"date": "DATE", "DATE ": None}, "'DATE '"),
    ],
)
def test_check_types_rejects_bad_keys(types: dict[str, str | None], key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        check_types(types)
