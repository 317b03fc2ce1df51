"""Compact hashed sets: stable hashes, membership and values across merges, memory."""

from __future__ import annotations

import random
import subprocess
import sys
import tracemalloc

import numpy as np
import pytest

from synthdeid import hashset
from synthdeid.hashset import HashMap, HashSet, hash64


@pytest.fixture
def small_buffer(monkeypatch: pytest.MonkeyPatch) -> None:
    """Merge after every few keys, so a few hundred keys go through many sorted runs."""
    monkeypatch.setattr(hashset, "MIN_BUFFER", 5)
    monkeypatch.setattr(hashset, "BUFFER_SHARE", 4)


def test_hashes_are_fixed_values() -> None:
    # the same in every run and process: these numbers must never change
    assert hash64("n1", domain=b"note id") == 10243474919758286385
    assert hash64("", domain=b"note id") == 826529185929653068
    assert hash64("p1", "dr. ames", domain=b"surface") == 12769177433767323220
    assert hash64("é", domain=b"x") == 12543735203280598313


def test_hashes_do_not_depend_on_the_process_hash_seed() -> None:
    code = "from synthdeid.hashset import hash64; print(hash64('n1', domain=b'note id'))"
    for seed in ("1", "2"):
        result = subprocess.run(
            [sys.executable, "-c", code],
            env={"PYTHONHASHSEED": seed, "PYTHONPATH": hashset.__file__.rsplit("/", 2)[0]},
            capture_output=True,
            text=True,
            check=True,
        )
        assert int(result.stdout) == hash64("n1", domain=b"note id")


def test_parts_and_domains_are_kept_apart() -> None:
    assert hash64("ab", "c", domain=b"d") != hash64("a", "bc", domain=b"d")
    assert hash64("abc", domain=b"d") != hash64("ab", "c", domain=b"d")
    assert hash64("a", domain=b"d") != hash64("a", domain=b"e")
    assert hash64("\ud800", domain=b"d") != hash64("", domain=b"d")  # a lone surrogate hashes


def test_empty() -> None:
    for table in (HashSet(), HashMap()):
        assert len(table) == 0
        assert 5 not in table
        assert table.contains_many(np.array([1, 2], dtype=np.uint64)).tolist() == [False, False]
    assert HashSet().keys().tolist() == []
    assert HashMap().get(5) is None
    keys, values = HashMap().items()
    assert keys.tolist() == values.tolist() == []


def test_repeats_count_once_and_the_first_value_stays() -> None:
    table, values = HashSet(), HashMap()
    for value in range(10):
        table.add(7)
        values.add(7, value)
    assert len(table) == len(values) == 1
    assert values.get(7) == 0
    values.add(7, 99)  # after a merge too
    assert values.get(7) == 0 and len(values) == 1
    queries = np.array([7, 7, 8], dtype=np.uint64)
    assert table.contains_many(queries).tolist() == values.contains_many(queries).tolist()
    assert table.contains_many(queries).tolist() == [True, True, False]


def test_the_full_range_of_keys_and_values() -> None:
    table = HashMap()
    top = 2**64 - 1
    for key in (0, 2**63 - 1, 2**63, top):
        table.add(key, top - key)
    assert len(table) == 4
    for key in (0, 2**63 - 1, 2**63, top):
        assert table.get(key) == top - key
    assert 1 not in table and 2**63 + 1 not in table


@pytest.mark.usefixtures("small_buffer")
def test_many_sorted_runs_agree_with_a_python_set() -> None:
    rng = random.Random(5)
    table, values, expected = HashSet(), HashMap(), {}
    for number in range(3000):
        key = rng.getrandbits(64) if number % 3 else rng.getrandbits(7)  # many repeats
        table.add(key)
        values.add(key, number)
        expected.setdefault(key, number)
        if number % 500 == 0:  # lookups between merges see the buffer and the runs
            assert all(k in table and values.get(k) == v for k, v in expected.items())
    assert len(table) == len(values) == len(expected)
    assert table.keys().tolist() == sorted(expected)
    keys, stored = values.items()
    assert dict(zip(keys.tolist(), stored.tolist(), strict=True)) == expected
    absent = [rng.getrandbits(64) for _ in range(500)]
    assert not any(key in table or key in values for key in absent if key not in expected)


def test_merged_arrays_are_read_only() -> None:
    table = HashSet()
    table.add(3)
    with pytest.raises(ValueError):
        table.keys()[0] = 4


@pytest.mark.parametrize(("kind", "bytes_a_key"), [(HashSet, 8), (HashMap, 16)])
def test_memory_is_a_fixed_number_of_bytes_a_key(kind: type, bytes_a_key: int) -> None:
    count = 50_000
    tracemalloc.start()
    try:
        table = kind()
        for number in range(count):
            key = hash64(str(number), domain=b"test")
            table.add(key) if kind is HashSet else table.add(key, number)
        assert len(table) == count  # merges the buffer
        used = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert used / count < bytes_a_key + 0.1
