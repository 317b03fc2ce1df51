"""Token and cost ledger for LLM teachers (SHIELD, appendix E).

:func:`build_ledger` turns per-note token use (:class:`NoteUsage`) into a
JSON-ready ledger of what a teacher run used and cost, and what labelling a
whole corpus would cost. The rules:

* **Measured.** A note has counts when the backend reported both its input
  and its output tokens. Totals, per-note means and per-character rates under
  ``measured`` come from those notes only (their characters only).
* **Estimated.** A note without both counts (a note with only one is treated
  as having none, and counted in ``partial_counts``) is estimated: input
  tokens = characters / ``chars_per_token`` (the 4-characters-per-token rule
  of thumb by default); output tokens = the measured output tokens per input
  token x those input tokens, or ``None`` when nothing was measured.
  Estimates are reported under ``estimated``, never added silently to the
  measured figures; ``total`` adds the two and says how many notes were
  estimated.
* **Cost** (with :class:`Pricing`): tokens x price per million tokens, for
  input, output and their sum (:func:`projected_cost`), for the measured part,
  the estimated part and the total. A cost whose tokens are unknown is ``None``.
* **Projection** (with :class:`Projection`):

  * ``corpus_notes`` N: tokens = measured mean tokens per note x N; without
    measured notes, input = mean characters per note / ``chars_per_token`` x
    N (``basis`` ``chars_per_token``) and output ``None``;
  * ``corpus_characters`` C: input tokens = C x measured input tokens per
    character, or C / ``chars_per_token`` without measured counts (``basis``
    ``chars_per_token``, as in SHIELD's 633 billion characters -> 158
    billion tokens); output tokens = C x measured output tokens per
    character, or ``None`` without measured counts.

  Each projection carries its cost when pricing is given.
* No notes give a ledger of zeros and ``None``, not an error.

Every figure derives from a few sums over the notes (:class:`UsageTotals`),
so the ledgers of a run's shards merge exactly (:func:`merge_ledgers`): their
sums added, the means, rates, costs and projections recomputed, never added.

SHIELD's tables are reproduced by this arithmetic: 13,000 notes of 1,000
input and 500 output tokens at $0.15 / $1.25 per million cost $1.95 + $8.125
= $10.075 (Table 14, $10.08 rounded).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, astuple, dataclass
from typing import Any

from synthdeid.errors import ConfigError

PER_MILLION = 1_000_000.0
BASIS_MEASURED = "measured"
BASIS_CHARS_PER_TOKEN = "chars_per_token"


def _check_number(name: str, value: object, *, positive: bool) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        raise ConfigError(f"{name} must be a number, not {value!r}")
    if math.isinf(value):
        raise ConfigError(f"{name} must be finite, not {value!r}")
    if positive and value <= 0:
        raise ConfigError(f"{name} must be positive, not {value!r}")
    if value < 0:
        raise ConfigError(f"{name} must not be negative, not {value!r}")


@dataclass(frozen=True)
class Pricing:
    """Price per million input and output tokens."""

    input_per_million: float
    output_per_million: float
    currency: str = "USD"

    def __post_init__(self) -> None:
        _check_number("pricing 'input_per_million'", self.input_per_million, positive=False)
        _check_number("pricing 'output_per_million'", self.output_per_million, positive=False)
        if not isinstance(self.currency, str) or not self.currency:
            raise ConfigError(
                f"pricing 'currency' must be a non-empty string, not {self.currency!r}"
            )


@dataclass(frozen=True)
class Projection:
    """Corpus size to project the cost onto: notes, characters, either, both or neither."""

    corpus_notes: int | None = None
    corpus_characters: int | None = None

    def __post_init__(self) -> None:
        for key in ("corpus_notes", "corpus_characters"):
            value = getattr(self, key)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"projection {key!r} must be a positive integer, not {value!r}")


@dataclass(frozen=True)
class NoteUsage:
    """Characters of one note and the tokens the backend reported for it (None: not reported)."""

    note_id: str
    characters: int
    input_tokens: int | None
    output_tokens: int | None

    def __post_init__(self) -> None:
        for key in ("characters", "input_tokens", "output_tokens"):
            value = getattr(self, key)
            if value is not None and value < 0:
                raise ValueError(f"note {self.note_id!r}: {key} must not be negative, not {value}")

    @property
    def has_counts(self) -> bool:
        return self.input_tokens is not None and self.output_tokens is not None


def projected_cost(input_tokens: float, output_tokens: float, pricing: Pricing) -> dict[str, float]:
    """Cost of the tokens at ``pricing``: ``{"input", "output", "total"}``."""
    input_cost = input_tokens * pricing.input_per_million / PER_MILLION
    output_cost = output_tokens * pricing.output_per_million / PER_MILLION
    return {"input": input_cost, "output": output_cost, "total": input_cost + output_cost}


def _cost(
    input_tokens: float | None, output_tokens: float | None, pricing: Pricing | None
) -> dict[str, float | None] | None:
    """Cost where pricing is given; an unknown token count gives an unknown cost."""
    if pricing is None:
        return None
    both = projected_cost(input_tokens or 0.0, output_tokens or 0.0, pricing)
    return {
        "input": None if input_tokens is None else both["input"],
        "output": None if output_tokens is None else both["output"],
        "total": None if input_tokens is None or output_tokens is None else both["total"],
    }


def _ratio(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator else None


def _times(rate: float | None, amount: float) -> float | None:
    return None if rate is None else rate * amount


@dataclass(frozen=True)
class UsageTotals:
    """The sums a ledger is computed from. They add up over notes, so over shards:
    the ledger of several disjoint sets of notes is that of their summed totals."""

    measured_notes: int
    measured_input: int
    measured_output: int
    measured_characters: int
    estimated_notes: int
    partial_counts: int
    estimated_characters: int

    @classmethod
    def of(cls, usages: Sequence[NoteUsage]) -> UsageTotals:
        measured = [u for u in usages if u.has_counts]
        estimated = [u for u in usages if not u.has_counts]
        return cls(
            measured_notes=len(measured),
            measured_input=sum(u.input_tokens or 0 for u in measured),
            measured_output=sum(u.output_tokens or 0 for u in measured),
            measured_characters=sum(u.characters for u in measured),
            estimated_notes=len(estimated),
            partial_counts=sum(
                1 for u in estimated if (u.input_tokens is None) != (u.output_tokens is None)
            ),
            estimated_characters=sum(u.characters for u in estimated),
        )

    @classmethod
    def of_ledger(cls, ledger: Mapping[str, Any]) -> UsageTotals:
        """The totals a ledger written by :func:`build_ledger` was computed from."""
        measured, estimated = ledger["measured"], ledger["estimated"]
        return cls(
            measured_notes=measured["notes"],
            measured_input=measured["input_tokens"],
            measured_output=measured["output_tokens"],
            measured_characters=measured["characters"],
            estimated_notes=estimated["notes"],
            partial_counts=estimated["partial_counts"],
            estimated_characters=estimated["characters"],
        )

    def __add__(self, other: UsageTotals) -> UsageTotals:
        return UsageTotals(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))


def build_ledger(
    usages: Sequence[NoteUsage],
    pricing: Pricing | None,
    projection: Projection,
    chars_per_token: float = 4.0,
) -> dict[str, Any]:
    """A JSON-ready ledger of the run's tokens and cost and of the projected corpus cost."""
    return ledger_of_totals(UsageTotals.of(usages), pricing, projection, chars_per_token)


def merge_ledgers(ledgers: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The ledger of the notes of several ledgers (the shards of one run): their totals
    added, every mean, rate, cost and projection recomputed from the sums.

    ConfigError unless they share pricing, projection and ``chars_per_token``.
    """
    settings = [
        (ledger["pricing"], ledger["chars_per_token"], _projection_of(ledger)) for ledger in ledgers
    ]
    if any(other != settings[0] for other in settings[1:]):
        raise ConfigError(
            "shard ledgers differ in pricing, projection or chars_per_token: "
            "the shards were run with different teacher settings"
        )
    pricing, chars_per_token, projection = settings[0]
    totals = sum((UsageTotals.of_ledger(ledger) for ledger in ledgers), UsageTotals.of([]))
    return ledger_of_totals(
        totals, None if pricing is None else Pricing(**pricing), projection, chars_per_token
    )


def _projection_of(ledger: Mapping[str, Any]) -> Projection:
    notes, characters = (ledger["projection"][key] for key in ("corpus_notes", "corpus_characters"))
    return Projection(
        corpus_notes=None if notes is None else notes["notes"],
        corpus_characters=None if characters is None else characters["characters"],
    )


def ledger_of_totals(
    totals: UsageTotals,
    pricing: Pricing | None,
    projection: Projection,
    chars_per_token: float = 4.0,
) -> dict[str, Any]:
    """The ledger (:func:`build_ledger`) of the notes whose sums are ``totals``."""
    _check_number("chars_per_token", chars_per_token, positive=True)
    m_notes, e_notes = totals.measured_notes, totals.estimated_notes
    m_input, m_output = totals.measured_input, totals.measured_output
    m_chars = totals.measured_characters
    mean_input = _ratio(m_input, m_notes)
    mean_output = _ratio(m_output, m_notes)
    input_per_char = _ratio(m_input, m_chars)
    output_per_char = _ratio(m_output, m_chars)
    output_per_input = _ratio(m_output, m_input)
    measured = {
        "notes": m_notes,
        "input_tokens": m_input,
        "output_tokens": m_output,
        "characters": m_chars,
        "mean_input_tokens_per_note": mean_input,
        "mean_output_tokens_per_note": mean_output,
        "input_tokens_per_character": input_per_char,
        "output_tokens_per_character": output_per_char,
    }

    e_chars = totals.estimated_characters
    e_input = e_chars / chars_per_token
    e_output = _times(output_per_input, e_input) if e_notes else 0.0
    estimated = {
        "notes": e_notes,
        "partial_counts": totals.partial_counts,
        "characters": e_chars,
        "input_tokens": e_input,
        "output_tokens": e_output,
        "input_basis": BASIS_CHARS_PER_TOKEN,
        "output_basis": "measured_output_per_input_token" if output_per_input is not None else None,
    }
    notes = m_notes + e_notes
    total = {
        "notes": notes,
        "estimated_notes": e_notes,
        "input_tokens": m_input + e_input,
        "output_tokens": None if e_output is None else m_output + e_output,
    }
    cost: dict[str, Any] | None = None
    if pricing is not None:
        cost = {
            "currency": pricing.currency,
            **(_cost(total["input_tokens"], total["output_tokens"], pricing) or {}),
            "measured": _cost(m_input, m_output, pricing),
            "estimated": _cost(e_input, e_output, pricing),
        }

    projected: dict[str, Any] = {"corpus_notes": None, "corpus_characters": None}
    if projection.corpus_notes is not None:
        n = projection.corpus_notes
        if m_notes:
            basis: str | None = BASIS_MEASURED
            p_input = _times(mean_input, n)
            p_output = _times(mean_output, n)
        elif notes:
            basis = BASIS_CHARS_PER_TOKEN
            p_input = e_chars / notes / chars_per_token * n
            p_output = None
        else:
            basis, p_input, p_output = None, None, None
        projected["corpus_notes"] = {
            "notes": n,
            "basis": basis,
            "input_tokens": p_input,
            "output_tokens": p_output,
            "cost": _cost(p_input, p_output, pricing),
        }
    if projection.corpus_characters is not None:
        c = projection.corpus_characters
        if input_per_char is not None:
            basis = BASIS_MEASURED
            c_input = c * input_per_char
        else:
            basis = BASIS_CHARS_PER_TOKEN
            c_input = c / chars_per_token
        c_output = _times(output_per_char, c)
        projected["corpus_characters"] = {
            "characters": c,
            "basis": basis,
            "input_tokens": c_input,
            "output_tokens": c_output,
            "cost": _cost(c_input, c_output, pricing),
        }

    return {
        "notes": notes,
        "notes_with_counts": m_notes,
        "characters": m_chars + e_chars,
        "chars_per_token": float(chars_per_token),
        "pricing": None if pricing is None else asdict(pricing),
        "measured": measured,
        "estimated": estimated,
        "total": total,
        "cost": cost,
        "projection": projected,
        "assumptions": _assumptions(chars_per_token, pricing),
    }


def _assumptions(chars_per_token: float, pricing: Pricing | None) -> list[str]:
    price = (
        "no pricing given: no costs"
        if pricing is None
        else (
            f"cost = tokens x price per million: {pricing.input_per_million} {pricing.currency} "
            f"per million input tokens, {pricing.output_per_million} {pricing.currency} "
            "per million output tokens"
        )
    )
    return [
        "measured: notes for which the backend reported both input and output tokens",
        f"estimated input tokens of other notes = characters / {chars_per_token:g} "
        "(characters per token rule of thumb)",
        "estimated output tokens of other notes = measured output tokens per input token x "
        "estimated input tokens (unknown when nothing was measured)",
        price,
        "projection to N notes = measured mean tokens per note x N "
        f"(without measured notes: mean characters per note / {chars_per_token:g} x N, "
        "output unknown)",
        "projection to C characters = C x measured tokens per character "
        f"(without measured notes: input C / {chars_per_token:g}, output unknown)",
        "tokenizers differ: characters-per-token estimates may be off by about 20% "
        "for clinical text (SHIELD, appendix E)",
    ]
