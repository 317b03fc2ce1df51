"""Versioned prompt files: the tabular report writer and judge, the teacher's extraction prompt.

A prompt file is YAML with ``name``, ``version``, ``system`` and ``user``; the
user template's fields are checked when the file is read (a missing or stray
field is an error naming the file), and a hash of the bytes goes into the
provenance of whatever the prompt produced.
"""

from __future__ import annotations

import hashlib
import string
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from synthdeid.errors import ConfigError

FORMAT = "format"  # str.format: {field}, literal braces doubled
TEMPLATE = "template"  # string.Template: $field


@dataclass(frozen=True)
class PromptFile:
    """A checked prompt file: its identity and its two messages."""

    name: str
    version: str
    fingerprint: str
    system: str
    user: str

    def provenance(self) -> dict[str, str]:
        return {"name": self.name, "version": self.version, "sha256": self.fingerprint}


def template_fields(user: str, style: str) -> set[str]:
    """The fields a user template uses, in ``style`` (:data:`FORMAT` or :data:`TEMPLATE`)."""
    if style == FORMAT:
        return {field for _, field, _, _ in string.Formatter().parse(user) if field is not None}
    return {
        m.group("named") or m.group("braced")
        for m in string.Template.pattern.finditer(user)
        if m.group("named") or m.group("braced")
    }


def load_prompt_file(path: str | Path, fields: set[str], style: str) -> PromptFile:
    """Read ``path`` and check that its user template uses exactly ``fields``."""
    path = Path(path)
    try:
        raw = path.read_bytes()
        data = yaml.safe_load(raw)
    except FileNotFoundError:
        raise ConfigError(f"prompt file {path} not found") from None
    except (OSError, yaml.YAMLError) as error:
        raise ConfigError(f"cannot read prompt {path}: {error}") from None
    required = ("version", "system", "user")
    if not isinstance(data, Mapping) or not all(isinstance(data.get(k), str) for k in required):
        raise ConfigError(f"{path}: a prompt needs the string keys {list(required)}")
    try:
        found = template_fields(data["user"], style)
    except ValueError as error:
        raise ConfigError(f"{path}: user is not a valid template: {error}") from None
    if found != fields:
        marks = {FORMAT: "{%s}", TEMPLATE: "$%s"}[style]
        raise ConfigError(
            f"{path}: the user template must use exactly {sorted(marks % f for f in fields)}, "
            f"found {sorted(marks % f for f in found)}"
            + (" (write literal braces as {{ and }})" if style == FORMAT else ""),
        )
    return PromptFile(
        name=str(data.get("name", path.stem)),
        version=str(data["version"]),
        fingerprint=hashlib.sha256(raw).hexdigest(),
        system=data["system"],
        user=data["user"],
    )
