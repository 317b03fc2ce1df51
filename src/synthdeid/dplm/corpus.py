"""The language model's training corpus: masked seed notes with control codes (Zecevic et al., sec. 4.5).

Each training example is one note: ``<bos> <|ctl:CODE|> masked text <eos>``.
The control code says what kind of note follows, so sampling can ask for a
kind (Zecevic et al. steer report types the same way). Codes are built from
schemes, joined with ``-``:

- ``pii``: ``pii`` when the masked note has at least one placeholder,
  ``no_pii`` otherwise;
- ``length``: ``short`` or ``long``, split at the median word count of the
  training notes (the threshold is saved with the model, so sampling and
  perplexity use the training threshold).

Placeholders (``[[DOCTOR_1]]``) become added special tokens, one per
allowlisted name and number up to the largest number seen in training, so
the model emits them whole and the local fill can replace them exactly.

The privacy unit is one note: a note gives exactly one example (truncated
to the maximum length, never split into several examples), so Opacus'
per-example guarantee is a per-note guarantee.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from synthdeid.errors import ConfigError
from synthdeid.mask import PLACEHOLDER_RE
from synthdeid.synthesis.placeholders import PlaceholderAllowlist

CONTROL_SCHEMES = ("pii", "length")
CONTROL_TOKEN_RE = re.compile(r"<\|ctl:[a-z_-]+\|>")


def control_token(code: str) -> str:
    return f"<|ctl:{code}|>"


@dataclass(frozen=True)
class ControlCoder:
    """Assigns a control code to a note text."""

    schemes: tuple[str, ...] = ("pii",)
    length_threshold: int | None = None  # words; set from the training notes for ``length``

    def __post_init__(self) -> None:
        unknown = [s for s in self.schemes if s not in CONTROL_SCHEMES]
        if unknown or not self.schemes or len(set(self.schemes)) != len(self.schemes):
            raise ConfigError(
                f"control codes {list(self.schemes)}: expected a non-empty list of distinct "
                f"schemes from {list(CONTROL_SCHEMES)}"
            )
        if "length" in self.schemes and self.length_threshold is None:
            raise ConfigError("the length control code needs a threshold (fit on the notes)")

    @classmethod
    def fit(cls, schemes: Sequence[str], texts: Sequence[str]) -> ControlCoder:
        """A coder whose ``length`` threshold is the median word count of ``texts``."""
        threshold = None
        if "length" in schemes:
            if not texts:
                raise ConfigError("cannot fit the length control code on no notes")
            threshold = int(statistics.median(len(t.split()) for t in texts))
        return cls(tuple(schemes), threshold)

    def code(self, text: str) -> str:
        parts = []
        for scheme in self.schemes:
            if scheme == "pii":
                parts.append("pii" if PLACEHOLDER_RE.search(text) else "no_pii")
            else:
                assert self.length_threshold is not None
                parts.append("long" if len(text.split()) > self.length_threshold else "short")
        return "-".join(parts)

    def all_codes(self) -> list[str]:
        """Every code this coder can give, in a fixed order."""
        values = {"pii": ["pii", "no_pii"], "length": ["short", "long"]}
        codes = [""]
        for scheme in self.schemes:
            codes = [f"{c}-{v}" if c else v for c in codes for v in values[scheme]]
        return codes

    def to_json(self) -> dict[str, Any]:
        return {"schemes": list(self.schemes), "length_threshold": self.length_threshold}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ControlCoder:
        return cls(tuple(data["schemes"]), data.get("length_threshold"))


@dataclass(frozen=True)
class LmExample:
    """One training note: its id, kind (``seed``, ``canary`` or ``outlier``), control code and text."""

    example_id: str
    kind: str
    code: str
    text: str


def training_examples(
    seeds: Iterable[tuple[str, str]],
    canaries: Iterable[tuple[str, str]],
    coder: ControlCoder,
    outliers: Iterable[tuple[str, str]] = (),
) -> list[LmExample]:
    """Masked seed notes, canaries, then outliers, as ``(id, text)`` pairs, each with its code."""
    examples = [LmExample(i, "seed", coder.code(t), t) for i, t in seeds]
    examples += [LmExample(i, "canary", coder.code(t), t) for i, t in canaries]
    examples += [LmExample(i, "outlier", coder.code(t), t) for i, t in outliers]
    ids = [e.example_id for e in examples]
    if len(set(ids)) != len(ids):
        raise ConfigError(
            "training example ids are not unique (a canary or outlier id equals a note id?)"
        )
    return examples


def placeholder_tokens(allowlist: PlaceholderAllowlist, texts: Iterable[str]) -> list[str]:
    """``[[NAME_n]]`` for every allowlisted name and n up to the largest number in ``texts``."""
    largest = 1
    for text in texts:
        for match in PLACEHOLDER_RE.finditer(text):
            if match.group(1) in allowlist:
                largest = max(largest, int(match.group(2)))
    return [f"[[{name}_{n}]]" for name in allowlist.names for n in range(1, largest + 1)]


def strip_control_tokens(text: str) -> str:
    return CONTROL_TOKEN_RE.sub("", text)
