"""Reading an LLM teacher's extraction answer into typed entities.

The extraction prompt (SHIELD, appendix D) asks the model for one JSON
object mapping entity types to lists of items, for example
``{"DATE": [{"text": "3/14", "confidence": 0.95}], "PATIENT": [...]}``.
:func:`parse_extraction` reads such an answer tolerantly and returns the
usable entities (:class:`Extracted`, label already mapped to a canonical
label) with counters named as in :data:`~synthdeid.teacher.silver.COUNT_FIELDS`.

Parsing the answer
    :func:`synthdeid.llm.answers.parse_json_object` reads the answer (a code
    fence, an inner fence or prose around the object are tolerated, raw
    newlines inside strings accepted). When it fails, or the top level is not
    a JSON object, an :class:`ExtractionError` (``kind`` ``invalid_json``) is
    raised; its message never quotes the answer, which may hold note text.
    An empty object ``{}`` means the note holds no PHI.

Per type (key stripped and upper-cased)
    * the value must be a list of items; a single object counts as a
      one-item list; any other value (number, string, null) is one
      ``malformed`` entity and is skipped;
    * a type absent from the type map, or mapped to ``None`` (not PHI for
      this corpus), drops all its items as ``unknown_type`` (a non-list
      value counts once); this check comes before the item checks.

Per item
    * an object with a ``"text"`` string that is non-empty after stripping,
      and an optional ``"confidence"``; or a bare non-empty string (text with
      no confidence); anything else is ``malformed``;
    * confidence: an int or float (not a bool) in [0, 1], or a string that
      parses as such a float; missing or null -> ``None``; anything else
      (out of range, NaN, a bool, unparsable) makes the item ``malformed``.

``entities`` counts every item seen under every key, dropped ones included
(a non-list value counts as one). The returned counters always hold
``entities``, ``unknown_type`` and ``malformed``, zeros included.

The type map (:data:`DEFAULT_TYPES`, checked by :func:`check_types`) maps the
prompt's types onto canonical labels; ``WEB`` has no canonical label of its
own and becomes ``OTHER``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from synthdeid.errors import ConfigError
from synthdeid.labels import CANONICAL_LABELS
from synthdeid.llm.answers import AnswerError, parse_json_object
from synthdeid.teacher.silver import COUNT_FIELDS

INVALID_JSON = "invalid_json"
EXTRACTION_COUNTS: tuple[str, ...] = ("entities", "unknown_type", "malformed")
assert set(EXTRACTION_COUNTS) <= set(COUNT_FIELDS)

DEFAULT_TYPES: dict[str, str | None] = {
    "PATIENT": "PATIENT",
    "DOCTOR": "DOCTOR",
    "HOSPITAL": "HOSPITAL",
    "LOCATION": "LOCATION",
    "DATE": "DATE",
    "ID": "ID",
    "AGE": "AGE",
    "PHONE": "PHONE",
    "WEB": "OTHER",
    "OTHER": "OTHER",
}


@dataclass(frozen=True)
class Extracted:
    """One entity from the teacher's answer: canonical label, stripped text, confidence."""

    label: str
    text: str
    confidence: float | None


class ExtractionError(ValueError):
    """The answer is not a readable JSON object; the message never quotes the answer."""

    def __init__(self, problem: str, kind: str = INVALID_JSON) -> None:
        self.kind = kind
        self.problem = problem
        super().__init__(f"{kind}: {problem}")


def check_types(types: Mapping[str, str | None]) -> dict[str, str | None]:
    """The type map with keys stripped and upper-cased, each value checked.

    A value must be a canonical label or ``None``; an empty key, a non-string
    key, or two keys that become the same after normalising are errors.
    """
    checked: dict[str, str | None] = {}
    for key, value in types.items():
        if not isinstance(key, str) or not key.strip():
            raise ConfigError(f"teacher type map: key {key!r} must be a non-empty string")
        name = key.strip().upper()
        if name in checked:
            raise ConfigError(f"teacher type map: key {key!r} repeats type {name!r}")
        if value is not None and value not in CANONICAL_LABELS:
            raise ConfigError(
                f"teacher type map: {key!r} maps to {value!r}, which is not a canonical "
                f"label ({', '.join(CANONICAL_LABELS)}) or null"
            )
        checked[name] = value
    return checked


def _answer_object(answer: str) -> dict[str, Any]:
    """The answer's JSON object; any failure is an ``invalid_json`` :class:`ExtractionError`."""
    try:
        return parse_json_object(answer)
    except AnswerError as exc:
        raise ExtractionError(exc.detail) from exc


def _confidence(raw: Any) -> tuple[bool, float | None]:
    """(usable, value): ``None`` is a usable missing confidence."""
    if raw is None:
        return True, None
    if isinstance(raw, bool):
        return False, None
    if isinstance(raw, int | float):
        try:
            value = float(raw)
        except OverflowError:  # an int too large for a float
            return False, None
    elif isinstance(raw, str):
        try:
            value = float(raw.strip())
        except ValueError:
            return False, None
    else:
        return False, None
    if math.isnan(value) or not 0.0 <= value <= 1.0:
        return False, None
    return True, value


def _item(raw: Any, label: str) -> Extracted | None:
    """The entity of one item, or None when it is malformed."""
    if isinstance(raw, str):
        stripped = raw.strip()
        return Extracted(label, stripped, None) if stripped else None
    if not isinstance(raw, dict):
        return None
    text = raw.get("text")
    if not isinstance(text, str) or not text.strip():
        return None
    usable, confidence = _confidence(raw.get("confidence"))
    if not usable:
        return None
    return Extracted(label, text.strip(), confidence)


def parse_extraction(
    answer: str, types: Mapping[str, str | None]
) -> tuple[list[Extracted], dict[str, int]]:
    """Entities of the teacher's answer, in answer order, and the module's counters."""
    type_map = check_types(types)
    counts = dict.fromkeys(EXTRACTION_COUNTS, 0)
    entities: list[Extracted] = []
    for key, value in _answer_object(answer).items():
        if isinstance(value, list):
            items = value
        elif isinstance(value, dict):
            items = [value]
        else:
            items = None
        seen = 1 if items is None else len(items)
        counts["entities"] += seen
        label = type_map.get(key.strip().upper())
        if label is None:
            counts["unknown_type"] += seen
            continue
        if items is None:
            counts["malformed"] += 1
            continue
        for raw in items:
            entity = _item(raw, label)
            if entity is None:
                counts["malformed"] += 1
            else:
                entities.append(entity)
    return entities, counts
