"""Stratified, frequency-weighted subsample (Lorenzo et al. 2026, section 2.3) on hand-made tables."""

from __future__ import annotations

import pandas as pd
import pytest

from synthdeid.errors import ConfigError
from synthdeid.tabular.spec import MISSING, parse_spec
from synthdeid.tabular.subsample import (
    completeness,
    scale_quotas,
    stratified_subsample,
)

SPEC = parse_spec(
    {
        "variables": [
            {"name": "a", "kind": "categorical", "categories": ["a0", "a1", "a2", "a3", "a4"]},
            {"name": "b", "kind": "categorical", "categories": ["b0", "b1"]},
            *(
                {"name": name, "kind": "categorical", "categories": ["yes"], "allow_missing": True}
                for name in ("c", "d", "e")
            ),
        ]
    },
    "test-spec",
)
STRATA = ("a", "b")
# per completeness level: (a, b, rows); the combinations' frequency ranks are their order
COMBINATIONS = [("a0", "b0", 40), ("a1", "b1", 30), ("a2", "b0", 12), ("a3", "b1", 8)]
POOL = [("a4", "b0", 6), ("a4", "b1", 4)]


def table(levels: dict[int, list[tuple[str, str, int]]]) -> pd.DataFrame:
    """Rows per completeness level (2 = only the strata known, 5 = everything known)."""
    rows = []
    for level, combinations in levels.items():
        for a, b, count in combinations:
            known = level - 2
            extra = {n: ("yes" if i < known else MISSING) for i, n in enumerate("cde")}
            rows.extend({"a": a, "b": b, **extra} for _ in range(count))
    frame = pd.DataFrame(rows)
    # a shuffled, non-default index: the subsample must keep it
    frame = frame.sample(frac=1.0, random_state=0)
    frame.index = [f"r{i}" for i in frame.index]
    return frame


def counts(frame: pd.DataFrame) -> dict[tuple[int, str, str], int]:
    levels = completeness(frame, SPEC)
    keys = zip(levels, frame["a"], frame["b"], strict=True)
    return pd.Series(list(keys)).value_counts().to_dict()


def test_scale_quotas_largest_remainder():
    assert scale_quotas((60, 60, 30, 30, 70), 250) == [60, 60, 30, 30, 70]
    assert scale_quotas((60, 60, 30, 30, 70), 25) == [6, 6, 3, 3, 7]
    # 2.4, 2.4, 1.2, 1.2, 2.8 -> floors 2, 2, 1, 1, 2; two left: to the largest fraction
    # (2.8), then to the earlier of the tied 2.4s
    assert scale_quotas((60, 60, 30, 30, 70), 10) == [3, 2, 1, 1, 3]
    assert sum(scale_quotas((1, 1, 1), 7)) == 7


def test_exact_counts_per_quartile_and_combination():
    frame = table({level: COMBINATIONS + POOL for level in (2, 3, 4, 5)})
    sample, stats = stratified_subsample(frame, SPEC, strata=STRATA, size=100, seed=1)
    assert len(sample) == 100 and stats["selected"] == 100
    assert set(sample.index) <= set(frame.index)
    assert list(sample.index) == [i for i in frame.index if i in set(sample.index)]
    realized = counts(sample)
    for level in (2, 3, 4, 5):
        for (a, b, _), quota in zip(COMBINATIONS, (6, 6, 3, 3), strict=True):
            assert realized[(level, a, b)] == quota
        pooled = sum(realized.get((level, a, b), 0) for a, b, _ in POOL)
        assert pooled == 7
    for index, quartile in enumerate(stats["quartiles"]):
        assert quartile["completeness"] == [index + 2, index + 2]
        assert quartile["target"] == quartile["selected"] == 25
        assert [c["quota"] for c in quartile["ranked"]] == [6, 6, 3, 3]
        assert [c["selected"] for c in quartile["ranked"]] == [6, 6, 3, 3]
        assert quartile["ranked"][0]["values"] == {"a": "a0", "b": "b0"}
        assert quartile["pooled"] == {
            "combinations": 2,
            "rows": 10,
            "quota": 7,
            "quota_with_shortfall": 7,
            "selected": 7,
        }
        assert quartile["from_leftover"] == 0


def test_paper_quotas_at_paper_scale():
    big = [(a, b, n * 10) for a, b, n in COMBINATIONS + POOL]  # 1,000 rows per level
    frame = table({level: big for level in (2, 3, 4, 5)})
    sample, stats = stratified_subsample(frame, SPEC, strata=STRATA, size=1000, seed=3)
    assert len(sample) == 1000
    for quartile in stats["quartiles"]:
        assert [c["selected"] for c in quartile["ranked"]] == [60, 60, 30, 30]
        assert quartile["pooled"]["selected"] == 70


def test_same_seed_same_rows_other_seed_other_rows():
    frame = table({level: COMBINATIONS + POOL for level in (2, 3, 4, 5)})
    first, stats_first = stratified_subsample(frame, SPEC, strata=STRATA, size=60, seed=7)
    again, stats_again = stratified_subsample(frame, SPEC, strata=STRATA, size=60, seed=7)
    other, _ = stratified_subsample(frame, SPEC, strata=STRATA, size=60, seed=8)
    assert list(first.index) == list(again.index)
    assert stats_first == stats_again
    assert list(first.index) != list(other.index)


def test_shortfall_goes_to_the_pool_then_to_leftover_rows():
    # ranks 3 and 4 (2 rows and 1 row) cannot fill their quotas of 3 and the pool is
    # empty: the 3 rows short plus the pool's own 7 come from the 1st and 2nd
    # combinations' left-over rows
    combinations = [("a0", "b0", 40), ("a1", "b1", 2), ("a2", "b0", 12), ("a4", "b1", 1)]
    frame = table({level: combinations for level in (2, 3, 4, 5)})
    sample, stats = stratified_subsample(frame, SPEC, strata=STRATA, size=100, seed=5)
    assert len(sample) == 100
    for quartile in stats["quartiles"]:
        ranked = quartile["ranked"]
        assert [c["values"] for c in ranked] == [
            {"a": "a0", "b": "b0"},
            {"a": "a2", "b": "b0"},
            {"a": "a1", "b": "b1"},
            {"a": "a4", "b": "b1"},
        ]
        assert [c["quota"] for c in ranked] == [6, 6, 3, 3]
        # ranks 3 and 4 have 2 and 1 rows: shortfall 1 + 2 = 3 to the (empty) pool
        assert quartile["shortfall_from_ranked"] == 3
        assert quartile["pooled"]["rows"] == 0
        assert quartile["pooled"]["quota_with_shortfall"] == 10
        assert quartile["pooled"]["selected"] == 0
        assert quartile["from_leftover"] == 10
        assert quartile["selected"] == 25
        assert sum(c["selected"] for c in ranked) == 25
        assert ranked[2]["selected"] == 2 and ranked[3]["selected"] == 1


def test_shortfall_filled_by_the_pool_first():
    # the 4th most frequent combination has 2 rows for a quota of 3; the pool (five more
    # combinations of 2 rows) gives the missing row on top of its own 7
    ranked = [("a0", "b0", 40), ("a1", "b1", 30), ("a2", "b0", 12)]
    small = [("a3", "b1", 2), ("a4", "b0", 2), ("a4", "b1", 2), ("a3", "b0", 2), ("a1", "b0", 2)]
    small.append(("a2", "b1", 2))
    frame = table({level: ranked + small for level in (2, 3, 4, 5)})
    sample, stats = stratified_subsample(frame, SPEC, strata=STRATA, size=100, seed=5)
    for quartile in stats["quartiles"]:
        fourth = quartile["ranked"][3]
        assert (fourth["rows"], fourth["quota"], fourth["selected"]) == (2, 3, 2)
        # ties in frequency rank by the combination's values
        assert fourth["values"] == {"a": "a1", "b": "b0"}
        assert quartile["shortfall_from_ranked"] == 1
        assert quartile["pooled"]["rows"] == 10
        assert quartile["pooled"]["quota_with_shortfall"] == 8
        assert quartile["pooled"]["selected"] == 8
        assert quartile["from_leftover"] == 0
    assert len(sample) == 100


def test_constant_completeness_still_gives_four_equal_quartiles():
    frame = table({5: COMBINATIONS + POOL})  # 100 rows, all complete
    sample, stats = stratified_subsample(frame, SPEC, strata=STRATA, size=20, seed=2)
    assert len(sample) == 20
    assert [q["rows"] for q in stats["quartiles"]] == [25, 25, 25, 25]
    assert [q["selected"] for q in stats["quartiles"]] == [5, 5, 5, 5]
    assert all(q["completeness"] == [5, 5] for q in stats["quartiles"])
    # the four groups partition the rows: nothing is drawn twice
    assert sample.index.is_unique


def test_remainder_goes_to_the_first_quartiles():
    frame = table({level: COMBINATIONS + POOL for level in (2, 3, 4, 5)})
    sample, stats = stratified_subsample(frame, SPEC, strata=STRATA, size=10, seed=0)
    assert [q["target"] for q in stats["quartiles"]] == [3, 3, 2, 2]
    assert [q["selected"] for q in stats["quartiles"]] == [3, 3, 2, 2]
    assert len(sample) == 10


def test_size_at_least_rows_keeps_everything():
    frame = table({3: COMBINATIONS})
    for size in (len(frame), len(frame) + 5):
        sample, stats = stratified_subsample(frame, SPEC, strata=STRATA, size=size, seed=0)
        assert list(sample.index) == list(frame.index)
        assert stats["selected"] == len(frame) and "every row" in stats["note"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"strata": ("a", "zzz")}, "zzz"),
        ({"strata": ("a", "a")}, "two different"),
        ({"size": 0}, "size"),
        ({"quotas": ()}, "quotas"),
        ({"quotas": (0, 0)}, "positive sum"),
        ({"quotas": (5, -1)}, "non-negative"),
    ],
)
def test_bad_settings_are_config_errors(kwargs, message):
    frame = table({3: COMBINATIONS})
    arguments = {"strata": STRATA, "size": 10, "seed": 0, **kwargs}
    with pytest.raises(ConfigError, match=message):
        stratified_subsample(frame, SPEC, **arguments)


def test_table_without_a_spec_variable_is_a_config_error():
    frame = table({3: COMBINATIONS}).drop(columns=["e"])
    with pytest.raises(ConfigError, match=r"\['e'\]"):
        stratified_subsample(frame, SPEC, strata=STRATA, size=10, seed=0)
