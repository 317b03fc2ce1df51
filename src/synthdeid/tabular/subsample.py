"""Stratified, frequency-weighted representative subsample of a table (Lorenzo et al. 2026, section 2.3).

Lorenzo et al. 2026 draw 1,000 of 4,000 synthetic rows "to compare the outputs of three
LLMs while maintaining textual diversity": completeness quartiles, then, within
each quartile, quotas by the frequency rank of the joint combination of two
clinically relevant variables (60, 60, 30, 30 rows from the 1st-4th most
frequent combinations and 70 from all others pooled: 250 per quartile).
:func:`stratified_subsample` implements it for any ``size`` as follows.

Completeness
    The number of spec variables whose value is not ``"unknown"``
    (:data:`synthdeid.tabular.spec.MISSING`) in a row.

Quartiles
    Rows are sorted by completeness, ties broken by a seeded random
    permutation, and the sorted order is cut into four consecutive groups of
    equal size (``np.array_split``: sizes differ by at most one, the larger
    groups first). This is ``pd.qcut(completeness.rank(method="first"), 4)``
    with a random instead of a positional tie-break, so it never crashes on
    ties. Quartile 1 holds the least complete rows. When completeness is
    constant (or takes fewer than four values) the four groups still exist and
    have equal shares: they are then a random partition of the tied rows, and
    the quotas below apply to each of them as in the paper.

Targets
    Each quartile gets ``size // 4`` rows, and the ``size % 4`` remaining rows
    go one each to quartiles 1, 2, 3 in that order. Since the quartile sizes are
    the same split of ``len(frame)``, a target never exceeds its quartile when
    ``size < len(frame)``.

Quotas
    Within a quartile the joint combinations of the two ``strata`` variables
    are ranked by frequency (ties: by the combination's values, as strings, so
    the ranking is deterministic). ``quotas[:-1]`` are the quotas of the 1st,
    2nd, ... most frequent combinations and ``quotas[-1]`` that of all other
    combinations pooled. The quotas are scaled so they sum to the quartile's
    target: each becomes ``floor(quota * target / sum(quotas))`` and the rows
    left over go one each to the largest fractional parts (ties: the earlier
    quota first), the largest-remainder method. With ``size=1000`` and the
    default quotas this reproduces the paper's 60/60/30/30/70 exactly.

Shortfall
    A ranked combination with fewer rows than its quota gives all it has (and
    a combination rank the quartile does not reach gives none); the shortfall
    is added to the pooled quota. The pool (rows of every combination ranked
    after ``len(quotas) - 1``) is sampled uniformly, so a combination's share
    of it follows its frequency. What the pool cannot give is taken uniformly
    from the quartile's rows not yet selected (the ranked combinations' left
    overs). Every draw is without replacement, from one
    ``numpy.random.default_rng(seed)``, in a fixed order: the result is a
    function of the frame, the arguments and the seed.

The selected rows keep their original index (so the caller keeps record ids)
and their original order. ``size >= len(frame)`` keeps every row, with a note
in the stats.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from synthdeid.errors import ConfigError
from synthdeid.tabular.spec import MISSING, TableSpec

PAPER_QUOTAS = (60, 60, 30, 30, 70)
QUARTILES = 4


def completeness(frame: pd.DataFrame, spec: TableSpec) -> pd.Series:
    """Number of spec variables per row whose value is not ``"unknown"``."""
    absent = [name for name in spec.names if name not in frame.columns]
    if absent:
        raise ConfigError(f"the table lacks the spec variables {absent} (spec {spec.name!r})")
    known = frame[spec.names].astype(str).ne(MISSING)
    return known.sum(axis=1).astype(int)


def scale_quotas(quotas: Sequence[int], total: int) -> list[int]:
    """``quotas`` scaled to sum to ``total`` by the largest-remainder method (see module doc)."""
    weight = sum(quotas)
    if weight <= 0:
        raise ConfigError(f"quotas must have a positive sum, got {list(quotas)}")
    exact = [quota * total / weight for quota in quotas]
    scaled = [int(np.floor(value)) for value in exact]
    left = total - sum(scaled)
    order = sorted(range(len(quotas)), key=lambda i: (-(exact[i] - scaled[i]), i))
    for i in order[:left]:
        scaled[i] += 1
    return scaled


def _check_arguments(
    frame: pd.DataFrame,
    spec: TableSpec,
    strata: tuple[str, str],
    size: int,
    quotas: Sequence[int],
) -> tuple[int, ...]:
    if isinstance(strata, str) or len(strata) != 2:
        raise ConfigError(f"strata must name two variables, got {strata!r}")
    if strata[0] == strata[1]:
        raise ConfigError(f"strata must name two different variables, got {list(strata)}")
    unknown = [name for name in strata if name not in spec.names]
    if unknown:
        raise ConfigError(
            f"strata variables {unknown} are not in the spec {spec.name!r}; known: {spec.names}"
        )
    absent = [name for name in strata if name not in frame.columns]
    if absent:
        raise ConfigError(f"strata variables {absent} are not columns of the table")
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
        raise ConfigError(f"subsample size must be a positive integer, got {size!r}")
    if isinstance(quotas, str) or len(quotas) == 0:
        raise ConfigError("quotas must be a non-empty list of integers")
    checked = []
    for quota in quotas:
        if isinstance(quota, bool) or not isinstance(quota, (int, np.integer)) or quota < 0:
            raise ConfigError(f"quotas must be non-negative integers, got {list(quotas)}")
        checked.append(int(quota))
    if sum(checked) == 0:
        raise ConfigError(f"quotas must have a positive sum, got {checked}")
    return tuple(checked)


def _draw(rng: np.random.Generator, positions: np.ndarray, count: int) -> np.ndarray:
    """``count`` of ``positions`` without replacement (all of them when there are fewer)."""
    if count >= len(positions):
        return positions.copy()
    if count <= 0:
        return positions[:0]
    return np.sort(rng.choice(positions, size=count, replace=False))


def _quartile(
    rng: np.random.Generator,
    positions: np.ndarray,
    keys: list[tuple[str, str]],
    target: int,
    quotas: tuple[int, ...],
    strata: tuple[str, str],
) -> tuple[np.ndarray, dict[str, Any]]:
    """The rows drawn from one quartile (``positions`` into the frame) and its stats."""
    by_combination: dict[tuple[str, str], list[int]] = {}
    for position in positions:
        by_combination.setdefault(keys[position], []).append(int(position))
    ranking = sorted(by_combination, key=lambda key: (-len(by_combination[key]), key))
    scaled = scale_quotas(quotas, target)
    ranked_quotas, pooled_quota = scaled[:-1], scaled[-1]

    chosen: list[np.ndarray] = []
    combinations: list[dict[str, Any]] = []
    shortfall = 0
    for rank, quota in enumerate(ranked_quotas):
        if rank >= len(ranking):
            shortfall += quota
            combinations.append(
                {"rank": rank + 1, "values": None, "rows": 0, "quota": quota, "selected": 0}
            )
            continue
        key = ranking[rank]
        members = np.asarray(by_combination[key], dtype=np.int64)
        taken = _draw(rng, members, quota)
        shortfall += quota - len(taken)
        chosen.append(taken)
        combinations.append(
            {
                "rank": rank + 1,
                "values": dict(zip(strata, key, strict=True)),
                "rows": len(members),
                "quota": quota,
                "selected": len(taken),
            }
        )
    pooled_keys = ranking[len(ranked_quotas) :]
    pooled = np.asarray(
        sorted(p for key in pooled_keys for p in by_combination[key]), dtype=np.int64
    )
    pooled_want = pooled_quota + shortfall
    pooled_taken = _draw(rng, pooled, pooled_want)
    chosen.append(pooled_taken)
    still_short = pooled_want - len(pooled_taken)
    picked = np.concatenate(chosen) if chosen else np.empty(0, dtype=np.int64)
    leftover = np.setdiff1d(positions, picked)
    topped_up = _draw(rng, leftover, still_short)
    picked = np.sort(np.concatenate([picked, topped_up]))

    picked_set = set(picked.tolist())
    for entry in combinations:
        if entry["values"] is not None:
            key = tuple(entry["values"][name] for name in strata)
            entry["selected"] = sum(p in picked_set for p in by_combination[key])
    stats = {
        "rows": len(positions),
        "target": target,
        "selected": len(picked),
        "combinations_total": len(ranking),
        "ranked": combinations,
        "pooled": {
            "combinations": len(pooled_keys),
            "rows": len(pooled),
            "quota": pooled_quota,
            "quota_with_shortfall": pooled_want,
            "selected": len(pooled_taken),
        },
        "shortfall_from_ranked": shortfall,
        "from_leftover": len(topped_up),
    }
    return picked, stats


def stratified_subsample(
    frame: pd.DataFrame,
    spec: TableSpec,
    *,
    strata: tuple[str, str],
    size: int,
    quotas: Sequence[int] = PAPER_QUOTAS,
    seed: int,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """``size`` rows of ``frame`` drawn by completeness quartile and strata frequency.

    See the module docstring for the definitions. Returns the selected rows
    (original index and order kept) and JSON-ready stats: per quartile its
    completeness range, row count, target and, per ranked combination and for
    the pool, the quota and the realized count.
    """
    checked = _check_arguments(frame, spec, strata, size, quotas)
    scores = completeness(frame, spec)
    stats: dict[str, Any] = {
        "rows": len(frame),
        "size": int(size),
        "strata": list(strata),
        "quotas": list(checked),
        "seed": int(seed),
    }
    if size >= len(frame):
        stats.update(
            selected=len(frame),
            note=f"size {size} >= {len(frame)} rows: every row is kept",
            quartiles=[],
        )
        return frame.copy(), stats

    rng = np.random.default_rng(seed)
    tie_break = rng.permutation(len(frame))
    order = np.lexsort((tie_break, scores.to_numpy()))
    groups = np.array_split(order, QUARTILES)
    base, extra = divmod(int(size), QUARTILES)
    keys = list(
        zip(
            frame[strata[0]].astype(str).tolist(),
            frame[strata[1]].astype(str).tolist(),
            strict=True,
        )
    )
    selected: list[np.ndarray] = []
    quartiles: list[dict[str, Any]] = []
    for index, group in enumerate(groups):
        target = base + (1 if index < extra else 0)
        positions = np.sort(group)
        picked, quartile_stats = _quartile(rng, positions, keys, target, checked, strata)
        values = scores.to_numpy()[positions]
        quartiles.append(
            {
                "quartile": index + 1,
                "completeness": [int(values.min()), int(values.max())] if len(values) else None,
                **quartile_stats,
            }
        )
        selected.append(picked)
    chosen = np.sort(np.concatenate(selected))
    stats.update(selected=len(chosen), quartiles=quartiles)
    return frame.iloc[chosen], stats
