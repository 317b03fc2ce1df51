"""Versioned prompts for template synthesis (resources/prompts/*.yaml).

A prompt file holds a system message, a user message with ``$name``
substitutions (Python :class:`string.Template`, so JSON braces need no
escaping) and named *variants*. A variant says what to ask for (its
instruction), which placeholders the answer may use and what it must contain:

* ``expect: placeholders``: at least one placeholder (a PII-bearing note);
* ``expect: repetition``: some placeholder used at least twice;
* ``expect: none``: no placeholder at all (a no-PII note);
* ``expect: any``: either (the seed itself, backend ``none``; not for files).

``$required`` renders the placeholders an answer written by construction must
carry, in order (:meth:`Variant.required_placeholders`); a request's
decoding constraint (``generation.constrain``) is one of :data:`CONSTRAINTS`.

The file's name, version and content hash travel into every pool's provenance.
"""

from __future__ import annotations

import hashlib
import random
import string
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from synthdeid.errors import ConfigError, InputError
from synthdeid.llm.base import ChatMessage, ChatRequest
from synthdeid.llm.constraints import NoteShape
from synthdeid.synthesis.placeholders import PlaceholderAllowlist, iter_placeholders

EXPECTATIONS = ("placeholders", "repetition", "none")
SEED_VARIANT = "seed"
SUBSTITUTIONS = ("note", "words", "placeholders", "instruction", "required")
# decoding constraints a template request may carry (see synthdeid.llm.constraints)
CONSTRAINTS = ("free", "json", "placeholders")


@dataclass(frozen=True)
class Variant:
    """What one kind of request asks for and what a valid answer must contain."""

    name: str
    instruction: str
    placeholders: tuple[str, ...]  # allowed names; empty when expect == "none"
    expect: str

    @property
    def pii(self) -> bool:
        """Whether answers must carry identifiers (``any``: the seed decides)."""
        return self.expect != "none"

    def required_placeholders(
        self, masked_note: str, stand_in: str | None = None
    ) -> tuple[str, ...]:
        """The placeholders an answer written by construction carries, in order.

        The seed's placeholders that this variant allows, repeats kept; when
        there are none but the variant expects some, one of ``stand_in``
        (see :meth:`stand_in`; default the variant's first name), e.g.
        ``[[DATE_1]]``; for ``repetition`` without a repeat, the first again
        at the end; nothing for ``expect: none``.
        """
        if self.expect == "none" or not self.placeholders:
            return ()
        if stand_in is not None and stand_in not in self.placeholders:
            raise ConfigError(f"variant {self.name!r} does not allow the placeholder {stand_in!r}")
        allowed = set(self.placeholders)
        found = [m.token for m in iter_placeholders(masked_note) if m.name in allowed]
        if not found:
            found = [f"[[{stand_in or self.placeholders[0]}_1]]"]
        if self.expect == "repetition" and len(set(found)) == len(found):
            found.append(found[0])
        return tuple(found)

    def stand_in(self, mix: Mapping[str, int], seed: int) -> str | None:
        """The placeholder a seed without any of this variant's gets, drawn by ``seed``.

        Drawn from ``mix`` (:func:`placeholder_mix` of the seeds) restricted to
        the variant's names, so a pool of such rewrites keeps the corpus's
        label mix instead of one name for all; uniform over the variant's
        names when the seeds hold none of them. None for ``expect: none``.
        """
        if self.expect == "none" or not self.placeholders:
            return None
        weights = [mix.get(name, 0) for name in self.placeholders]
        if not any(weights):
            weights = [1] * len(self.placeholders)
        return random.Random(seed).choices(self.placeholders, weights=weights)[0]


def placeholder_mix(masked_notes: Iterable[str]) -> Counter[str]:
    """How often each placeholder name occurs in ``masked_notes`` (repeats counted)."""
    return Counter(m.name for text in masked_notes for m in iter_placeholders(text))


def seed_variant(allowlist: PlaceholderAllowlist) -> Variant:
    """The pseudo-variant of backend ``none``: the masked seed is the template."""
    return Variant(SEED_VARIANT, "", allowlist.names, "any")


@dataclass(frozen=True)
class PromptSpec:
    name: str
    version: str
    fingerprint: str
    system: str
    user: str
    variants: Mapping[str, Variant]

    def provenance(self) -> dict[str, str]:
        return {"name": self.name, "version": self.version, "sha256": self.fingerprint}

    def variant(self, name: str) -> Variant:
        if name not in self.variants:
            raise ConfigError(
                f"prompt {self.name!r} has no variant {name!r}; it has {sorted(self.variants)}"
            )
        return self.variants[name]

    def instruction_texts(self) -> tuple[str, ...]:
        """The prompt's own words: the system message, the user message's text between
        substitutions and every variant's instruction, as separate pieces (what a
        model echoing its instructions would repeat; never the note)."""
        pieces = [self.system, *(v.instruction for v in self.variants.values())]
        start = 0
        for match in string.Template.pattern.finditer(self.user):
            pieces.append(self.user[start : match.start()])
            start = match.end()
        pieces.append(self.user[start:])
        return tuple(piece.strip() for piece in pieces if piece.strip())

    def render(
        self, variant: Variant, masked_note: str, stand_in: str | None = None
    ) -> tuple[ChatMessage, ...]:
        """System and user messages asking for a rewrite of ``masked_note``."""
        values = {
            "note": masked_note.strip(),
            "words": str(len(masked_note.split())),
            "placeholders": ", ".join(f"[[{name}_n]]" for name in variant.placeholders) or "none",
            "instruction": variant.instruction,
            "required": " ".join(variant.required_placeholders(masked_note, stand_in)) or "none",
        }
        return (
            ChatMessage("system", self.system.strip()),
            ChatMessage("user", string.Template(self.user).substitute(values).strip()),
        )

    def request(
        self,
        variant: Variant,
        masked_note: str,
        *,
        generation: Mapping[str, Any],
        seed: int,
        stand_in: str | None = None,
    ) -> ChatRequest:
        """The request for one rewrite; ``generation["constrain"]`` (default ``json``)
        picks the decoding constraint, one of :data:`CONSTRAINTS`; ``stand_in`` is
        the placeholder a seed without any gets (:meth:`Variant.stand_in`)."""
        constrain = generation.get("constrain", "json")
        if constrain not in CONSTRAINTS:
            raise ConfigError(
                f"generation.constrain must be one of {list(CONSTRAINTS)}, not {constrain!r}"
            )
        shape = None
        if constrain == "json":
            shape = NoteShape("note")
        elif constrain == "placeholders":
            shape = placeholder_shape(variant, masked_note, stand_in=stand_in)
        return ChatRequest(
            messages=self.render(variant, masked_note, stand_in),
            temperature=float(generation.get("temperature", 0.7)),
            top_p=float(generation.get("top_p", 0.95)),
            max_tokens=int(generation.get("max_tokens", 1024)),
            seed=seed,
            json_mode=constrain != "free",
            shape=shape,
        )


def placeholder_shape(
    variant: Variant,
    masked_note: str,
    *,
    stand_in: str | None = None,
    ratio: float = 1.5,
    slack: int = 40,
    min_ratio: float = 0.6,
) -> NoteShape:
    """The placeholder-constrained answer shape for a rewrite of ``masked_note``.

    The note carries :meth:`Variant.required_placeholders` in order; each free
    segment holds at least ``min_ratio`` and at most ``ratio`` times the
    seed's text it stands for (plus ``slack`` characters at most): the seed's
    own segment when the placeholders are the seed's, else an even share of
    the seed. The bounds keep a note within the validator's length ratio
    (0.5-2 times the seed's words by default), so that a model that would stop
    after a line goes on and one that would ramble moves on.
    """
    required = variant.required_placeholders(masked_note, stand_in)
    text = masked_note.strip()
    found = list(iter_placeholders(text))
    if tuple(m.token for m in found) == required:
        ends = [0, *(e for m in found for e in (m.start, m.end)), len(text)]
        lengths = [ends[i + 1] - ends[i] for i in range(0, len(ends), 2)]
    else:
        free = len(text) - sum(m.end - m.start for m in found)
        lengths = [free // (len(required) + 1)] * (len(required) + 1)
    highs = tuple(int(ratio * n) + slack for n in lengths)
    lows = tuple(int(min_ratio * n) for n in lengths)
    return NoteShape("note", required, max_chars=highs, min_chars=lows)


def _variant(name: str, entry: Any, allowlist: PlaceholderAllowlist, source: str) -> Variant:
    record = f"variant {name!r}"
    if not isinstance(entry, Mapping) or set(entry) != {"instruction", "placeholders", "expect"}:
        raise InputError(source, record, "expected the keys instruction, placeholders, expect")
    expect = entry["expect"]
    if expect not in EXPECTATIONS:
        raise InputError(source, record, f"expect must be one of {EXPECTATIONS}, got {expect!r}")
    allowed = entry["placeholders"]
    if allowed == "all":
        names: Sequence[str] = allowlist.names
    elif allowed == "none":
        names = ()
    elif isinstance(allowed, list) and all(isinstance(a, str) for a in allowed):
        unknown = sorted(set(allowed) - set(allowlist.names))
        if unknown:
            raise InputError(source, record, f"placeholders {unknown} are not allowlisted")
        names = allowed
    else:
        raise InputError(source, record, "placeholders must be 'all', 'none' or a list of names")
    if (expect == "none") != (len(names) == 0):
        raise InputError(source, record, "expect 'none' goes with placeholders 'none' only")
    return Variant(name, str(entry["instruction"]).strip(), tuple(names), expect)


def load_prompt(path: str | Path, allowlist: PlaceholderAllowlist) -> PromptSpec:
    """Read and check a prompt file; every substitution in ``user`` must be known."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"prompt file {path} does not exist")
    raw = path.read_bytes()
    try:
        data = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise InputError(path, None, f"not valid YAML: {exc}") from exc
    required = {"name", "version", "system", "user", "variants"}
    if not isinstance(data, Mapping) or not required <= set(data):
        raise InputError(path, None, f"a prompt file needs the keys {sorted(required)}")
    identifiers = {
        m.group("named") or m.group("braced")
        for m in string.Template.pattern.finditer(data["user"])
        if m.group("named") or m.group("braced")
    }
    unknown = sorted(identifiers - set(SUBSTITUTIONS))
    if unknown:
        raise InputError(path, "user", f"unknown substitutions {unknown}; known: {SUBSTITUTIONS}")
    variants = data["variants"]
    if not isinstance(variants, Mapping) or not variants:
        raise InputError(path, "variants", "expected a non-empty mapping of variants")
    return PromptSpec(
        name=str(data["name"]),
        version=str(data["version"]),
        fingerprint=hashlib.sha256(raw).hexdigest()[:16],
        system=str(data["system"]),
        user=str(data["user"]),
        variants={
            name: _variant(name, entry, allowlist, str(path)) for name, entry in variants.items()
        },
    )
