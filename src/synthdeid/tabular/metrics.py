"""Fidelity, similarity and novelty metrics for synthetic discretized (categorical) tables.

These are the three evaluation dimensions of Lorenzo et al. 2026 (section 2.2, Table 1)
used to compare tabular synthesizers. Inputs are pandas DataFrames whose
columns are all categorical (the discretized variables; a missing value is the
string ``"unknown"``), one row per record. ``train`` is the real data the
synthesizer was fitted on, ``holdout`` real data it never saw, ``synthetic``
one sample drawn from it. The frames must have the same columns (order may
differ; a :class:`ValueError` names the missing and extra ones). Values are
compared by equality only: every column of all the frames of one call is
encoded once to integer codes over a shared vocabulary (``pd.factorize``; a
NaN is a category of its own, equal to another NaN, as in SDMetrics).

Fidelity ("accuracy", Sidorenko et al. 2025, mostlyai-qa)
    For every subset of ``k`` columns (``k`` = 1, 2, 3) the joint category
    distribution of the training rows is compared with that of the synthetic
    rows: accuracy = 1 - total variation distance = 1 - 0.5 * L1 distance of
    the two relative-frequency vectors. The level score is the mean over all
    subsets of that size (or over ``max_subsets`` of them drawn with a seed,
    for wide tables). ``overall`` is the plain mean of the three levels: that
    is how Table 1 of Lorenzo et al. 2026 reads (e.g. (96.57 + 86.46 + 76.72) / 3 =
    86.58 ~ 86.59% for the Gaussian copula); mostlyai-qa's own ``overall``
    averages univariate and bivariate only. The joint distributions are
    counted from an integer key per row (mixed radix of the column codes), so
    one subset costs O(rows); the columns are already discretized, so unlike
    mostlyai-qa nothing is binned or capped to the top categories here.

Similarity (mostlyai-qa)
    Each row is rendered as a text ``"column: value; column: value"``
    (:func:`row_texts`), embedded by a caller-supplied function, and the
    cosine similarity between the centroid (mean vector) of the training rows
    and that of the synthetic rows is reported. Rows of a discretized table
    repeat a lot, so :func:`similarity` embeds every distinct text once (the
    training and synthetic texts together, in one call) and weights each
    vector by how many rows it stands for: the centroids are exactly those of
    the full row sets. Vectors are averaged as the embedder returns them.

Novelty (privacy)
    The distance between two records is the normalised Hamming distance: the
    share of columns on which they differ, in [0, 1]. On all-categorical data
    this is exactly SDMetrics' DCR distance (0/1 mismatch per categorical
    column, averaged over the columns). mostlyai-qa measures cosine distances
    between row embeddings instead; on discretized records an exact Hamming
    distance is the natural counterpart and needs no model.

    :func:`nearest_distances` is exact and bounded in memory. Query and
    reference rows are first reduced to their distinct rows (with
    multiplicities); for each distinct query row the distances to all
    distinct reference rows are computed block by block as one-hot matrix
    products (``matches = onehot(query block) @ onehot(reference).T`` in
    float32, exact for fewer than 2**24 columns; distance = 1 - matches /
    columns), with a block height chosen so that a block's distance matrix
    stays under ``max_block_bytes``. The nearest and second-nearest distances
    come from ``argmin`` and an in-place ``ndarray.partition``; if the nearest
    distinct reference row occurs at least twice, the second-nearest reference
    *row* is at the same distance (d2 = d1). Working memory is O(rows + block),
    never O(n_query * n_reference). A reference of a single row has no second
    neighbour: d2 = inf there.

    - Identical match share: share of synthetic rows equal to at least one
      training row (a hash join on the row keys, not a pairwise comparison).
    - DCR share (mostlyai-qa): share of synthetic rows whose distance to the
      closest training row is smaller than to the closest holdout row, ties
      counted as one half (mostlyai-qa computes ``mean(dcr_trn < dcr_hol) +
      mean(dcr_trn == dcr_hol) / 2``). With training and holdout sets of equal
      size the ideal value is 0.5; clearly above suggests memorisation.
      Hamming distances on a few columns tie often, which is why the halving
      of ties matters here.
    - DCR overfitting score (SDMetrics ``DCROverfittingProtection``, v0.32):
      ``closer_to_training = mean(dcr_train < dcr_holdout)`` -- strict, so a
      tie counts as *not* closer to training -- and ``score = min(1, 2 * (1 -
      closer_to_training))``. There is no correction for unequal training and
      holdout sizes (SDMetrics only warns when the holdout is smaller than half
      the training set). With ties this strict share is below the halved-ties
      DCR share, which is how Lorenzo et al. 2026 report DCR shares of 52-56% next to an
      overfitting score of 1.0 for every synthesizer: the score is 1 whenever
      at most half of the synthetic rows are strictly closer to training. Run
      without subsampling (``num_rows_subsample=None``, its default),
      SDMetrics gives the same distances, shares and score as this module on
      all-categorical tables (tested).
    - NNDR, nearest neighbour distance ratio: d1 / d2 of a row's nearest and
      second-nearest training rows, with 0 / 0 = 1 (the row equals a pattern
      shared by at least two training rows: it is not distinctive) and
      0 / d2 = 0 for d2 > 0 (it equals a single training row). The mean over
      the synthetic rows is reported next to the same mean for the holdout
      rows measured against the training rows (the level real unseen records
      reach), and ``nndr_ratio = nndr_synthetic / nndr_holdout``: near 1
      balanced, below 1 synthetic rows sit closer to training records than
      real unseen records do, above 1 they are more novel. The NNDR values in
      Table 1 of Lorenzo et al. 2026 (0.56 to 1.19, "near 1 balanced") read as
      this ratio.
      mostlyai-qa instead divides the 10th smallest synthetic-to-training NNDR
      by the 10th smallest synthetic-to-holdout NNDR; with exact Hamming
      distances on discretized records the 10th smallest ratio is almost
      always 0, so means are used here.

:func:`summarize_samples` averages one metric over the independent synthetic
samples (Lorenzo et al. 2026 draw ten per synthesizer) and reports the spread.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from synthdeid.stats import sample_sd

DEFAULT_MAX_BLOCK_BYTES = 64 * 2**20  # 64 MiB for one block of the distance matrix
FIDELITY_ORDERS = (1, 2, 3)  # univariate, bivariate, trivariate
_MAX_KEY_RANGE = 2**62  # mixed-radix keys are re-densified before they could overflow int64
_MAX_ENUMERATED_SUBSETS = 1_000_000  # above this, sampled subsets are drawn without listing all


# ---------------------------------------------------------------------------
# shared helpers: column checks, integer encoding, row keys
# ---------------------------------------------------------------------------


def check_columns(frames: Mapping[str, pd.DataFrame]) -> list[str]:
    """The common columns of ``frames`` (in the order of the first one).

    Raises :class:`ValueError` naming, for every other frame, the columns it
    lacks and the extra ones it has compared with the first frame.
    """
    if not frames:
        raise ValueError("no frames given")
    (first_name, first), *others = frames.items()
    columns = list(first.columns)
    if len(set(columns)) != len(columns):
        raise ValueError(f"{first_name} has duplicated column names")
    if not columns:
        raise ValueError(f"{first_name} has no columns")
    known = set(columns)
    problems = []
    for name, frame in others:
        missing = [c for c in columns if c not in frame.columns]
        extra = [c for c in frame.columns if c not in known]
        if missing or extra:
            problems.append(
                f"{name} does not have the columns of {first_name}: "
                f"missing {missing}, extra {extra}"
            )
    if problems:
        raise ValueError("; ".join(problems))
    return columns


def _encode(
    frames: Sequence[pd.DataFrame], columns: Sequence[str]
) -> tuple[list[np.ndarray], np.ndarray]:
    """Integer codes (rows x columns, int32) per frame over a per-column shared vocabulary.

    Returns the code matrices and the number of categories of every column.
    """
    bounds = np.cumsum([0, *(len(f) for f in frames)])
    codes = np.empty((int(bounds[-1]), len(columns)), dtype=np.int32)
    cardinalities = np.empty(len(columns), dtype=np.int64)
    for j, column in enumerate(columns):
        values = np.concatenate([f[column].to_numpy(dtype=object) for f in frames])
        column_codes, uniques = pd.factorize(values, use_na_sentinel=False)
        codes[:, j] = column_codes
        cardinalities[j] = max(len(uniques), 1)
    return [codes[bounds[i] : bounds[i + 1]] for i in range(len(frames))], cardinalities


def _combined_key(codes: np.ndarray, cardinalities: np.ndarray) -> tuple[np.ndarray, int]:
    """One int64 key per row, equal for equal rows, and the range of the keys ([0, range)).

    Mixed radix over the columns; when the next column would overflow int64
    the partial key is re-densified with ``pd.factorize`` first (hash based),
    so the cost stays linear in rows times columns.
    """
    key = np.zeros(len(codes), dtype=np.int64)
    key_range = 1
    for j in range(codes.shape[1]):
        cardinality = int(cardinalities[j])
        if key_range * cardinality >= _MAX_KEY_RANGE:
            dense, uniques = pd.factorize(key)
            key, key_range = dense.astype(np.int64), max(len(uniques), 1)
        key = key * cardinality + codes[:, j]
        key_range *= cardinality
    return key, key_range


@dataclass(frozen=True)
class _DistinctRows:
    """The distinct rows of a code matrix, which distinct row every row is, and multiplicities."""

    rows: np.ndarray  # (n_distinct, columns) codes
    inverse: np.ndarray  # (n,) index into rows
    counts: np.ndarray  # (n_distinct,) how many rows each distinct row stands for


def _distinct_rows(codes: np.ndarray, cardinalities: np.ndarray) -> _DistinctRows:
    key, _ = _combined_key(codes, cardinalities)
    inverse, uniques = pd.factorize(key)
    representative = np.empty(len(uniques), dtype=np.int64)
    representative[inverse] = np.arange(len(codes))  # any row of a group is the group's row
    counts = np.bincount(inverse, minlength=len(uniques))
    return _DistinctRows(codes[representative], inverse, counts)


# ---------------------------------------------------------------------------
# fidelity
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Fidelity:
    """Mean accuracy (1 - total variation distance) of the k-way joint distributions.

    ``trivariate`` (``bivariate``) is NaN for tables with fewer than three
    (two) columns; ``overall`` is the mean of the levels that exist.
    """

    univariate: float
    bivariate: float
    trivariate: float
    overall: float

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def _column_subsets(
    n_columns: int, k: int, max_subsets: int | None, rng: np.random.Generator
) -> list[tuple[int, ...]]:
    """All k-subsets of the columns, or ``max_subsets`` distinct ones drawn with ``rng``."""
    if k > n_columns:
        return []
    total = math.comb(n_columns, k)
    if max_subsets is None or max_subsets >= total:
        return list(itertools.combinations(range(n_columns), k))
    if total <= _MAX_ENUMERATED_SUBSETS:
        every = list(itertools.combinations(range(n_columns), k))
        picked = np.sort(rng.choice(total, size=max_subsets, replace=False))
        return [every[i] for i in picked]
    chosen: set[tuple[int, ...]] = set()
    while len(chosen) < max_subsets:  # total >> max_subsets: few rejections
        chosen.add(tuple(sorted(int(c) for c in rng.choice(n_columns, size=k, replace=False))))
    return sorted(chosen)


def _subset_accuracy(
    train: np.ndarray, synthetic: np.ndarray, cardinalities: np.ndarray, subset: tuple[int, ...]
) -> float:
    """1 - TV distance between the joint distributions of ``subset`` in the two code matrices."""
    columns = list(subset)
    both = np.concatenate([train[:, columns], synthetic[:, columns]])
    key, key_range = _combined_key(both, cardinalities[columns])
    if key_range > 4 * len(both) + 1024:  # sparse key space: count only the keys that occur
        dense, uniques = pd.factorize(key)
        key, key_range = dense, len(uniques)
    n_train = len(train)
    p = np.bincount(key[:n_train], minlength=key_range) / n_train
    q = np.bincount(key[n_train:], minlength=key_range) / len(synthetic)
    return float(1.0 - 0.5 * np.abs(p - q).sum())


def fidelity(
    train: pd.DataFrame,
    synthetic: pd.DataFrame,
    *,
    max_subsets: int | None = None,
    seed: int = 0,
) -> Fidelity:
    """Univariate, bivariate and trivariate accuracy of ``synthetic`` against ``train``.

    For each subset of ``k`` columns (k = 1, 2, 3): accuracy = 1 - 0.5 *
    sum over the joint categories of |p_train - p_synthetic| (one minus the
    total variation distance between the two relative-frequency
    distributions). Each level is the mean over all its subsets, or over
    ``max_subsets`` distinct subsets per level drawn with ``seed`` (None: all).
    ``overall`` is the mean of the three levels.
    """
    if max_subsets is not None and max_subsets < 1:
        raise ValueError(f"max_subsets must be positive or None, got {max_subsets}")
    columns = check_columns({"train": train, "synthetic": synthetic})
    if len(train) == 0 or len(synthetic) == 0:
        raise ValueError("fidelity needs at least one training and one synthetic row")
    (train_codes, synthetic_codes), cardinalities = _encode([train, synthetic], columns)
    rng = np.random.default_rng(seed)
    levels: list[float] = []
    for k in FIDELITY_ORDERS:
        subsets = _column_subsets(len(columns), k, max_subsets, rng)
        scores = [_subset_accuracy(train_codes, synthetic_codes, cardinalities, s) for s in subsets]
        levels.append(float(np.mean(scores)) if scores else math.nan)
    existing = [v for v in levels if not math.isnan(v)]
    univariate, bivariate, trivariate = levels
    return Fidelity(univariate, bivariate, trivariate, overall=float(np.mean(existing)))


# ---------------------------------------------------------------------------
# similarity
# ---------------------------------------------------------------------------


def row_texts(frame: pd.DataFrame) -> list[str]:
    """Every row as ``"column: value; column: value"`` (columns in frame order)."""
    if frame.shape[1] == 0:
        return [""] * len(frame)
    pieces = [
        f"{column}: " + frame[column].astype(str).to_numpy(dtype=object) for column in frame.columns
    ]
    texts = pieces[0]
    for piece in pieces[1:]:
        texts = texts + "; " + piece
    return [str(t) for t in texts]


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    norms = float(np.linalg.norm(a)) * float(np.linalg.norm(b))
    if norms == 0.0:
        raise ValueError("a centroid is the zero vector: cosine similarity is undefined")
    return float(np.dot(a, b) / norms)


def centroid_cosine(train_vectors: np.ndarray, synthetic_vectors: np.ndarray) -> float:
    """Cosine similarity between the mean of ``train_vectors`` and the mean of ``synthetic_vectors``."""
    train_vectors = np.asarray(train_vectors, dtype=np.float64)
    synthetic_vectors = np.asarray(synthetic_vectors, dtype=np.float64)
    if train_vectors.ndim != 2 or synthetic_vectors.ndim != 2:
        raise ValueError("vectors must be 2-D (rows x dimensions)")
    if train_vectors.shape[1] != synthetic_vectors.shape[1]:
        raise ValueError(
            f"dimension mismatch: {train_vectors.shape[1]} vs {synthetic_vectors.shape[1]}"
        )
    if len(train_vectors) == 0 or len(synthetic_vectors) == 0:
        raise ValueError("centroid of an empty set of vectors")
    return _cosine(train_vectors.mean(axis=0), synthetic_vectors.mean(axis=0))


def similarity(
    train: pd.DataFrame,
    synthetic: pd.DataFrame,
    embed: Callable[[Sequence[str]], np.ndarray],
) -> float:
    """Cosine similarity of the training and synthetic centroids in ``embed``'s space.

    Rows are rendered by :func:`row_texts`; ``embed`` is called once, on the
    distinct texts of both frames, and must return one vector per text. Each
    vector is weighted by the number of rows it stands for, so the result
    equals :func:`centroid_cosine` of the full per-row embeddings.
    """
    columns = check_columns({"train": train, "synthetic": synthetic})
    if len(train) == 0 or len(synthetic) == 0:
        raise ValueError("similarity needs at least one training and one synthetic row")
    texts = np.asarray(row_texts(train[columns]) + row_texts(synthetic[columns]), dtype=object)
    ids, uniques = pd.factorize(texts)
    vectors = np.asarray(embed([str(u) for u in uniques]), dtype=np.float64)
    if vectors.ndim != 2 or len(vectors) != len(uniques):
        raise ValueError(
            f"embed returned shape {vectors.shape} for {len(uniques)} texts; "
            "expected one vector per text"
        )
    n_train = len(train)
    train_weights = np.bincount(ids[:n_train], minlength=len(uniques)) / n_train
    synthetic_weights = np.bincount(ids[n_train:], minlength=len(uniques)) / len(synthetic)
    return _cosine(train_weights @ vectors, synthetic_weights @ vectors)


# ---------------------------------------------------------------------------
# novelty
# ---------------------------------------------------------------------------


def _one_hot(rows: np.ndarray, offsets: np.ndarray, width: int) -> np.ndarray:
    hot = np.zeros((len(rows), width), dtype=np.float32)
    hot[np.arange(len(rows))[:, None], rows + offsets] = 1.0
    return hot


def _nearest_from_codes(
    query: np.ndarray,
    reference: np.ndarray,
    cardinalities: np.ndarray,
    *,
    max_block_bytes: int,
    second: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Nearest and second-nearest Hamming distances of code rows (see :func:`nearest_distances`).

    With ``second=False`` only d1 is computed (the second array is all NaN).
    """
    if len(reference) == 0:
        raise ValueError("the reference has no rows")
    if max_block_bytes < 1:
        raise ValueError(f"max_block_bytes must be positive, got {max_block_bytes}")
    n_columns = query.shape[1]
    if len(query) == 0:
        return np.empty(0), np.empty(0)
    distinct_query = _distinct_rows(query, cardinalities)
    distinct_reference = _distinct_rows(reference, cardinalities)
    offsets = np.concatenate([[0], np.cumsum(cardinalities)[:-1]]).astype(np.int64)
    width = int(cardinalities.sum())
    reference_hot = _one_hot(distinct_reference.rows, offsets, width)
    n_reference = len(reference_hot)
    repeated = distinct_reference.counts >= 2
    bytes_per_query_row = 4 * max(n_reference, width)  # distance block row, one-hot block row
    height = max(1, max_block_bytes // bytes_per_query_row)
    n_query = len(distinct_query.rows)
    first = np.empty(n_query, dtype=np.float64)
    runner_up = np.full(n_query, np.nan)
    for start in range(0, n_query, height):
        block = _one_hot(distinct_query.rows[start : start + height], offsets, width)
        mismatches = block @ reference_hot.T  # matching columns, exact small integers
        del block
        np.subtract(np.float32(n_columns), mismatches, out=mismatches)  # in place: mismatches
        nearest = mismatches.argmin(axis=1)
        d1 = mismatches[np.arange(len(mismatches)), nearest].astype(np.float64)
        first[start : start + len(d1)] = d1
        if second:
            if n_reference >= 2:
                mismatches.partition(1, axis=1)  # in place: columns 0, 1 are the two smallest
                d2 = mismatches[:, 1].astype(np.float64)
            else:
                d2 = np.full(len(d1), np.inf)
            runner_up[start : start + len(d1)] = np.where(repeated[nearest], d1, d2)
        del mismatches  # before the next block is allocated: one block alive at a time
    first /= n_columns
    runner_up /= n_columns
    return first[distinct_query.inverse], runner_up[distinct_query.inverse]


def nearest_distances(
    query: pd.DataFrame,
    reference: pd.DataFrame,
    *,
    max_block_bytes: int = DEFAULT_MAX_BLOCK_BYTES,
) -> tuple[np.ndarray, np.ndarray]:
    """For every query row, the distance to its nearest and second-nearest reference rows.

    Distance: share of columns that differ (normalised Hamming, in [0, 1]).
    Exact; the reference and query rows are deduplicated and the distances
    computed in blocks whose distance matrix stays under ``max_block_bytes``
    (float32), so memory is O(rows), not O(n_query * n_reference). Two equal
    reference rows are two neighbours: if the nearest distinct reference row
    occurs at least twice, d2 = d1. A reference of one row gives d2 = inf.
    Returns two float64 arrays of length ``len(query)``.
    """
    columns = check_columns({"reference": reference, "query": query})
    (query_codes, reference_codes), cardinalities = _encode([query, reference], columns)
    return _nearest_from_codes(
        query_codes, reference_codes, cardinalities, max_block_bytes=max_block_bytes
    )


def identical_match_share(train: pd.DataFrame, synthetic: pd.DataFrame) -> float:
    """Share of synthetic rows exactly equal to at least one training row (hash join)."""
    columns = check_columns({"train": train, "synthetic": synthetic})
    if len(synthetic) == 0:
        raise ValueError("the synthetic table has no rows")
    (train_codes, synthetic_codes), cardinalities = _encode([train, synthetic], columns)
    return _identical_share(train_codes, synthetic_codes, cardinalities)


def _identical_share(train: np.ndarray, synthetic: np.ndarray, cardinalities: np.ndarray) -> float:
    key, _ = _combined_key(np.concatenate([train, synthetic]), cardinalities)
    n_train = len(train)
    return float(pd.Series(key[n_train:]).isin(pd.Series(key[:n_train])).mean())


def dcr_share(train_distances: np.ndarray, holdout_distances: np.ndarray) -> float:
    """Share of rows closer to training than to holdout, ties counted as one half (mostlyai-qa).

    ``train_distances`` / ``holdout_distances``: each synthetic row's distance
    to its closest training / holdout row. 0.5 is the ideal with equal-sized
    training and holdout sets.
    """
    train_distances, holdout_distances = _paired(train_distances, holdout_distances)
    closer = np.mean(train_distances < holdout_distances)
    tied = np.mean(train_distances == holdout_distances)
    return float(closer + 0.5 * tied)


def dcr_overfitting_score(train_distances: np.ndarray, holdout_distances: np.ndarray) -> float:
    """SDMetrics' DCROverfittingProtection: ``min(1, 2 * (1 - mean(d_train < d_holdout)))``.

    The share is strict (a tie is not closer to training); 1 means at most
    half of the synthetic rows are strictly closer to training than to
    holdout, 0 that all are.
    """
    train_distances, holdout_distances = _paired(train_distances, holdout_distances)
    closer_to_training = float(np.mean(train_distances < holdout_distances))
    return min((1.0 - closer_to_training) * 2.0, 1.0)


def _paired(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1 or len(a) == 0:
        raise ValueError(
            f"expected two non-empty 1-D arrays of equal length, got {a.shape}, {b.shape}"
        )
    return a, b


def nndr(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """Nearest neighbour distance ratio d1 / d2 per row, with 0 / 0 = 1 (and 0 / d2 = 0).

    0 / 0 means the row equals a pattern shared by at least two reference rows
    (not distinctive); d2 = inf (a one-row reference) gives 0.
    """
    first, second = np.asarray(first, dtype=np.float64), np.asarray(second, dtype=np.float64)
    ratio = np.ones_like(first)
    positive = second > 0
    np.divide(first, second, out=ratio, where=positive)
    return ratio


@dataclass(frozen=True)
class Novelty:
    """Privacy / novelty metrics of one synthetic sample (see the module docstring).

    ``dcr_closer_to_training`` is the strict share behind
    ``dcr_overfitting_score`` (SDMetrics' ``closer_to_training``).
    """

    identical_match_share: float
    dcr_share: float
    dcr_closer_to_training: float
    dcr_overfitting_score: float
    nndr_synthetic: float
    nndr_holdout: float
    nndr_ratio: float

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def novelty(
    train: pd.DataFrame,
    holdout: pd.DataFrame,
    synthetic: pd.DataFrame,
    *,
    max_block_bytes: int = DEFAULT_MAX_BLOCK_BYTES,
) -> Novelty:
    """Identical matches, DCR share, DCR overfitting score and NNDR of ``synthetic``.

    Distances are normalised Hamming distances (share of differing columns).
    ``nndr_ratio`` = mean synthetic-to-training NNDR / mean holdout-to-training
    NNDR (NaN when the latter is 0).
    """
    columns = check_columns({"train": train, "holdout": holdout, "synthetic": synthetic})
    if min(len(train), len(holdout), len(synthetic)) == 0:
        raise ValueError("train, holdout and synthetic must all have rows")
    (train_codes, holdout_codes, synthetic_codes), cardinalities = _encode(
        [train, holdout, synthetic], columns
    )
    d1_train, d2_train = _nearest_from_codes(
        synthetic_codes, train_codes, cardinalities, max_block_bytes=max_block_bytes
    )
    d1_holdout, _ = _nearest_from_codes(
        synthetic_codes, holdout_codes, cardinalities, max_block_bytes=max_block_bytes, second=False
    )
    h1_train, h2_train = _nearest_from_codes(
        holdout_codes, train_codes, cardinalities, max_block_bytes=max_block_bytes
    )
    nndr_synthetic = float(nndr(d1_train, d2_train).mean())
    nndr_holdout = float(nndr(h1_train, h2_train).mean())
    return Novelty(
        identical_match_share=_identical_share(train_codes, synthetic_codes, cardinalities),
        dcr_share=dcr_share(d1_train, d1_holdout),
        dcr_closer_to_training=float(np.mean(d1_train < d1_holdout)),
        dcr_overfitting_score=dcr_overfitting_score(d1_train, d1_holdout),
        nndr_synthetic=nndr_synthetic,
        nndr_holdout=nndr_holdout,
        nndr_ratio=nndr_synthetic / nndr_holdout if nndr_holdout > 0 else math.nan,
    )


# ---------------------------------------------------------------------------
# ten synthetic samples
# ---------------------------------------------------------------------------


def summarize_samples(values: Sequence[float]) -> dict[str, float]:
    """Mean, sample standard deviation (ddof=1; NaN for one value), min, max and n of ``values``."""
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1 or len(array) == 0:
        raise ValueError("summarize_samples needs a non-empty sequence of numbers")
    return {
        "mean": float(array.mean()),
        "std": sample_sd(array),
        "min": float(array.min()),
        "max": float(array.max()),
        "n": len(array),
    }
