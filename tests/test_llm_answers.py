"""The shared JSON answer parser: what it reads, and what its errors reveal."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from synthdeid.llm import answers
from synthdeid.llm.answers import INVALID_JSON, NOT_AN_OBJECT, AnswerError, parse_json_object

OBJECT = {"note": "Seen by [[DOCTOR_1]].", "items": [1, 2]}
TEXT = json.dumps(OBJECT)


@pytest.mark.parametrize(
    "answer",
    [
        TEXT,
        f"  \n{TEXT}\n\t",
        f"```json\n{TEXT}\n```",
        f"```\n{TEXT}\n```",
        f"  ```JSON\n{TEXT}```  \n",
        f"```jsonc\n{TEXT}\n```",
    ],
)
def test_a_bare_or_wholly_fenced_object_is_read(answer: str) -> None:
    assert parse_json_object(answer) == OBJECT


def test_a_fence_inside_prose_is_read() -> None:
    answer = f"Here is the JSON you asked for:\n```json\n{TEXT}\n```\nLet me know."
    assert parse_json_object(answer) == OBJECT


def test_prose_around_an_object_is_dropped() -> None:
    assert parse_json_object(f"Sure! {TEXT} Hope this helps.") == OBJECT
    # the body is the fence's content, but the object is only found in the whole answer
    assert parse_json_object(f"```\nnothing here\n``` then {TEXT}") == OBJECT


def test_raw_newlines_and_tabs_inside_strings_are_accepted() -> None:
    answer = '{"note": "Line one.\nLine two.\tIndented."}'
    assert parse_json_object(answer) == {"note": "Line one.\nLine two.\tIndented."}


@pytest.mark.parametrize(
    ("answer", "kind"),
    [
        ('["a", "list"]', "array"),
        ('```json\n[{"note": "x"}]\n```', "array"),
        ('"just a string"', "string"),
        ("42", "number"),
        ("true", "boolean"),
        ("null", "null"),
    ],
)
def test_a_value_that_is_not_an_object_is_rejected(answer: str, kind: str) -> None:
    with pytest.raises(AnswerError) as info:
        parse_json_object(answer)
    assert info.value.reason == NOT_AN_OBJECT
    assert info.value.detail == f"the answer is a JSON {kind}, not an object"


def test_garbage_reports_the_first_error_position_without_the_answer_text() -> None:
    secret = "Jonathan Privatename"
    answer = f'{{"note": "{secret} was seen",\n  "extra": }}'
    with pytest.raises(AnswerError) as info:
        parse_json_object(answer)
    error = info.value
    assert error.reason == INVALID_JSON
    assert error.detail == "line 2 column 12: Expecting value"
    assert str(error) == f"{INVALID_JSON}: {error.detail}"
    assert "Privatename" not in str(error) and "Privatename" not in error.detail


def test_prose_without_an_object_is_invalid_json() -> None:
    with pytest.raises(AnswerError) as info:
        parse_json_object("I cannot help with that.")
    assert info.value.reason == INVALID_JSON
    assert info.value.detail.startswith("line 1 column 1: ")


def test_braces_in_prose_after_the_object_defeat_the_fallback() -> None:
    with pytest.raises(AnswerError) as info:
        parse_json_object('Result:\n{"a": 1}\nHope that helps {:}')
    assert info.value.reason == INVALID_JSON


@pytest.mark.parametrize("answer", ["", "   \n ", "``````"])
def test_an_empty_answer_is_invalid_json(answer: str) -> None:
    with pytest.raises(AnswerError) as info:
        parse_json_object(answer)
    assert info.value.reason == INVALID_JSON
    assert info.value.detail == "line 1 column 1: Expecting value"


def test_deep_nesting_is_invalid_json_not_a_crash() -> None:
    with pytest.raises(AnswerError) as info:
        parse_json_object("[" * 100_000 + "]" * 100_000)
    assert info.value.reason == INVALID_JSON
    assert info.value.detail == "the JSON is nested too deeply"


def test_the_module_imports_only_the_standard_library() -> None:
    # loaded from its file in a fresh interpreter, so synthdeid/llm/__init__.py does not run
    code = (
        "import importlib.util, sys\n"
        "before = set(sys.modules)\n"
        "spec = importlib.util.spec_from_file_location('answers', sys.argv[1])\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(module)\n"
        "new = {name.split('.')[0] for name in set(sys.modules) - before} - {'answers'}\n"
        "print(sorted(new - set(sys.stdlib_module_names)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, answers.__file__], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"
