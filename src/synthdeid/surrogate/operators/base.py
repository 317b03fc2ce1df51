"""The surrogate operator interface and its registry.

An operator turns one PHI mention into its surrogate. Operators are small
classes registered under a class-level ``name`` (the value of
``surrogate.labels.<LABEL>.operator`` in the config). They are stateless
apart from counters: every random choice comes from the key's HMAC of
(scope, label, normalised original), where the scope is the patient id (or
``*`` when consistency is corpus-wide), so the same original gets the same
surrogate wherever it appears in that scope, reruns are identical, and another
key gives unrelated surrogates.

A surrogate must also differ from every original of its scope, not only from
its own original: otherwise one doctor's surrogate can be another doctor's
real name in the same note, and that real name then reads as a surrogate.
Before replacing, the engine collects the normalised original surfaces of
every patient (:class:`Originals`, a first pass over the notes) and hands them
to the operators, which redraw (deterministically, with an attempt counter in
the HMAC parts) any draw equal to one of them.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass
from typing import Any, ClassVar

from synthdeid.errors import ConfigError
from synthdeid.notes import Note
from synthdeid.surrogate.keying import SurrogateKey

OPERATORS: dict[str, type[SurrogateOperator]] = {}
CONSISTENCY_SCOPES = ("patient", "corpus")
# the scope of every mention when consistency is corpus-wide
CORPUS_SCOPE = "*"


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


class Originals:
    """The normalised original surfaces of each patient and of the whole corpus, by label.

    Filled from all the notes before any replacement; only surfaces are kept
    (memory grows with the distinct surfaces, not with the notes). The scope
    :data:`CORPUS_SCOPE` holds every patient's surfaces.
    """

    def __init__(self) -> None:
        self._by_label: dict[str, dict[str, set[str]]] = {}
        self._all: dict[str, set[str]] = {}

    def add(self, patient_id: str, label: str, surface: str) -> None:
        folded = normalize(surface)
        for scope in (patient_id, CORPUS_SCOPE):
            self._by_label.setdefault(scope, {}).setdefault(label, set()).add(folded)
            self._all.setdefault(scope, set()).add(folded)

    def add_notes(self, notes: Iterable[Note]) -> None:
        for note in notes:
            for span in note.spans:
                self.add(note.patient_id, span.label, span.surface(note.text))

    def surfaces(self, scope: str, label: str | None = None) -> Set[str]:
        """The normalised originals of ``scope`` (of one ``label``, or of all labels)."""
        if label is None:
            return self._all.get(scope, frozenset())
        return self._by_label.get(scope, {}).get(label, frozenset())


class SurrogateOperator(ABC):
    """Replaces a mention by its surrogate.

    Subclasses set ``name`` and ``defaults`` (their options and default values),
    check their options in :meth:`configure` and implement :meth:`replace`.
    Unknown options are a configuration error.
    ``originals`` are the originals no surrogate of a scope may equal (see
    :meth:`is_original`); operators whose output is a category rather than a
    value (ages, placeholders, keeping) set ``avoids_originals`` to False.
    """

    name: ClassVar[str]
    defaults: ClassVar[Mapping[str, Any]] = {}
    avoids_originals: ClassVar[bool] = True

    def __init__(
        self,
        key: SurrogateKey,
        options: Mapping[str, Any] | None = None,
        originals: Originals | None = None,
    ) -> None:
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
        self.originals = Originals() if originals is None else originals
        # what happened, for the step's summary (e.g. "unparsed_dates": 3)
        self.counts: Counter[str] = Counter()
        self.configure()

    def configure(self) -> None:  # noqa: B027 - optional hook, no options to check by default
        """Check the operator's own options (``self.options``) and set up what it needs.

        Called at the end of ``__init__``; operators with options override it.
        """

    def scope(self, mention: Mention) -> str:
        return mention.patient_id if self.consistency == "patient" else CORPUS_SCOPE

    def is_original(self, mention: Mention, candidate: str) -> bool:
        """Whether ``candidate`` equals (normalised) any original of the mention's scope."""
        return normalize(candidate) in self.originals.surfaces(self.scope(mention))

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
    key: SurrogateKey,
    name: str,
    options: Mapping[str, Any] | None = None,
    originals: Originals | None = None,
) -> SurrogateOperator:
    try:
        cls = OPERATORS[name]
    except KeyError:
        raise ConfigError(
            f"unknown surrogate operator {name!r}; known: {', '.join(sorted(OPERATORS))}"
        ) from None
    return cls(key, options, originals)
