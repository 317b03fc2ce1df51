"""Versioned prompts for template synthesis (resources/prompts/*.yaml).

A prompt file holds a system message, a user message with ``$name``
substitutions (Python :class:`string.Template`, so JSON braces need no
escaping) and named *variants*. A variant says what to ask for (its
instruction), which placeholders the answer may use and what it must contain:

* ``expect: placeholders``: at least one placeholder (a PII-bearing note);
* ``expect: repetition``: some placeholder used at least twice;
* ``expect: none``: no placeholder at all (a no-PII note);
* ``expect: any``: either (the seed itself, backend ``none``; not for files).

The file's name, version and content hash travel into every pool's provenance.
"""

from __future__ import annotations

import hashlib
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from synthdeid.errors import ConfigError, InputError
from synthdeid.llm.base import ChatMessage, ChatRequest
from synthdeid.synthesis.placeholders import PlaceholderAllowlist

EXPECTATIONS = ("placeholders", "repetition", "none")
SEED_VARIANT = "seed"
SUBSTITUTIONS = ("note", "words", "placeholders", "instruction")


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

    def render(self, variant: Variant, masked_note: str) -> tuple[ChatMessage, ...]:
        """System and user messages asking for a rewrite of ``masked_note``."""
        values = {
            "note": masked_note.strip(),
            "words": str(len(masked_note.split())),
            "placeholders": ", ".join(f"[[{name}_n]]" for name in variant.placeholders) or "none",
            "instruction": variant.instruction,
        }
        return (
            ChatMessage("system", self.system.strip()),
            ChatMessage("user", string.Template(self.user).substitute(values).strip()),
        )

    def request(
        self, variant: Variant, masked_note: str, *, generation: Mapping[str, Any], seed: int
    ) -> ChatRequest:
        return ChatRequest(
            messages=self.render(variant, masked_note),
            temperature=float(generation.get("temperature", 0.7)),
            top_p=float(generation.get("top_p", 0.95)),
            max_tokens=int(generation.get("max_tokens", 1024)),
            seed=seed,
            json_mode=True,
        )


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
