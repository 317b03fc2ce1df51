"""The rules of Snakemake files read as text: names, parents, directives, paths, shell.

Enough of the grammar for the repository's own checks: ``rule NAME:``, ``checkpoint NAME:`` and
``use rule A as B with:`` start a rule, its docstring is skipped, and each
directive (``output:``, ``shell:``, ...) runs to the next one or to the end of
the rule (the next unindented line).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

RULE_START = re.compile(r"^(?:(?:rule|checkpoint) (\w+):|use rule (\w+) as (\w+)(?: with:)?)\s*$")
DIRECTIVE = re.compile(r"^    (\w+):(.*)$")
DOCSTRING = re.compile(r'^\s*""".*?"""\n?', re.DOTALL)
# `synthdeid [--log X] [-v] <stage>` in a rule's shell command
COMMAND = re.compile(r"\bsynthdeid(?:\s+(?:--log\s+\S+|-v|--verbose))*\s+([a-z][a-z0-9-]*)")


@dataclass(frozen=True)
class Rule:
    """One rule as written: its own text and directives (a ``use rule`` names its parent)."""

    name: str
    parent: str | None
    body: str
    directives: dict[str, str] = field(default_factory=dict)


def directives_of(body: str) -> dict[str, str]:
    """Each directive's text (what follows ``name:``, over as many lines as it spans)."""
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in DOCSTRING.sub("", body, count=1).splitlines():
        match = DIRECTIVE.match(line)
        if match:
            current = found.setdefault(match.group(1), [])
            current.append(match.group(2))
        elif current is not None:
            current.append(line)
    return {name: "\n".join(lines).strip() for name, lines in found.items()}


def read_rules(text: str) -> dict[str, Rule]:
    """The rules of one Snakemake file's text, by name."""
    rules: dict[str, Rule] = {}
    name: str | None = None
    parent: str | None = None
    lines: list[str] = []

    def close() -> None:
        if name is not None:
            body = "\n".join(lines)
            rules[name] = Rule(name, parent, body, directives_of(body))

    for line in text.splitlines():
        start = RULE_START.match(line)
        if start:
            close()
            name = start.group(1) or start.group(3)
            parent = start.group(2)
            lines = []
        elif name is not None and line and not line[0].isspace():
            close()
            name = None
        elif name is not None:
            lines.append(line)
    close()
    return rules


def read_rule_files(paths: Iterable[Path]) -> dict[str, Rule]:
    """The rules of several Snakemake files, by name."""
    rules: dict[str, Rule] = {}
    for path in paths:
        rules.update(read_rules(path.read_text(encoding="utf-8")))
    return rules


def resolved(rules: dict[str, Rule], name: str) -> dict[str, str]:
    """A rule's directives with those it inherits from its parent (its own win)."""
    rule = rules[name]
    inherited = resolved(rules, rule.parent) if rule.parent else {}
    return {**inherited, **rule.directives}


def literal_paths(directive: str) -> list[str]:
    """The literal paths of an ``output:`` / ``log:`` / ``benchmark:`` directive.

    A path is a string argument, or the first argument of a call wrapping one
    (``directory(...)``, ``report(...)``); computed paths are not listed.
    """
    call = ast.parse(f"f(\n{directive}\n)", mode="eval").body
    assert isinstance(call, ast.Call)
    paths = []
    for node in [*call.args, *(keyword.value for keyword in call.keywords)]:
        if isinstance(node, ast.Call) and node.args:
            node = node.args[0]
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            paths.append(node.value)
    return paths


def shell_text(directive: str) -> str:
    """The shell command of a ``shell:`` directive (its adjacent strings joined)."""
    value = ast.literal_eval(f"(\n{directive}\n)")
    assert isinstance(value, str)
    return value


def commands(shell: str) -> list[str]:
    """The ``synthdeid`` subcommands a shell command runs."""
    return COMMAND.findall(shell)
