"""What rules hand the CLI: config values as JSON, repeated NAME=VALUE flags, output folders
and the folders beside them."""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from synthdeid.labels import CANONICAL_LABELS


def as_json(value: Any) -> str:
    """A config value as compact JSON, for passing dicts through params to the CLI."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def label_map_json(mapping: Mapping[str, str] | None) -> str:
    """A corpus's label mapping as JSON; an empty one maps every canonical label to itself."""
    return as_json(mapping or {label: label for label in CANONICAL_LABELS})


def flags(flag: str, pairs: Iterable[tuple[str, str]]) -> str:
    """``flag NAME=VALUE`` for each pair, each NAME=VALUE shell-quoted as one word."""
    return " ".join(f"{flag} {shlex.quote(f'{name}={value}')}" for name, value in pairs)


def joined(*arguments: str) -> str:
    """Argument strings joined by spaces, the empty ones left out."""
    return " ".join(argument for argument in arguments if argument)


def parent(path: str) -> str:
    """The folder a file lies in (stages take the folder of another stage's outputs)."""
    return str(Path(path).parent)


def folder_of(name: str) -> Callable[[Any, Mapping[str, str]], str]:
    """A params function: the folder of the rule's output ``name``.

    For stages that take ``--out-dir`` and write every output there.
    """

    def folder(wildcards: Any, output: Mapping[str, str]) -> str:
        return parent(output[name])

    return folder


def beside_output(name: str, folder: str) -> Callable[[Any, Mapping[str, str]], str]:
    """A params function: ``folder`` in the folder of the rule's output ``name``.

    For what a stage keeps between its runs but never outputs (train_ner's resume state).
    """

    def beside(wildcards: Any, output: Mapping[str, str]) -> str:
        return str(Path(parent(output[name])) / folder)

    return beside
