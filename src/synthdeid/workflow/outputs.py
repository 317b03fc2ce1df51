"""A rule's output files, named as the rule declares them: what the pool and target tables
hold instead of paths.

A rule's ``output:`` is the one place its paths are written. The tables name a file
as an :class:`Output` (the rule, the output's name, and any wildcards the table fixes)
and get its path from :class:`RuleOutputs`, which the Snakefile builds from its parsed
rules (``rules.<name>.output``); the tests build it from the same parse. A renamed
output or a moved path then changes one line, and a table naming an output no rule
declares fails at parse time, naming both.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from synthdeid.errors import ConfigError

# a wildcard in a Snakemake pattern: {name} or {name,regex}
_WILDCARD = re.compile(r"\{(\w+)(?:,[^{}]*(?:\{[^{}]*\}[^{}]*)*)?\}")


@dataclass(frozen=True)
class Output:
    """One named output of one rule, with the wildcards a table fixes (e.g. a teacher's
    name); the others (``{corpus}``) stay for the caller to fill."""

    rule: str
    name: str
    wildcards: Mapping[str, str] = field(default_factory=dict)

    def fixing(self, **wildcards: str) -> Output:
        """This output with more wildcards fixed (those its pattern lacks are ignored)."""
        return replace(self, wildcards={**self.wildcards, **wildcards})


class DeclaredRule(Protocol):
    """What :meth:`RuleOutputs.from_rules` reads of a parsed Snakemake rule."""

    name: str
    output: Any  # snakemake.io.OutputFiles: keys() and attribute access by name
    benchmark: Any  # the benchmark file's pattern, or None


def fill(pattern: str, wildcards: Mapping[str, str]) -> str:
    """``pattern`` with the wildcards named in ``wildcards`` filled, the others kept."""

    def filled(match: re.Match[str]) -> str:
        name = match.group(1)
        return wildcards[name] if name in wildcards else match.group(0)

    return _WILDCARD.sub(filled, pattern)


# the name a rule's benchmark file goes by among its outputs
BENCHMARK = "benchmark"


class RuleOutputs:
    """Every named output of every rule: (rule, output name) -> its path pattern; a rule's
    benchmark file is named :data:`BENCHMARK`."""

    def __init__(self, patterns: Mapping[tuple[str, str], str]) -> None:
        self._patterns = dict(patterns)

    @classmethod
    def from_rules(cls, rules: Iterable[DeclaredRule]) -> RuleOutputs:
        """The named outputs of parsed Snakemake rules (``workflow.rules``), and their
        benchmark files."""
        patterns: dict[tuple[str, str], str] = {}
        for rule in rules:
            # (iterating OutputFiles gives its paths; keys() gives the names)
            for name in rule.output.keys():  # noqa: SIM118
                if name == BENCHMARK:
                    raise ConfigError(
                        f"rule {rule.name!r} names an output {BENCHMARK!r}, the name its "
                        "benchmark file goes by"
                    )
                patterns[(rule.name, name)] = str(getattr(rule.output, name))
            if rule.benchmark is not None:
                patterns[(rule.name, BENCHMARK)] = str(rule.benchmark)
        return cls(patterns)

    def pattern(self, output: Output) -> str:
        """The output's path pattern, the wildcards it fixes filled."""
        try:
            pattern = self._patterns[(output.rule, output.name)]
        except KeyError:
            raise ConfigError(
                f"rule {output.rule!r} declares no output named {output.name!r}"
            ) from None
        return fill(pattern, output.wildcards)

    def path(self, output: Output, **wildcards: str) -> str:
        """The output's path with ``wildcards`` filled too (every wildcard, for a file)."""
        return fill(self.pattern(output), wildcards)
