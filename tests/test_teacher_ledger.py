"""Token and cost ledger: SHIELD's appendix E tables, estimates kept apart, projections."""

from __future__ import annotations

import json
from collections.abc import Callable
from itertools import pairwise

import pytest

from synthdeid.errors import ConfigError
from synthdeid.teacher.ledger import (
    NoteUsage,
    Pricing,
    Projection,
    build_ledger,
    merge_ledgers,
    projected_cost,
)

FLASH_BATCH = Pricing(input_per_million=0.15, output_per_million=1.25)


def seed_run(notes: int = 13_000) -> list[NoteUsage]:
    """SHIELD, Table 14: ~1,000 input and ~500 output tokens per note."""
    return [NoteUsage(f"n{i}", 4_000, 1_000, 500) for i in range(notes)]


def test_projected_cost_arithmetic() -> None:
    assert projected_cost(2_000_000, 1_000_000, Pricing(1.0, 3.0)) == pytest.approx(
        {"input": 2.0, "output": 3.0, "total": 5.0}
    )


def test_reproduces_seed_table_14() -> None:
    ledger = build_ledger(seed_run(), FLASH_BATCH, Projection())
    assert ledger["notes"] == ledger["notes_with_counts"] == 13_000
    measured = ledger["measured"]
    assert measured["input_tokens"] == 13_000_000
    assert measured["output_tokens"] == 6_500_000
    assert measured["mean_input_tokens_per_note"] == pytest.approx(1_000)
    assert measured["mean_output_tokens_per_note"] == pytest.approx(500)
    assert measured["input_tokens_per_character"] == pytest.approx(0.25)
    assert ledger["estimated"]["notes"] == 0
    assert ledger["estimated"]["input_tokens"] == 0
    cost = ledger["cost"]
    assert cost["currency"] == "USD"
    assert cost["input"] == pytest.approx(1.95)
    assert cost["output"] == pytest.approx(8.125)
    assert cost["total"] == pytest.approx(10.075)
    assert cost["measured"]["total"] == pytest.approx(10.075)
    assert ledger["projection"] == {"corpus_notes": None, "corpus_characters": None}
    json.dumps(ledger)  # JSON-ready


def test_projection_to_corpus_notes_uses_measured_means() -> None:
    ledger = build_ledger(seed_run(10), FLASH_BATCH, Projection(corpus_notes=1_000_000))
    projected = ledger["projection"]["corpus_notes"]
    assert projected["basis"] == "measured"
    assert projected["input_tokens"] == pytest.approx(1e9)
    assert projected["output_tokens"] == pytest.approx(5e8)
    assert projected["cost"]["input"] == pytest.approx(150.0)
    assert projected["cost"]["output"] == pytest.approx(625.0)
    assert projected["cost"]["total"] == pytest.approx(775.0)


def test_projection_by_characters_without_counts_uses_chars_per_token() -> None:
    # SHIELD, Table 13: 633 billion characters at 4 characters per token -> ~158B tokens
    usages = [NoteUsage("n1", 2_000, None, None)]
    ledger = build_ledger(usages, FLASH_BATCH, Projection(corpus_characters=633_000_000_000))
    projected = ledger["projection"]["corpus_characters"]
    assert projected["basis"] == "chars_per_token"
    assert projected["input_tokens"] == pytest.approx(158.25e9)
    assert projected["output_tokens"] is None
    assert projected["cost"]["input"] == pytest.approx(23_737.5)
    assert projected["cost"]["output"] is None
    assert projected["cost"]["total"] is None


def test_projection_by_characters_with_counts_uses_measured_rates() -> None:
    # 1,000 characters -> 300 input and 100 output tokens: 0.3 and 0.1 per character
    usages = [NoteUsage("n1", 1_000, 300, 100)]
    ledger = build_ledger(usages, FLASH_BATCH, Projection(corpus_characters=10_000_000))
    projected = ledger["projection"]["corpus_characters"]
    assert projected["basis"] == "measured"
    assert projected["input_tokens"] == pytest.approx(3_000_000)
    assert projected["output_tokens"] == pytest.approx(1_000_000)
    assert projected["cost"]["total"] == pytest.approx(0.45 + 1.25)


def test_measured_and_estimated_notes_are_reported_separately() -> None:
    usages = [
        NoteUsage("a", 1_000, 200, 100),
        NoteUsage("b", 3_000, 600, 300),
        NoteUsage("c", 800, None, None),  # estimated: 200 input, 100 output
        NoteUsage("d", 400, 90, None),  # partial: estimated as if none, 100 input, 50 output
    ]
    ledger = build_ledger(usages, Pricing(1.0, 2.0, "EUR"), Projection(corpus_notes=100))
    assert ledger["notes"] == 4
    assert ledger["notes_with_counts"] == 2
    assert ledger["characters"] == 5_200
    measured = ledger["measured"]
    assert (measured["input_tokens"], measured["output_tokens"]) == (800, 400)
    assert measured["characters"] == 4_000
    assert measured["mean_input_tokens_per_note"] == pytest.approx(400)
    assert measured["output_tokens_per_character"] == pytest.approx(0.1)
    estimated = ledger["estimated"]
    assert estimated["notes"] == 2
    assert estimated["partial_counts"] == 1
    assert estimated["characters"] == 1_200
    assert estimated["input_tokens"] == pytest.approx(300)
    assert estimated["output_tokens"] == pytest.approx(150)
    total = ledger["total"]
    assert total["estimated_notes"] == 2
    assert total["input_tokens"] == pytest.approx(1_100)
    assert total["output_tokens"] == pytest.approx(550)
    cost = ledger["cost"]
    assert cost["currency"] == "EUR"
    assert cost["measured"]["total"] == pytest.approx((800 * 1.0 + 400 * 2.0) / 1e6)
    assert cost["estimated"]["total"] == pytest.approx((300 * 1.0 + 150 * 2.0) / 1e6)
    assert cost["total"] == pytest.approx((1_100 * 1.0 + 550 * 2.0) / 1e6)
    # the projection uses the measured notes only
    assert ledger["projection"]["corpus_notes"]["input_tokens"] == pytest.approx(40_000)


def test_estimated_output_unknown_without_measured_notes() -> None:
    usages = [NoteUsage("a", 1_000, None, None), NoteUsage("b", 3_000, None, None)]
    ledger = build_ledger(usages, FLASH_BATCH, Projection(corpus_notes=10), chars_per_token=2.0)
    assert ledger["notes_with_counts"] == 0
    assert ledger["measured"]["mean_input_tokens_per_note"] is None
    assert ledger["estimated"]["input_tokens"] == pytest.approx(2_000)
    assert ledger["estimated"]["output_tokens"] is None
    assert ledger["cost"]["input"] == pytest.approx(2_000 * 0.15 / 1e6)
    assert ledger["cost"]["output"] is None
    assert ledger["cost"]["total"] is None
    projected = ledger["projection"]["corpus_notes"]
    assert projected["basis"] == "chars_per_token"
    assert projected["input_tokens"] == pytest.approx(2_000 / 2 * 10)
    assert projected["output_tokens"] is None


def test_zero_notes() -> None:
    ledger = build_ledger([], FLASH_BATCH, Projection(corpus_notes=5, corpus_characters=400))
    assert ledger["notes"] == ledger["notes_with_counts"] == 0
    assert ledger["measured"]["input_tokens"] == 0
    assert ledger["measured"]["mean_input_tokens_per_note"] is None
    assert ledger["measured"]["input_tokens_per_character"] is None
    assert ledger["estimated"]["output_tokens"] == 0
    assert ledger["cost"]["total"] == 0
    assert ledger["projection"]["corpus_notes"]["input_tokens"] is None
    assert ledger["projection"]["corpus_characters"]["input_tokens"] == pytest.approx(100)
    assert build_ledger([], None, Projection())["cost"] is None
    json.dumps(ledger)


def test_no_pricing_means_no_costs() -> None:
    ledger = build_ledger(seed_run(3), None, Projection(corpus_notes=10))
    assert ledger["cost"] is None
    assert ledger["pricing"] is None
    assert ledger["projection"]["corpus_notes"]["cost"] is None
    assert ledger["assumptions"]


@pytest.mark.parametrize(
    ("build", "key"),
    [
        (lambda: Pricing(-0.1, 1.0), "input_per_million"),
        (lambda: Pricing(0.1, -1.0), "output_per_million"),
        (lambda: Pricing(0.1, float("nan")), "output_per_million"),
        (lambda: Projection(corpus_notes=0), "corpus_notes"),
        (lambda: Projection(corpus_characters=-5), "corpus_characters"),
        (lambda: build_ledger([], None, Projection(), chars_per_token=0), "chars_per_token"),
    ],
)
def test_bad_config_is_config_error(build: Callable[[], object], key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        build()


def mixed_run() -> list[NoteUsage]:
    """Measured notes, notes without counts and one with a partial count."""
    return [
        NoteUsage("a", 3_100, 812, 97),
        NoteUsage("b", 1_234, None, None),
        NoteUsage("c", 777, 201, 33),
        NoteUsage("d", 4_001, 950, None),
        NoteUsage("e", 58, 19, 5),
    ]


@pytest.mark.parametrize("cuts", [(0, 1, 3, 5), (0, 0, 2, 5), (0, 5)])
def test_merged_shard_ledgers_equal_the_ledger_of_all_notes(cuts: tuple[int, ...]) -> None:
    """Means, rates, estimates, costs and projections are recomputed from the summed totals."""
    usages = mixed_run()
    projection = Projection(corpus_notes=13_000, corpus_characters=633_000_000)
    whole = build_ledger(usages, FLASH_BATCH, projection, chars_per_token=3.5)
    shards = [
        json.loads(json.dumps(build_ledger(usages[a:b], FLASH_BATCH, projection, 3.5)))
        for a, b in pairwise(cuts)
    ]
    assert merge_ledgers(shards) == whole
    # a shard of estimated notes only has no measured means: not a sum of the shards'
    assert whole["measured"]["mean_input_tokens_per_note"] == pytest.approx((812 + 201 + 19) / 3)


def test_shard_ledgers_of_other_settings_are_refused() -> None:
    ours = build_ledger(mixed_run()[:2], FLASH_BATCH, Projection(corpus_notes=10))
    theirs = build_ledger(mixed_run()[2:], FLASH_BATCH, Projection(corpus_notes=20))
    with pytest.raises(ConfigError, match="differ in pricing, projection or chars_per_token"):
        merge_ledgers([ours, theirs])
