"""Reading a language model's answer as one JSON object, the same way for every LLM step.

Template synthesis, the teacher's extraction and the tabular judge all ask a
model for a JSON object, and models wrap it in different ways. One policy,
kept here, decides what is read:

1. Surrounding whitespace is stripped.
2. The *body* is the content of a Markdown code fence that is the whole
   answer (```` ```json ... ``` ```` or ```` ``` ... ``` ````, any language tag,
   any case); else the content of the first fence inside the answer (prose
   before and after it, the tag ``json`` or none); else the answer itself.
3. Candidates are tried in order with ``json.loads(..., strict=False)``: the
   body; the substring from its first ``{`` to its last ``}`` (prose around the
   object); the same substring of the whole answer. ``strict=False`` accepts
   raw newlines and tabs inside strings, which small models and llama.cpp's
   schema mode write.
4. The first candidate that parses decides: a JSON object is returned; any
   other value (a list, a string, a number, ``null``) is ``not_an_object``.
   When none parses, the error of the first candidate is reported as
   ``invalid_json``.

Errors are :class:`AnswerError` with a fixed ``reason`` and a ``detail`` that
holds only positions and the JSON parser's own message, or the JSON type
found, never text of the answer, which may hold note text (PHI).

This module imports only the standard library, so parsers can use it without
pulling in the backends of :mod:`synthdeid.llm`.
"""

from __future__ import annotations

import json
import re
from typing import Any

INVALID_JSON = "invalid_json"
NOT_AN_OBJECT = "not_an_object"

# the whole (stripped) answer as one fence: ```json\n...\n```, the tag optional
_WHOLE_FENCE_RE = re.compile(r"\A```[A-Za-z0-9_-]*[ \t]*\n?(.*?)\n?[ \t]*```\Z", re.DOTALL)
# a fence somewhere inside prose
_INNER_FENCE_RE = re.compile(r"```(?:json)?[ \t]*\n?(.*?)\n?```", re.DOTALL | re.IGNORECASE)

_JSON_TYPES: dict[type, str] = {
    list: "array",
    str: "string",
    bool: "boolean",
    int: "number",
    float: "number",
    type(None): "null",
}


class AnswerError(ValueError):
    """An answer that is not a JSON object; ``detail`` never quotes the answer."""

    def __init__(self, reason: str, detail: str) -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(f"{reason}: {detail}")


def _unfenced(answer: str) -> str:
    """The stripped answer without its code fence (step 2 of the module's policy)."""
    body = answer.strip()
    whole = _WHOLE_FENCE_RE.match(body)
    if whole:
        return whole.group(1).strip()
    inner = _INNER_FENCE_RE.search(body)
    if inner:
        return inner.group(1).strip()
    return body


def _candidates(answer: str) -> list[str]:
    """Texts to try as JSON, in order: the body, then its and the answer's ``{...}``."""
    body = _unfenced(answer)
    found = [body]
    for text in (body, answer):
        first, last = text.find("{"), text.rfind("}")
        if 0 <= first < last and text[first : last + 1] not in found:
            found.append(text[first : last + 1])
    return found


def _error_detail(exc: ValueError | RecursionError) -> str:
    """Where and why the JSON parser stopped, without the text it read."""
    if isinstance(exc, json.JSONDecodeError):
        return f"line {exc.lineno} column {exc.colno}: {exc.msg}"
    if isinstance(exc, RecursionError):
        return "the JSON is nested too deeply"
    # e.g. an integer longer than Python's digit limit; its message holds no answer text,
    # but only the type is reported to keep the rule simple
    return f"{type(exc).__name__} while reading the JSON"


def parse_json_object(answer: str) -> dict[str, Any]:
    """The JSON object of a model's answer, read by the module's policy.

    Raises :class:`AnswerError` (``invalid_json`` or ``not_an_object``).
    """
    first_error: ValueError | RecursionError | None = None
    for candidate in _candidates(answer):
        try:
            value = json.loads(candidate, strict=False)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
            first_error = first_error or exc
            continue
        if not isinstance(value, dict):
            kind = _JSON_TYPES.get(type(value), type(value).__name__)
            raise AnswerError(NOT_AN_OBJECT, f"the answer is a JSON {kind}, not an object")
        return value
    assert first_error is not None  # there is always at least one candidate
    raise AnswerError(INVALID_JSON, _error_detail(first_error))
