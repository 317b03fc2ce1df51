"""The demo generator's phrase tables (``phrases.json``, package data), as typed values.

All of it was written for the demo corpus; no text comes from a real corpus.
``templates`` holds, per note style, how its sections are joined and its
sections in order. A section has plain variants (no labelled slots) and PHI
variants (at least one labelled slot); ``p`` is the chance a plain variant is
included when the section is not chosen to carry PHI. The other tables are
clinical phrases (radiology exams, pathology cases, veterinary cases per
species) and small value lists for the slots.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

PHRASES_FILE = "phrases.json"


@dataclass(frozen=True)
class Section:
    """One section of a note style: its plain and PHI-bearing template variants."""

    plain: tuple[str, ...]
    phi: tuple[str, ...] = ()
    p: float = 1.0


@dataclass(frozen=True)
class Style:
    """A note style: its sections, in order, and what joins them."""

    separator: str
    sections: tuple[Section, ...]


@dataclass(frozen=True)
class Case:
    """What one note is about (a radiology exam, a specimen, a veterinary complaint):
    phrases used as they are, and lists a phrase is drawn from, each by name."""

    phrases: Mapping[str, str]
    choices: Mapping[str, tuple[str, ...]]


@dataclass(frozen=True)
class Species:
    """The breeds of one species seen in veterinary consults, and its cases."""

    breeds: tuple[str, ...]
    cases: tuple[Case, ...]


@dataclass(frozen=True)
class Phrases:
    """Every phrase table of the generator."""

    templates: Mapping[str, Style]
    radiology_exams: tuple[Case, ...]
    pathology_cases: tuple[Case, ...]
    species: Mapping[str, Species]
    veterinary_services: tuple[str, ...]
    veterinary_sexes: tuple[str, ...]
    veterinary_life_stages: tuple[str, ...]
    icu_shifts: tuple[str, ...]
    area_codes: tuple[str, ...]


def _strings(values: Any) -> tuple[str, ...]:
    return tuple(str(value) for value in values)


def _section(data: Mapping[str, Any]) -> Section:
    return Section(_strings(data["plain"]), _strings(data.get("phi", ())), float(data.get("p", 1)))


def case_from_mapping(data: Mapping[str, Any]) -> Case:
    """A case from its JSON object: a string is a phrase, a list of strings a choice."""
    phrases = {name: value for name, value in data.items() if isinstance(value, str)}
    choices = {name: _strings(value) for name, value in data.items() if name not in phrases}
    return Case(phrases, choices)


def phrases_from_mapping(data: Mapping[str, Any]) -> Phrases:
    """The tables of a parsed ``phrases.json``."""
    return Phrases(
        templates={
            name: Style(style["separator"], tuple(_section(s) for s in style["sections"]))
            for name, style in data["templates"].items()
        },
        radiology_exams=tuple(case_from_mapping(case) for case in data["radiology_exams"]),
        pathology_cases=tuple(case_from_mapping(case) for case in data["pathology_cases"]),
        species={
            name: Species(
                _strings(entry["breeds"]), tuple(case_from_mapping(c) for c in entry["cases"])
            )
            for name, entry in data["species"].items()
        },
        veterinary_services=_strings(data["veterinary_services"]),
        veterinary_sexes=_strings(data["veterinary_sexes"]),
        veterinary_life_stages=_strings(data["veterinary_life_stages"]),
        icu_shifts=_strings(data["icu_shifts"]),
        area_codes=_strings(data["area_codes"]),
    )


@cache
def load_phrases() -> Phrases:
    """The tables shipped with the package (read once)."""
    text = resources.files("synthdeid.demo").joinpath(PHRASES_FILE).read_text(encoding="utf-8")
    return phrases_from_mapping(json.loads(text))
