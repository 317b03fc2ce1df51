"""Compact sets of strings for whole-corpus bookkeeping: 64-bit hashes in sorted arrays.

A streamed step that must remember something about every note of a corpus (a
note id, so a duplicate is refused however far apart; an original surface, so
no surrogate equals it) keeps the string's 64-bit hash instead of the string:
8 bytes an item in a sorted ``uint64`` array (:class:`HashSet`), 16 with a
64-bit value beside it (:class:`HashMap`), against 100 to 300 bytes for a
Python string in a set or dict.

Hashes (:func:`hash64`): BLAKE2b with an 8-byte digest over the parts' UTF-8
bytes, each after its length (so ``("ab", "c")`` and ``("a", "bc")`` differ),
personalised by a ``domain`` naming what is hashed. They are the same in every
run and process, unlike the built-in ``hash``, which is salted per process.

Layout: new keys wait in a Python set (a dict in :class:`HashMap`) of at most
``max(MIN_BUFFER, n // BUFFER_SHARE)`` keys; a full buffer is sorted and merged
into the sorted arrays (binary search and one insertion pass), so a corpus of
n items costs about ``BUFFER_SHARE * ln(n / (MIN_BUFFER * BUFFER_SHARE))``
merges of O(n) each. A lookup checks the buffer, then does one binary search.

Memory, measured with :mod:`tracemalloc` for 10^5 keys added one at a time
(``tests/test_hashset.py`` checks it): 8.0 bytes a key for :class:`HashSet`,
16.0 for :class:`HashMap`, once merged. The buffer adds at most 1/32 of the
keys at about 70 (set) or 110 (dict) bytes each, and a merge briefly holds
the arrays twice.

Collisions: two different strings share a hash with probability 2^-64. Among
n strings some pair does with probability at most n(n-1)/2^65 (the birthday
bound: 2.7e-4 for n = 10^8), and a lookup of a string not among n stored ones
answers "present" with probability at most n/2^64 (5.4e-12 for n = 10^8), so
q such lookups err with probability at most q*n/2^64. A user for whom a false
"present" would be wrong, not merely a redraw, confirms it exactly
(:class:`synthdeid.notes.NoteIds`).
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Sized
from typing import Protocol

import numpy as np
import numpy.typing as npt

MIN_BUFFER = 1 << 16  # keys a buffer holds before a merge, at least
BUFFER_SHARE = 32  # ... or 1/BUFFER_SHARE of the keys merged so far, if more

Keys = npt.NDArray[np.uint64]


class Digest(Protocol):
    """What :func:`update_parts` feeds: a hashlib digest."""

    def update(self, data: bytes, /) -> None: ...


def update_parts(digest: Digest, *parts: str) -> None:
    """Feed ``parts`` to a hashlib digest, each length-prefixed (so no two sequences of
    parts feed the same bytes)."""
    for part in parts:
        data = part.encode("utf-8", "surrogatepass")  # a lone surrogate from JSON hashes too
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)


def hash64(*parts: str, domain: bytes) -> int:
    """The 64-bit hash of ``parts`` in ``domain`` (at most 16 bytes), stable across runs."""
    digest = hashlib.blake2b(digest_size=8, person=domain)
    update_parts(digest, *parts)
    return int.from_bytes(digest.digest(), "little")


def _positions(keys: Keys, queries: Keys) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.bool_]]:
    """Where each query would go in the sorted ``keys``, and whether it is already there."""
    at = np.searchsorted(keys, queries)
    found = np.zeros(len(queries), dtype=bool)
    inside = at < len(keys)
    found[inside] = keys[at[inside]] == queries[inside]
    return at, found


def _read_only(array: Keys) -> Keys:
    view = array.view()
    view.flags.writeable = False
    return view


class _SortedKeys(ABC):
    """The sorted keys and the buffer of new ones that :class:`HashSet` and :class:`HashMap` share."""

    _buffer: Sized  # the keys added since the last merge

    def __init__(self) -> None:
        self._keys: Keys = np.empty(0, dtype=np.uint64)

    def __len__(self) -> int:
        self._merge()
        return len(self._keys)

    def contains_many(self, keys: Keys) -> npt.NDArray[np.bool_]:
        """Whether each of ``keys`` (any order, repeats allowed) is present."""
        self._merge()
        return _positions(self._keys, np.asarray(keys, dtype=np.uint64))[1]

    def _index(self, key: int) -> int | None:
        """Where ``key`` lies among the merged keys, if it is there."""
        at = int(self._keys.searchsorted(np.uint64(key)))  # a Python int compares as a float
        return at if at < len(self._keys) and int(self._keys[at]) == key else None

    def _merge_if_full(self) -> None:
        if len(self._buffer) >= max(MIN_BUFFER, len(self._keys) // BUFFER_SHARE):
            self._merge()

    @abstractmethod
    def _merge(self) -> None:
        """Sort the buffered keys into the merged arrays and empty the buffer."""

    def _merge_sorted(self, keys: Keys) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.bool_]]:
        """Insert the sorted, distinct ``keys`` not yet present: where, and which were new."""
        at, found = _positions(self._keys, keys)
        new = ~found
        self._keys = np.insert(self._keys, at[new], keys[new])
        return at[new], new


class HashSet(_SortedKeys):
    """A set of 64-bit keys (see the module's docstring): 8 bytes a key."""

    def __init__(self) -> None:
        super().__init__()
        self._buffer: set[int] = set()

    def __contains__(self, key: int) -> bool:
        return key in self._buffer or self._index(key) is not None

    def add(self, key: int) -> None:
        self._buffer.add(key)
        self._merge_if_full()

    def keys(self) -> Keys:
        """Every key, sorted (a read-only view)."""
        self._merge()
        return _read_only(self._keys)

    def _merge(self) -> None:
        if self._buffer:
            keys = np.fromiter(self._buffer, dtype=np.uint64, count=len(self._buffer))
            self._buffer = set()
            keys.sort()
            self._merge_sorted(keys)


class HashMap(_SortedKeys):
    """64-bit keys, each with a 64-bit value (the first one added): 16 bytes a key."""

    def __init__(self) -> None:
        super().__init__()
        self._values: Keys = np.empty(0, dtype=np.uint64)
        self._buffer: dict[int, int] = {}

    def __contains__(self, key: int) -> bool:
        return self.get(key) is not None

    def get(self, key: int) -> int | None:
        """The value of ``key``, or None if it was never added."""
        at = self._index(key)  # first: a merged key's value came before any buffered one
        return self._buffer.get(key) if at is None else int(self._values[at])

    def add(self, key: int, value: int) -> None:
        """Map ``key`` to ``value`` unless it has a value already (the first one stays)."""
        self._buffer.setdefault(key, value)
        self._merge_if_full()

    def items(self) -> tuple[Keys, Keys]:
        """Every key, sorted, and its value (read-only views)."""
        self._merge()
        return _read_only(self._keys), _read_only(self._values)

    def _merge(self) -> None:
        if not self._buffer:
            return
        count = len(self._buffer)
        keys = np.fromiter(self._buffer.keys(), dtype=np.uint64, count=count)
        values = np.fromiter(self._buffer.values(), dtype=np.uint64, count=count)
        self._buffer = {}
        order = np.argsort(keys)
        keys, values = keys[order], values[order]
        at, new = self._merge_sorted(keys)  # a key merged before keeps its first value
        self._values = np.insert(self._values, at, values[new])
