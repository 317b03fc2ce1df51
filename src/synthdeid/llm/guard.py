"""The request guard: nothing that looks like PHI is sent to a language model.

Prompts are built from masked seed notes, which should hold placeholders
(``[[DOCTOR_1]]``) and no identifiers. The guard checks that, for every
request, just before it would be sent: a request is refused when its text
contains

* a PHI surface removed from the seed notes by the mask step (whole word,
  any case, any spacing: the same matching as the mask step's propagation,
  :class:`synthdeid.mentions.SurfaceIndex`, so "Ann" does not hit "Annual");
  surfaces shorter than ``min_surface_chars`` (initials, two-digit numbers)
  would match nearly everywhere and are skipped (counted in ``skipped``);
* an identifier-like string (a date, phone number, record number, e-mail
  address, URL or person name) found by :class:`IdentifierScanner`.

Surfaces and request text are both folded first (:mod:`.folding`:
compatibility forms, zero-width and other format characters, accents,
Cyrillic and Greek look-alikes, a hyphen between letters read as nothing or
as a word break), so a surface disguised in any of these ways is refused as
the plain surface is. Then the placeholders of the allowlist
(resources/placeholders.yaml: ``[[DOCTOR_1]]``) are blanked; any other
``[[NAME_n]]`` is searched like the rest of the text. The search stays
linear in the text's length: a fold, two readings at most, and set probes
of token n-grams.

A refused request is never sent: :class:`GuardedBackend` answers it with a
:class:`ChatFailure` and counts the reasons. Reasons name the kind, label
and length (in folded characters) of what was found, never the text itself,
so logs and failure records carry no PHI.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from synthdeid.artifacts import open_parquet, require_columns
from synthdeid.identifiers import IdentifierScanner, blank_placeholders
from synthdeid.llm.base import ChatBackend, ChatFailure, ChatRequest, ChatResult
from synthdeid.llm.folding import matching_forms
from synthdeid.mentions import SurfaceIndex

log = logging.getLogger(__name__)

PHI_SURFACE = "phi_surface"
REFUSED_PREFIX = "refused by guard: "


@dataclass(frozen=True)
class GuardFinding:
    """Why a text is refused: a kind (for counting) and a PHI-free reason."""

    kind: str
    reason: str


def _surface_key(surface: str) -> tuple[str, ...] | None:
    """The token key :class:`SurfaceIndex` matches ``surface`` by (None: no tokens)."""
    keys = SurfaceIndex([surface], min_chars=0).keys
    return next(iter(keys)) if keys else None


class RequestGuard:
    """Checks texts for seed PHI surfaces and identifier-like strings.

    ``phi_surfaces``: the removed surfaces, as strings or ``(surface, label)``
    pairs (the label goes into reasons). ``scanner``: the identifier scanner
    (None: only PHI surfaces are searched). ``placeholders``: the names of the
    allowlisted placeholders (``DOCTOR``, ``DATE``, ...), the only ones
    blanked before the search.
    """

    def __init__(
        self,
        phi_surfaces: Iterable[str | tuple[str, str]],
        scanner: IdentifierScanner | None,
        min_surface_chars: int = 3,
        *,
        placeholders: Collection[str],
    ) -> None:
        if isinstance(placeholders, str):
            raise TypeError("placeholders must be a collection of placeholder names, not a string")
        self.scanner = scanner
        self.min_surface_chars = min_surface_chars
        self.placeholders = frozenset(placeholders)
        # every matching form of every surface, by its token key -> the surface's labels
        self._labels: dict[tuple[str, ...], set[str]] = {}
        searched: set[tuple[str, ...]] = set()
        kept: list[str] = []
        self.skipped = 0
        for item in phi_surfaces:
            surface, label = (item, None) if isinstance(item, str) else item
            forms = matching_forms(surface)
            keyed = [(form, key) for form in forms if (key := _surface_key(form)) is not None]
            if not keyed or len("".join(forms[0].split())) < min_surface_chars:
                self.skipped += 1
                continue
            searched.add(keyed[-1][1])  # the word-break reading: one per distinct surface
            for form, key in keyed:
                if key not in self._labels:
                    kept.append(form)
                    self._labels[key] = set()
                if label:
                    self._labels[key].add(label)
        self._surfaces = len(searched)
        self._index = SurfaceIndex(kept, min_chars=min_surface_chars)
        if self.skipped:
            log.info(
                "request guard: %d PHI surfaces searched; %d shorter than %d characters skipped",
                self._surfaces,
                self.skipped,
                min_surface_chars,
            )

    @property
    def surfaces(self) -> int:
        """How many distinct PHI surfaces are searched for."""
        return self._surfaces

    def describe(self) -> dict[str, Any]:
        """For provenance: counts and settings, never the surfaces."""
        return {
            "phi_surfaces": self.surfaces,
            "phi_surfaces_skipped": self.skipped,
            "min_surface_chars": self.min_surface_chars,
            "identifier_scanner": self.scanner is not None,
            "placeholders": sorted(self.placeholders),
        }

    def forms(self, text: str) -> tuple[str, ...]:
        """The texts searched for ``text``: folded, each dash reading, placeholders blanked."""
        return tuple(blank_placeholders(form, self.placeholders) for form in matching_forms(text))

    def findings(self, text: str) -> list[GuardFinding]:
        """Everything in ``text`` that makes it unfit to send (empty: it may go)."""
        forms = self.forms(text)
        found = [
            self._surface_finding(form, start, end)
            for form in forms
            for start, end in self._index.find(form)
        ]
        if self.scanner is not None:
            found += [
                GuardFinding(f.kind, f"identifier-like {f.describe()}")
                for form in forms
                for f in self.scanner.scan(form, placeholder_names=self.placeholders)
            ]
        return list(dict.fromkeys(found))

    def check(self, text: str) -> list[str]:
        """The reasons to refuse ``text``, without duplicates (empty: it may be sent)."""
        return list(dict.fromkeys(finding.reason for finding in self.findings(text)))

    def _surface_finding(self, text: str, start: int, end: int) -> GuardFinding:
        labels = self._labels.get(_surface_key(text[start:end]) or (), set())
        label = "/".join(sorted(labels)) if labels else "unknown"
        return GuardFinding(PHI_SURFACE, f"seed PHI surface (label {label}, {end - start} chars)")


class GuardedBackend(ChatBackend):
    """A backend that sends only the requests its guard lets through.

    Refused requests never reach the inner backend; they come back as
    ``ChatFailure("refused by guard: ...")``. ``sent`` and ``refused`` count
    requests, ``refusal_reasons`` counts refused requests by finding kind
    (``phi_surface``, ``date``, ``name``, ...).
    """

    def __init__(self, backend: ChatBackend, guard: RequestGuard) -> None:
        self.backend = backend
        self.guard = guard
        self.name = backend.name
        self.model = backend.model
        self.sent = 0
        self.refused = 0
        self.refusal_reasons: Counter[str] = Counter()

    def describe(self) -> dict[str, Any]:
        return {**self.backend.describe(), "guard": self.guard.describe()}

    def complete_many(
        self, requests: Sequence[ChatRequest], *, progress: bool = False
    ) -> list[ChatResult]:
        results: list[ChatResult | None] = [None] * len(requests)
        allowed: list[int] = []
        for i, request in enumerate(requests):
            findings = self.guard.findings(request.text())
            if findings:
                results[i] = self._refuse(findings)
            else:
                allowed.append(i)
        if len(allowed) < len(requests):
            log.warning(
                "request guard: %d of %d requests refused",
                len(requests) - len(allowed),
                len(requests),
            )
        answers = (
            self.backend.complete_many([requests[i] for i in allowed], progress=progress)
            if allowed
            else []
        )
        self.sent += len(allowed)
        for i, answer in zip(allowed, answers, strict=True):
            results[i] = answer
        return [r for r in results if r is not None]

    def _refuse(self, findings: list[GuardFinding]) -> ChatFailure:
        self.refused += 1
        self.refusal_reasons.update({finding.kind for finding in findings})
        reasons = list(dict.fromkeys(finding.reason for finding in findings))
        return ChatFailure(REFUSED_PREFIX + "; ".join(reasons))

    def close(self) -> None:
        self.backend.close()


def load_phi_surfaces(removed_values: str | Path) -> list[tuple[str, str]]:
    """Distinct ``(surface, label)`` pairs of the mask step's removed-values Parquet."""
    parquet = open_parquet(removed_values)
    require_columns(
        removed_values,
        parquet.schema_arrow.names,
        ["surface", "label"],
        "a removed-values table",
        "expected the removed-values table of the mask step",
    )
    table = parquet.read(columns=["surface", "label"])
    pairs = zip(table.column("surface").to_pylist(), table.column("label").to_pylist(), strict=True)
    return list(
        dict.fromkeys(
            (surface, label)
            for surface, label in pairs
            if isinstance(surface, str) and isinstance(label, str)
        )
    )
