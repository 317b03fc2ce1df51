"""A setting's default may be written twice, in the config schema (what a run gets when
the config leaves it out) and in its settings dataclass (what a CLI call gets); here both
must agree, value by value, for every section that has a dataclass. Sections whose
defaults live in the dataclass only (``ner.training``, ``synth.dplm.lora``) have
nothing to compare."""

from __future__ import annotations

import dataclasses
import importlib
from pathlib import Path
from typing import Any

import pytest
import yaml

SCHEMA = Path(__file__).resolve().parents[1] / "workflow" / "schemas" / "config.schema.yaml"

# config section -> the dataclass that settings_from_mapping fills from it
SECTIONS: dict[str, str] = {
    "synth.dplm.scratch": "synthdeid.dplm.model:ScratchConfig",
    "synth.dplm.sampling": "synthdeid.dplm.sampling:SamplingConfig",
    "synth.dplm.privacy": "synthdeid.dplm.privacy:PrivacyConfig",
    "synth.dplm.training": "synthdeid.dplm.training:LmTrainingConfig",
    "synth.dplm.lora": "synthdeid.dplm.adapters:LoraSettings",
    "synth.dplm.tapt": "synthdeid.ner.tapt:TaptConfig",
    "ner.tapt": "synthdeid.ner.tapt:TaptConfig",
    "ner.training": "synthdeid.ner.training:TrainingConfig",
    "synth.tabular.evaluation": "synthdeid.tabular.comparison:EvaluationSettings",
}


def schema() -> dict[str, Any]:
    return yaml.safe_load(SCHEMA.read_text(encoding="utf-8"))


def resolve(node: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    """A schema node with its ``$ref`` followed (its own keys win)."""
    while "$ref" in node:
        target = root
        for part in node["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    return node


def section(root: dict[str, Any], path: str) -> dict[str, Any] | None:
    """The schema object at a dotted config path; None where the schema has none."""
    node = resolve(root, root)
    for key in path.split("."):
        properties = node.get("properties", {})
        if key not in properties:
            return None
        node = resolve(properties[key], root)
    return node


def dataclass_of(name: str) -> type:
    module, _, attribute = name.partition(":")
    cls = getattr(importlib.import_module(module), attribute)
    assert dataclasses.is_dataclass(cls), name
    return cls


def field_default(field: dataclasses.Field[Any]) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return dataclasses.MISSING


def as_plain(value: Any) -> Any:
    """Tuples as lists (YAML has no tuples); everything else as it is."""
    if isinstance(value, tuple):
        return [as_plain(v) for v in value]
    return value


@pytest.mark.parametrize("path", sorted(SECTIONS))
def test_schema_and_dataclass_defaults_agree(path: str) -> None:
    root = schema()
    node = section(root, path)
    if node is None:
        pytest.skip(f"{path}: not a section of the schema")
    cls = dataclass_of(SECTIONS[path])
    differ = []
    for field in dataclasses.fields(cls):
        prop = node.get("properties", {}).get(field.name)
        default = field_default(field)
        if prop is None or default is dataclasses.MISSING:
            continue
        prop = resolve(prop, root)
        if "default" not in prop:
            continue
        if as_plain(default) != prop["default"]:
            differ.append(f"{field.name}: schema {prop['default']!r}, dataclass {default!r}")
    assert not differ, f"{path} ({cls.__name__}) defaults differ:\n" + "\n".join(differ)


def test_the_sections_compare_many_values() -> None:
    root = schema()
    total = 0
    for path, name in SECTIONS.items():
        node = section(root, path)
        if node is None:
            continue
        fields = {f.name for f in dataclasses.fields(dataclass_of(name))}
        total += sum(
            1
            for key, prop in node.get("properties", {}).items()
            if key in fields and "default" in resolve(prop, root)
        )
    assert total >= 38
