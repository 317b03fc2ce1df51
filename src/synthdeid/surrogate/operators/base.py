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
every patient (:class:`Originals`, a first pass over the notes, which keeps
their hashes) and hands them to the operators, which redraw
(deterministically, with an attempt counter in the HMAC parts) any draw equal
to one of them. An operator that needs more than membership (the date shift)
watches the mentions of its label during that pass, and may ask for another
(:meth:`SurrogateOperator.observe`).
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from synthdeid.errors import ConfigError
from synthdeid.hashset import HashSet, Keys, hash64
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


SURFACES = "surfaces"  # the view of every original as a whole: its normalised surface
ORIGINALS_DOMAIN = b"original"  # the hash domain of originals (synthdeid.hashset.hash64)


class Taken(Container[str]):
    """What the originals of one scope use in one view: ``text in taken``."""

    def __init__(self, originals: Originals, scope: str, view: str) -> None:
        self._originals, self._scope, self._view = originals, scope, view

    def __contains__(self, text: object) -> bool:
        return isinstance(text, str) and self._originals.holds(self._scope, text, self._view)


class Originals:
    """What the normalised originals of each scope hold, as 64-bit hashes.

    Filled from all the notes before any replacement (:meth:`add`). A scope is
    a patient's id, and :data:`CORPUS_SCOPE` holds every patient's originals;
    only the scopes of ``consistencies`` (:data:`CONSISTENCY_SCOPES`) are kept.
    Every original is kept as its normalised surface (:data:`SURFACES`) and as
    the parts each registered view takes from it (:meth:`add_view`: the name
    operator's words and initials), each as the hash of (view, scope, text) in
    one :class:`~synthdeid.hashset.HashSet`: 8 bytes a distinct item, whatever
    its length (1.54 items a note in the synthetic demo corpus, measured in
    :mod:`synthdeid.surrogate.replace_table`). Only membership can be asked
    (:meth:`taken`); an operator that needs an original itself sees it as the
    notes are read (:meth:`SurrogateOperator.observe`).

    A text that is no original is taken for one with probability at most
    n/2^64 for n items kept (5.4e-11 for 10^9 items), and then only makes an
    operator draw again: surrogates stay keyed and reproducible, and differ
    from what exact sets would give only on such a false match (over q
    lookups, probability at most q*n/2^64).
    """

    def __init__(self, consistencies: Iterable[str] = CONSISTENCY_SCOPES) -> None:
        self._consistencies = frozenset(consistencies)
        self._views: dict[str, Callable[[str], Iterable[str]]] = {}
        self._hashes = HashSet()
        self._filled = False

    def keep_scopes(self, consistencies: Iterable[str]) -> None:
        """Keep only the scopes of these consistencies (before the first original)."""
        self._refuse_if_filled("choose the scopes")
        self._consistencies = frozenset(consistencies)

    def add_view(self, name: str, parts: Callable[[str], Iterable[str]]) -> None:
        """Also keep ``parts(normalised surface)`` of every original, asked as view ``name``.

        Registering a name again keeps the first ``parts`` (operators of
        several labels share a view).
        """
        if name not in self._views:
            self._refuse_if_filled("register views")
            self._views[name] = parts

    def add(self, patient_id: str, surface: str) -> None:
        self._filled = True
        folded = normalize(surface)
        items = [(SURFACES, folded)]
        items += [(view, part) for view, parts in self._views.items() for part in parts(folded)]
        scopes = [patient_id] if "patient" in self._consistencies else []
        scopes += [CORPUS_SCOPE] if "corpus" in self._consistencies else []
        for scope in scopes:
            for view, text in items:
                self._hashes.add(self.key(scope, text, view))

    def taken(self, scope: str, view: str = SURFACES) -> Taken:
        """What the originals of ``scope`` hold in ``view`` (normalised surfaces by default)."""
        return Taken(self, scope, view)

    def holds(self, scope: str, text: str, view: str = SURFACES) -> bool:
        return self.key(scope, text, view) in self._hashes

    def holds_keys(self, keys: Keys) -> npt.NDArray[np.bool_]:
        """Whether each :meth:`key` in ``keys`` is kept."""
        return self._hashes.contains_many(keys)

    @staticmethod
    def key(scope: str, text: str, view: str = SURFACES) -> int:
        """The hash under which ``text`` is kept in ``view`` of ``scope``."""
        return hash64(view, scope, text, domain=ORIGINALS_DOMAIN)

    def _refuse_if_filled(self, what: str) -> None:
        if self._filled:
            raise RuntimeError(f"{what} before the first original is added")


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

    def observe(self, mention: Mention, look: int) -> None:  # noqa: B027 - optional hook
        """See a mention of this operator's label while the originals are collected.

        Every mention is seen in pass ``look`` 0, which fills :attr:`originals`,
        and again in each further pass :meth:`looks_again` asks for.
        """

    def looks_again(self, looks: int) -> bool:
        """After ``looks`` passes over every note, whether this operator needs another."""
        return False

    def scope(self, mention: Mention) -> str:
        return mention.patient_id if self.consistency == "patient" else CORPUS_SCOPE

    def is_original(self, mention: Mention, candidate: str) -> bool:
        """Whether ``candidate`` equals (normalised) any original of the mention's scope."""
        return normalize(candidate) in self.originals.taken(self.scope(mention))

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
