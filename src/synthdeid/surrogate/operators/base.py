"""The surrogate operator interface and its registry.

An operator turns one PHI mention into its surrogate. Operators are small
classes registered under a class-level ``name`` (the value of
``surrogate.labels.<LABEL>.operator`` in the config). They are stateless
apart from counters: every random choice comes from the key's HMAC of
(scope, label, normalised original), where the scope is the patient id (or
``*`` when consistency is corpus-wide), so the same original gets the same
surrogate wherever it appears in that scope, reruns are identical, and another
key gives unrelated surrogates.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from synthdeid.errors import ConfigError
from synthdeid.surrogate.keying import SurrogateKey

OPERATORS: dict[str, type[SurrogateOperator]] = {}
CONSISTENCY_SCOPES = ("patient", "corpus")


def register(cls: type[SurrogateOperator]) -> type[SurrogateOperator]:
    if cls.name in OPERATORS:
        raise RuntimeError(f"two surrogate operators registered as {cls.name!r}")
    OPERATORS[cls.name] = cls
    return cls


@dataclass(frozen=True)
class Mention:
    """One PHI mention to replace."""

    surface: str
    label: str
    patient_id: str
    note_id: str


def normalize(surface: str) -> str:
    """The form under which two mentions count as the same original."""
    return " ".join(surface.split()).casefold()


class SurrogateOperator(ABC):
    """Replaces a mention by its surrogate.

    Subclasses set ``name`` and ``defaults`` (their options and default values)
    and implement :meth:`replace`. Unknown options are a configuration error.
    """

    name: ClassVar[str]
    defaults: ClassVar[Mapping[str, Any]] = {}

    def __init__(self, key: SurrogateKey, options: Mapping[str, Any] | None = None) -> None:
        options = dict(options or {})
        consistency = options.pop("consistency", "patient")
        if consistency not in CONSISTENCY_SCOPES:
            raise ConfigError(
                f"operator {self.name}: consistency must be one of {CONSISTENCY_SCOPES}, "
                f"got {consistency!r}"
            )
        unknown = set(options) - set(self.defaults)
        if unknown:
            raise ConfigError(
                f"operator {self.name}: unknown options {sorted(unknown)}; "
                f"it takes {sorted(self.defaults) or 'none'}"
            )
        self.key = key
        self.consistency = consistency
        self.options: dict[str, Any] = {**self.defaults, **options}
        # what happened, for the step's summary (e.g. "unparsed_dates": 3)
        self.counts: Counter[str] = Counter()

    def scope(self, mention: Mention) -> str:
        return mention.patient_id if self.consistency == "patient" else "*"

    def rng(self, mention: Mention, *extra: str) -> random.Random:
        """Randomness for this original in this scope (same inputs, same stream)."""
        return self.key.rng(
            self.name, self.scope(mention), mention.label, normalize(mention.surface), *extra
        )

    def allows_identity(self, mention: Mention) -> bool:
        """Whether returning the original unchanged is deliberate for this mention."""
        return False

    @abstractmethod
    def replace(self, mention: Mention) -> str:
        """The surrogate for ``mention``: never the original unless allowed."""


def build_operator(
    key: SurrogateKey, name: str, options: Mapping[str, Any] | None = None
) -> SurrogateOperator:
    try:
        cls = OPERATORS[name]
    except KeyError:
        raise ConfigError(
            f"unknown surrogate operator {name!r}; known: {', '.join(sorted(OPERATORS))}"
        ) from None
    return cls(key, options)
