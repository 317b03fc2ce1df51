"""Fidelity, similarity and novelty metrics of synthetic categorical tables (hand-made tables)."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
import pytest

from synthdeid.tabular.metrics import (
    Fidelity,
    Novelty,
    centroid_cosine,
    dcr_overfitting_score,
    dcr_share,
    fidelity,
    identical_match_share,
    nearest_distances,
    nndr,
    novelty,
    row_texts,
    similarity,
    summarize_samples,
)


def random_table(
    rng: np.random.Generator, rows: int, columns: int, categories: int
) -> pd.DataFrame:
    """Categorical strings; few categories so duplicate rows and tied distances occur."""
    values = [f"v{i}" for i in range(categories - 1)] + ["unknown"]
    return pd.DataFrame(
        {f"col{j}": rng.choice(values, size=rows) for j in range(columns)}, dtype=object
    )


def brute_force(query: pd.DataFrame, reference: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Full pairwise normalised Hamming matrix, sorted per row."""
    q = query[list(reference.columns)].to_numpy(dtype=object)
    r = reference.to_numpy(dtype=object)
    distances = (q[:, None, :] != r[None, :, :]).mean(axis=2)
    ordered = np.sort(distances, axis=1)
    second = ordered[:, 1] if len(r) >= 2 else np.full(len(q), np.inf)
    return ordered[:, 0], second


TRAIN = pd.DataFrame({"a": ["x", "x", "y", "y"], "b": ["p", "q", "p", "p"]})
SYNTHETIC = pd.DataFrame({"a": ["x", "y", "y"], "b": ["p", "q", "q"]})


# --- fidelity ---------------------------------------------------------------


def test_identical_copy_is_perfect() -> None:
    table = random_table(np.random.default_rng(1), 200, 5, 4)
    result = fidelity(table, table.sample(frac=1.0, random_state=0))
    assert result == Fidelity(1.0, 1.0, 1.0, 1.0)
    assert identical_match_share(table, table) == 1.0
    d1, _ = nearest_distances(table, table)
    assert np.all(d1 == 0.0)
    holdout = random_table(np.random.default_rng(2), 200, 5, 4)
    assert novelty(table, holdout, table).identical_match_share == 1.0


def test_hand_computed_accuracies() -> None:
    # a: train x .5 / y .5, synthetic x 1/3 / y 2/3 -> TV 1/6
    # b: train p .75 / q .25, synthetic p 1/3 / q 2/3 -> TV 5/12
    # (a, b): train xp .25 xq .25 yp .5, synthetic xp 1/3 yq 2/3 -> TV 3/4
    result = fidelity(TRAIN, SYNTHETIC)
    assert result.univariate == pytest.approx(((1 - 1 / 6) + (1 - 5 / 12)) / 2, abs=1e-12)
    assert result.bivariate == pytest.approx(1 / 4, abs=1e-12)
    assert math.isnan(result.trivariate)  # two columns: no triplet
    assert result.overall == pytest.approx((17 / 24 + 1 / 4) / 2, abs=1e-12)
    assert set(result.as_dict()) == {"univariate", "bivariate", "trivariate", "overall"}


def test_column_order_does_not_matter() -> None:
    assert fidelity(TRAIN, SYNTHETIC[["b", "a"]]) == fidelity(TRAIN, SYNTHETIC)


def test_three_levels_and_sampled_subsets() -> None:
    rng = np.random.default_rng(3)
    train, synthetic = random_table(rng, 300, 7, 4), random_table(rng, 250, 7, 4)
    full = fidelity(train, synthetic)
    assert 0 < full.trivariate < full.bivariate < full.univariate <= 1
    assert full.overall == pytest.approx((full.univariate + full.bivariate + full.trivariate) / 3)
    assert fidelity(train, synthetic, max_subsets=1000) == full  # more than C(7, 3) = 35
    sampled = fidelity(train, synthetic, max_subsets=5, seed=7)
    assert sampled == fidelity(train, synthetic, max_subsets=5, seed=7)
    assert sampled.univariate != full.univariate  # 5 of the 7 columns only
    with pytest.raises(ValueError, match="max_subsets"):
        fidelity(train, synthetic, max_subsets=0)


def test_disjoint_categories() -> None:
    train = pd.DataFrame({"a": ["x", "y", "x"], "b": ["p", "p", "q"]})
    holdout = pd.DataFrame({"a": ["h", "i", "h"], "b": ["r", "s", "r"]})
    synthetic = pd.DataFrame({"a": ["z", "w"], "b": ["t", "t"]})
    result = fidelity(train, synthetic)
    assert result.univariate == result.bivariate == 0.0
    assert identical_match_share(train, synthetic) == 0.0
    d1, d2 = nearest_distances(synthetic, train)
    assert np.all(d1 == 1.0) and np.all(d2 == 1.0)
    scores = novelty(train, holdout, synthetic)
    assert scores.dcr_share == 0.5  # equally far from training and holdout: all ties
    assert scores.dcr_closer_to_training == 0.0
    assert scores.dcr_overfitting_score == 1.0
    assert scores.nndr_synthetic == 1.0  # the maximum: not close to any training row


# --- columns ----------------------------------------------------------------


def test_mismatched_columns_are_named() -> None:
    other = SYNTHETIC.rename(columns={"b": "c"})
    for call in (
        lambda: fidelity(TRAIN, other),
        lambda: identical_match_share(TRAIN, other),
        lambda: nearest_distances(other, TRAIN),
        lambda: similarity(TRAIN, other, lambda texts: np.ones((len(texts), 2))),
        lambda: novelty(TRAIN, TRAIN, other),
    ):
        with pytest.raises(ValueError, match=r"missing \['b'\], extra \['c'\]"):
            call()
    with pytest.raises(ValueError, match="holdout"):
        novelty(TRAIN, TRAIN[["a"]], TRAIN)


# --- nearest distances --------------------------------------------------------


@pytest.mark.parametrize("seed", range(6))
def test_nearest_distances_match_brute_force(seed: int) -> None:
    rng = np.random.default_rng(seed)
    columns = int(rng.integers(1, 6))
    categories = int(rng.integers(2, 4))
    query = random_table(rng, int(rng.integers(1, 150)), columns, categories)
    reference = random_table(rng, int(rng.integers(1, 120)), columns, categories)
    query = pd.concat([query, reference.head(5)], ignore_index=True)  # exact copies too
    expected = brute_force(query, reference)
    for max_block_bytes in (1, 64, 1000, 2**26):  # 1 and 64: one query row per block
        d1, d2 = nearest_distances(query, reference, max_block_bytes=max_block_bytes)
        np.testing.assert_array_equal(d1, expected[0])
        np.testing.assert_array_equal(d2, expected[1])


def test_nearest_distances_duplicates_and_single_row() -> None:
    reference = pd.DataFrame({"a": ["x", "x", "y"], "b": ["p", "p", "q"]})
    query = pd.DataFrame({"a": ["x", "y", "z"], "b": ["p", "q", "q"]})
    d1, d2 = nearest_distances(query, reference)
    np.testing.assert_array_equal(d1, [0.0, 0.0, 0.5])
    np.testing.assert_array_equal(d2, [0.0, 1.0, 1.0])  # (x, p) twice: d2 = d1
    d1, d2 = nearest_distances(query, reference.head(1))
    np.testing.assert_array_equal(d1, [0.0, 1.0, 1.0])
    assert np.all(np.isinf(d2))
    d1, d2 = nearest_distances(query, reference.head(2))  # one distinct row, twice
    np.testing.assert_array_equal(d2, d1)
    with pytest.raises(ValueError, match="no rows"):
        nearest_distances(query, reference.head(0))


def test_hand_computed_distances() -> None:
    d1, d2 = nearest_distances(SYNTHETIC, TRAIN)
    np.testing.assert_array_equal(d1, [0.0, 0.5, 0.5])
    np.testing.assert_array_equal(d2, [0.5, 0.5, 0.5])
    np.testing.assert_array_equal(nndr(d1, d2), [0.0, 1.0, 1.0])


# --- DCR share, overfitting score, NNDR --------------------------------------


def test_ties_count_half() -> None:
    assert dcr_share(np.array([0.0, 0.5, 0.5, 1.0]), np.array([0.5, 0.5, 0.0, 1.0])) == 0.5
    assert dcr_share(np.array([0.0, 0.5]), np.array([0.5, 0.5])) == 0.75
    # strict share 1/2 -> SDMetrics score min(1, 2 * (1 - 1/2)) = 1; 3/4 -> 0.5
    assert dcr_overfitting_score(np.array([0.0, 0.5]), np.array([0.5, 0.5])) == 1.0
    assert dcr_overfitting_score(np.array([0.0, 0.0, 0.0, 1.0]), np.ones(4)) == 0.5
    # frames: the synthetic row differs from the training and the holdout row in one column
    train = pd.DataFrame({"a": ["x"], "b": ["p"]})
    holdout = pd.DataFrame({"a": ["y"], "b": ["q"]})
    synthetic = pd.DataFrame({"a": ["x", "x"], "b": ["q", "p"]})
    scores = novelty(train, holdout, synthetic)
    assert scores.dcr_share == (0.5 + 1.0) / 2  # a tie, then strictly closer to training
    assert scores.dcr_closer_to_training == 0.5


def test_nndr_conventions() -> None:
    np.testing.assert_array_equal(
        nndr(np.array([0.0, 0.0, 0.25, 0.5, 0.5]), np.array([0.0, 0.5, 0.5, 0.5, np.inf])),
        [1.0, 0.0, 0.5, 1.0, 0.0],
    )
    train = pd.DataFrame({"a": ["x", "x", "y", "z"], "b": ["p", "p", "q", "r"]})
    synthetic = pd.DataFrame({"a": ["x", "y"], "b": ["p", "q"]})
    # (x, p) is shared by two training rows: 0 / 0 -> 1; (y, q) is one training row: 0
    holdout = pd.DataFrame({"a": ["x"], "b": ["r"]})  # d1 = d2 = 0.5 -> 1
    scores = novelty(train, holdout, synthetic)
    assert scores.nndr_synthetic == 0.5
    assert scores.nndr_holdout == 1.0
    assert scores.nndr_ratio == 0.5
    assert set(scores.as_dict()) == {
        "identical_match_share",
        "dcr_share",
        "dcr_closer_to_training",
        "dcr_overfitting_score",
        "nndr_synthetic",
        "nndr_holdout",
        "nndr_ratio",
    }


def test_agrees_with_sdmetrics() -> None:
    from sdmetrics.single_table import DCRBaselineProtection, DCROverfittingProtection
    from sdmetrics.single_table.privacy.dcr_utils import calculate_dcr

    rng = np.random.default_rng(11)
    train = random_table(rng, 300, 8, 4)
    holdout = random_table(rng, 300, 8, 4)
    # a leaky synthesizer: 60% training copies with one column resampled, 40% fresh rows
    leaked = train.sample(n=180, random_state=1).reset_index(drop=True)
    leaked["col2"] = rng.choice(["v0", "v1", "v2", "unknown"], size=len(leaked))
    synthetic = pd.concat([leaked, random_table(rng, 120, 8, 4)], ignore_index=True)
    metadata = {"columns": {c: {"sdtype": "categorical"} for c in train.columns}}

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcr_train = calculate_dcr(synthetic, train, metadata).to_numpy()
        dcr_holdout = calculate_dcr(synthetic, holdout, metadata).to_numpy()
        breakdown = DCROverfittingProtection.compute_breakdown(
            train, synthetic, holdout, metadata, None, num_rows_subsample=None
        )
        baseline = DCRBaselineProtection.compute_breakdown(
            train, synthetic, metadata, None, num_rows_subsample=None
        )
    d1_train, _ = nearest_distances(synthetic, train)
    d1_holdout, _ = nearest_distances(synthetic, holdout)
    np.testing.assert_array_equal(d1_train, dcr_train)
    np.testing.assert_array_equal(d1_holdout, dcr_holdout)
    assert np.median(d1_train) == baseline["median_DCR_to_real_data"]["synthetic_data"]

    scores = novelty(train, holdout, synthetic)
    closer = breakdown["synthetic_data_percentages"]["closer_to_training"]
    assert scores.dcr_closer_to_training == closer
    assert scores.dcr_overfitting_score == breakdown["score"]
    assert 0.0 < scores.dcr_overfitting_score < 1.0  # the leak is visible
    # ties, which SDMetrics counts on the holdout side, are halved in the DCR share
    ties = np.mean(dcr_train == dcr_holdout)
    assert ties > 0
    assert scores.dcr_share == pytest.approx(closer + ties / 2, abs=1e-12)


# --- similarity ----------------------------------------------------------------


def one_hot_embedder(
    calls: list[int],
) -> tuple[dict[str, int], Callable[[Sequence[str]], np.ndarray]]:
    """Embeds a row text as the indicator vector of its "column: value" pairs."""
    vocabulary: dict[str, int] = {}

    def embed(texts: Sequence[str]) -> np.ndarray:
        calls.append(len(texts))
        pairs = [text.split("; ") for text in texts]
        for pair in (p for row in pairs for p in row):
            vocabulary.setdefault(pair, len(vocabulary))
        vectors = np.zeros((len(texts), 64))
        for i, row in enumerate(pairs):
            vectors[i, [vocabulary[p] for p in row]] = 1.0
        return vectors

    return vocabulary, embed


def test_row_texts() -> None:
    assert row_texts(TRAIN.head(2)) == ["a: x; b: p", "a: x; b: q"]


def test_similarity_weights_distinct_texts_by_count() -> None:
    rng = np.random.default_rng(5)
    train, synthetic = random_table(rng, 400, 3, 3), random_table(rng, 300, 3, 3)
    calls: list[int] = []
    _, embed = one_hot_embedder(calls)
    value = similarity(train, synthetic, embed)
    distinct = len(set(row_texts(train)) | set(row_texts(synthetic)))
    assert calls == [distinct] and distinct < 700  # one call, each distinct text once
    per_row = centroid_cosine(embed(row_texts(train)), embed(row_texts(synthetic)))
    assert value == pytest.approx(per_row, abs=1e-12)
    assert similarity(train, train.sample(frac=1.0, random_state=0), embed) == pytest.approx(1.0)


def test_similarity_of_disjoint_tables_is_zero() -> None:
    _, embed = one_hot_embedder([])
    other = pd.DataFrame({"a": ["z", "w"], "b": ["t", "t"]})
    assert similarity(TRAIN, other, embed) == 0.0
    assert centroid_cosine(np.array([[1.0, 0.0], [0.0, 1.0]]), np.array([[2.0, 2.0]])) == (
        pytest.approx(1.0)
    )


# --- ten samples ------------------------------------------------------------------


def test_summarize_samples() -> None:
    summary = summarize_samples([0.5, 0.7, 0.6])
    assert summary["mean"] == pytest.approx(0.6)
    assert summary["std"] == pytest.approx(0.1)
    assert (summary["min"], summary["max"], summary["n"]) == (0.5, 0.7, 3)
    assert math.isnan(summarize_samples([1.0])["std"])
    with pytest.raises(ValueError):
        summarize_samples([])


def test_novelty_is_a_frozen_dataclass() -> None:
    scores = novelty(TRAIN, TRAIN, SYNTHETIC)
    assert isinstance(scores, Novelty)
    with pytest.raises(AttributeError):
        scores.dcr_share = 0.0  # type: ignore[misc]
