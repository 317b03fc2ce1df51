"""Local fill of templates: placeholders -> generated values, with exact offsets.

A template is clinical text with typed, numbered placeholders (``[[DOCTOR_1]]``,
``[[DATE_2]]``, allowlisted in resources/placeholders.yaml). :class:`TemplateFiller`
replaces them left to right with values from the placeholder's generator
(:mod:`synthdeid.synthesis.generators`) and records each inserted value's
character span at insertion time, so every synthetic label is exact by
construction; :func:`check_fill` verifies it on every output anyway
(``text[start:end]`` is the inserted value for 100% of spans).

Rules:

* One placeholder, one value: every occurrence of ``[[PATIENT_1]]`` in a template
  gets the same value (placeholders are identified by name and number, so
  ``[[PATIENT_01]]`` is ``[[PATIENT_1]]``). Different numbers of one name get
  different values (compared casefolded, whitespace-normalised).
* The RNG of a template derives only from the filler's seed and the template id
  (``random.Random(f"{seed}:{template_id}")``, a SHA-512 seeding that does not
  depend on ``PYTHONHASHSEED``), so a template's fill does not depend on the
  order templates are processed in, and reruns are identical.
* ``forbidden`` surfaces (the seed notes' real PHI) are never produced: a drawn
  value that equals one (casefolded, whitespace-normalised), or that contains
  one of at least :data:`MIN_CONTAINED_CHARS` characters as whole words, is
  redrawn; after ``max_redraws`` redraws the fill stops with a
  :class:`StepError`. See :class:`ForbiddenSurfaces`.
* A well-formed placeholder whose name is not allowlisted is a :class:`StepError`
  (the template validator rejects these earlier; the fill is defensive). All
  text outside placeholders is copied unchanged.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from synthdeid.errors import ConfigError, StepError
from synthdeid.notes import Span
from synthdeid.synthesis.generators import (
    POOL_LOCALE,
    POOL_SEED,
    ValueGenerator,
    build_generators,
    generators_fingerprint,
)
from synthdeid.synthesis.placeholders import PlaceholderAllowlist, iter_placeholders

MIN_CONTAINED_CHARS = 3  # shorter forbidden surfaces only block an equal value
MAX_NGRAM_WORDS = 12  # forbidden surfaces with more words only block an equal value
_WORD = re.compile(r"[^\W_]+")


def normalize_surface(text: str) -> str:
    """Casefolded, with runs of whitespace as one space and no edge whitespace."""
    return " ".join(text.split()).casefold()


def _words(normalized: str) -> list[str]:
    return _WORD.findall(normalized)


class ForbiddenSurfaces:
    """Surfaces no generated value may equal or contain as whole words.

    A value is blocked when its normalised form (:func:`normalize_surface`)
    equals a normalised forbidden surface, or when the word sequence of a
    forbidden surface of at least :data:`MIN_CONTAINED_CHARS` characters
    appears as consecutive words of the value. Words are runs of letters and
    digits, so punctuation does not matter inside that test: forbidding
    ``"J. Smith"`` blocks ``"Dr. J Smith"``, forbidding ``"3/14/2019"`` blocks
    ``"3-14-2019"``, and forbidding ``"Smith"`` blocks ``"Smith-Jones"`` but not
    ``"Smithson"``. Lookups are set lookups of the value and its word n-grams,
    so thousands of surfaces cost no more than a few.
    """

    def __init__(self, surfaces: Iterable[str] = ()) -> None:
        self._exact: set[str] = set()
        self._word_runs: set[str] = set()
        self._max_words = 0
        for surface in surfaces:
            self.add(surface)

    def add(self, surface: str) -> None:
        normalized = normalize_surface(surface)
        if not normalized:
            return
        self._exact.add(normalized)
        words = _words(normalized)
        if len(normalized) >= MIN_CONTAINED_CHARS and 0 < len(words) <= MAX_NGRAM_WORDS:
            self._word_runs.add(" ".join(words))
            self._max_words = max(self._max_words, len(words))

    def __len__(self) -> int:
        return len(self._exact)

    def blocks(self, value: str) -> bool:
        """Whether ``value`` equals or contains a forbidden surface (see the class)."""
        normalized = normalize_surface(value)
        if normalized in self._exact:
            return True
        if not self._word_runs:
            return False
        words = _words(normalized)
        runs = self._word_runs
        for start in range(len(words)):
            for stop in range(start + 1, min(len(words), start + self._max_words) + 1):
                if " ".join(words[start:stop]) in runs:
                    return True
        return False


@dataclass(frozen=True)
class FilledNote:
    """A filled template.

    ``spans`` holds one span per placeholder occurrence, left to right, labelled
    from the allowlist; ``tokens[i]`` is the placeholder (``"[[DOCTOR_1]]"``)
    that ``spans[i]`` filled, and ``values`` maps each placeholder to its value.
    """

    text: str
    spans: tuple[Span, ...]
    values: Mapping[str, str]
    tokens: tuple[str, ...] = ()
    template_id: str = ""
    redraws: int = field(default=0, compare=False)


class TemplateFiller:
    """Fills templates with values from the allowlist's generators (module docstring)."""

    def __init__(
        self,
        allowlist: PlaceholderAllowlist,
        seed: int,
        forbidden: Iterable[str] = (),
        max_redraws: int = 50,
    ) -> None:
        if isinstance(max_redraws, bool) or not isinstance(max_redraws, int) or max_redraws < 0:
            raise ConfigError(f"max_redraws must be a whole number >= 0, got {max_redraws!r}")
        self.allowlist = allowlist
        self.seed = seed
        self.max_redraws = max_redraws
        self.forbidden = (
            forbidden if isinstance(forbidden, ForbiddenSurfaces) else ForbiddenSurfaces(forbidden)
        )
        wanted = {rule.generator for rule in allowlist.rules.values()}
        self._generators: dict[str, ValueGenerator] = build_generators(sorted(wanted))

    def provenance(self) -> dict[str, Any]:
        """What decides this filler's output, for the pool's provenance record."""
        return {
            "seed": self.seed,
            "allowlist_version": self.allowlist.version,
            "allowlist_fingerprint": self.allowlist.fingerprint,
            "generators_fingerprint": generators_fingerprint(),
            "pool_locale": POOL_LOCALE,
            "pool_seed": POOL_SEED,
            "forbidden_surfaces": len(self.forbidden),
            "max_redraws": self.max_redraws,
        }

    def rng_for(self, template_id: str) -> random.Random:
        """The RNG of one template: seed and template id only."""
        return random.Random(f"{self.seed}:{template_id}")

    def fill(self, template: str, template_id: str) -> FilledNote:
        """Replace every placeholder of ``template``; spans recorded at insertion."""
        rng = self.rng_for(template_id)
        rules = self.allowlist.rules
        pieces: list[str] = []
        spans: list[Span] = []
        tokens: list[str] = []
        values: dict[str, str] = {}
        used: dict[str, set[str]] = {}
        cursor = length = redraws = 0
        for match in iter_placeholders(template):
            rule = rules.get(match.name)
            if rule is None:
                raise StepError(
                    f"template {template_id!r}: placeholder {match.token} at "
                    f"{match.start}-{match.end} is not on the allowlist "
                    f"(allowed: {', '.join(rules)})"
                )
            token = match.token
            value = values.get(token)
            if value is None:
                value, tries = self._draw(rule.generator, rng, used, match.name)
                if value is None:
                    raise StepError(
                        f"template {template_id!r}: no allowed value for {token} after "
                        f"{self.max_redraws} redraws (every draw was a forbidden surface or "
                        f"the value of another {match.name} placeholder)"
                    )
                values[token] = value
                redraws += tries
            pieces.append(template[cursor : match.start])
            length += match.start - cursor
            spans.append(Span(length, length + len(value), rule.label))
            tokens.append(token)
            pieces.append(value)
            length += len(value)
            cursor = match.end
        pieces.append(template[cursor:])
        filled = FilledNote(
            "".join(pieces), tuple(spans), values, tuple(tokens), template_id, redraws
        )
        check_fill(filled, template)  # spans exact, text outside them unchanged
        return filled

    def _draw(
        self, generator: str, rng: random.Random, used: dict[str, set[str]], name: str
    ) -> tuple[str | None, int]:
        """A value that is not forbidden and not taken by another ``name`` placeholder."""
        taken = used.setdefault(name, set())
        draw = self._generators[generator].draw
        blocks = self.forbidden.blocks
        for attempt in range(self.max_redraws + 1):
            value = draw(rng)
            key = normalize_surface(value)
            if key and key not in taken and not blocks(value):
                taken.add(key)
                return value, attempt
        return None, self.max_redraws


def check_fill(filled: FilledNote, template: str | None = None) -> None:
    """Raise :class:`StepError` naming the span unless the fill is exact.

    Checks that spans are in order, non-empty, inside the text and do not
    overlap, and that each span's text is the value inserted for its
    placeholder (``filled.tokens``; without tokens, one of ``filled.values``).
    With ``template``, also checks that the text between spans is the
    template's text between placeholders, unchanged.
    """
    where = f"template {filled.template_id!r}" if filled.template_id else "filled note"
    text, spans, tokens = filled.text, filled.spans, filled.tokens
    if tokens and len(tokens) != len(spans):
        raise StepError(f"{where}: {len(spans)} spans but {len(tokens)} placeholder tokens")
    inserted = set(filled.values.values())
    previous_end = 0
    for index, span in enumerate(spans):
        described = f"span {span.start}-{span.end} ({span.label})"
        if span.start < 0 or span.end > len(text) or span.start >= span.end:
            raise StepError(f"{where}: {described} is empty or outside text of length {len(text)}")
        if span.start < previous_end:
            raise StepError(
                f"{where}: {described} overlaps the span before it, ending at {previous_end}"
            )
        surface = text[span.start : span.end]
        if tokens:
            token = tokens[index]
            expected = filled.values.get(token)
            if surface != expected:
                raise StepError(
                    f"{where}: {described} reads {surface!r}, but {expected!r} was inserted "
                    f"for {token}"
                )
        elif surface not in inserted:
            raise StepError(f"{where}: {described} reads {surface!r}, which is no inserted value")
        previous_end = span.end
    if template is not None:
        _check_outside(filled, template, where)


def _check_outside(filled: FilledNote, template: str, where: str) -> None:
    """The text around the spans is the template's text around its placeholders."""
    matches = list(iter_placeholders(template))
    if len(matches) != len(filled.spans):
        raise StepError(
            f"{where}: {len(filled.spans)} spans for {len(matches)} placeholders in the template"
        )
    text_cursor = template_cursor = 0
    for match, span in zip([*matches, None], [*filled.spans, None], strict=True):
        template_end = len(template) if match is None else match.start
        text_end = len(filled.text) if span is None else span.start
        if filled.text[text_cursor:text_end] != template[template_cursor:template_end]:
            raise StepError(
                f"{where}: the text at {text_cursor}-{text_end} is not the template's text at "
                f"{template_cursor}-{template_end}"
            )
        if match is not None and span is not None:
            text_cursor, template_cursor = span.end, match.end
