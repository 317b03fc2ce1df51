"""The placeholder allowlist (resources/placeholders.yaml) and placeholder parsing.

Templates carry typed, numbered placeholders written ``[[DOCTOR_1]]``, the form
``mask_seeds`` writes. Only names on the allowlist may appear; each maps to a
canonical label (the label of the span the local fill records) and to the name
of the generator that draws its value.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from synthdeid.errors import ConfigError, InputError
from synthdeid.labels import CANONICAL_LABELS
from synthdeid.mask import PLACEHOLDER_RE

# anything that looks like an attempt at a placeholder: [[...]], [NAME_1], {{NAME}}, <NAME_1>
PLACEHOLDER_LIKE_RE = re.compile(
    r"\[\[[^\[\]]*\]\]|\{\{[^{}]*\}\}|\[[A-Z][A-Z0-9]*(?:_\d+)?\]|<[A-Z][A-Z0-9]*_\d+>"
)


@dataclass(frozen=True)
class PlaceholderRule:
    """One allowlisted placeholder name."""

    name: str
    label: str
    generator: str


@dataclass(frozen=True)
class PlaceholderAllowlist:
    """The allowlist, with its version and a content fingerprint for provenance."""

    rules: Mapping[str, PlaceholderRule]
    version: str
    fingerprint: str

    def __contains__(self, name: object) -> bool:
        return name in self.rules

    def label_of(self, name: str) -> str:
        return self.rules[name].label

    def generator_of(self, name: str) -> str:
        return self.rules[name].generator

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.rules)


@dataclass(frozen=True)
class PlaceholderMatch:
    """A ``[[NAME_n]]`` occurrence in a template."""

    start: int
    end: int
    name: str
    number: int

    @property
    def token(self) -> str:
        return f"[[{self.name}_{self.number}]]"


def iter_placeholders(template: str) -> Iterator[PlaceholderMatch]:
    """Well-formed ``[[NAME_n]]`` occurrences, left to right (allowlisted or not)."""
    for match in PLACEHOLDER_RE.finditer(template):
        yield PlaceholderMatch(match.start(), match.end(), match.group(1), int(match.group(2)))


def parse_allowlist(mapping: Mapping[str, object], source: str) -> PlaceholderAllowlist:
    """Check and build an allowlist from its YAML mapping (``source`` names it in errors)."""
    entries = mapping.get("placeholders") if isinstance(mapping, Mapping) else None
    if not isinstance(entries, Mapping) or not entries:
        raise InputError(source, None, "expected a non-empty 'placeholders' mapping")
    rules: dict[str, PlaceholderRule] = {}
    for name, entry in entries.items():
        record = f"placeholder {name!r}"
        if not isinstance(name, str) or not re.fullmatch(r"[A-Z][A-Z0-9]*", name):
            raise InputError(source, record, "names are upper-case letters and digits")
        if not isinstance(entry, Mapping) or set(entry) != {"label", "generator"}:
            raise InputError(source, record, "expected exactly the keys 'label' and 'generator'")
        if entry["label"] not in CANONICAL_LABELS:
            raise InputError(
                source, record, f"label {entry['label']!r} is not one of {CANONICAL_LABELS}"
            )
        rules[name] = PlaceholderRule(name, str(entry["label"]), str(entry["generator"]))
    canonical = yaml.safe_dump(
        {"version": mapping.get("version"), "placeholders": {k: vars(v) for k, v in rules.items()}},
        sort_keys=True,
    )
    fingerprint = hashlib.sha256(canonical.encode()).hexdigest()[:16]
    return PlaceholderAllowlist(rules, str(mapping.get("version", "")), fingerprint)


def load_allowlist(path: str | Path) -> PlaceholderAllowlist:
    """Read resources/placeholders.yaml (or another allowlist file)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"placeholder allowlist {path} does not exist")
    try:
        mapping = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise InputError(path, None, f"not valid YAML: {exc}") from exc
    return parse_allowlist(mapping, str(path))
