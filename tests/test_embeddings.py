"""SentenceEncoder (bundled MiniLM) and the exact chunked cosine nearest-neighbour search."""

from __future__ import annotations

import numpy as np
import pytest

from synthdeid.embeddings import SentenceEncoder, cosine_max_similarity, greedy_near_duplicates

# made-up sentences, no real clinical text
SENTENCES = [
    "The patient has a high fever and a persistent cough.",
    "Ok.",
    "The patient is running a temperature and keeps coughing.",
    "The invoice for repairing the garage roof is overdue by three weeks.",
    "Blood pressure was checked twice during the afternoon and both readings were normal, "
    "so no change to the tablets was made and a review was booked for next month.",
    "",
    "Walked the dog.",
]


@pytest.fixture(scope="module")
def encoder() -> SentenceEncoder:
    return SentenceEncoder.load(None, device="cpu")


def test_unit_norm_float32_shape(encoder: SentenceEncoder) -> None:
    vectors = encoder.embed(SENTENCES, batch_size=3)
    assert vectors.shape == (len(SENTENCES), encoder.dimension) == (len(SENTENCES), 384)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert encoder.embed([]).shape == (0, 384)


def test_same_text_same_vector_and_input_order(encoder: SentenceEncoder) -> None:
    # length-sorted batches of 2: every text lands in a different batch than when alone
    batched = encoder.embed(SENTENCES, batch_size=2)
    alone = np.vstack([encoder.embed([text], batch_size=1) for text in SENTENCES])
    np.testing.assert_allclose(batched, alone, atol=1e-5)
    repeated = encoder.embed([SENTENCES[0], SENTENCES[4], SENTENCES[0]], batch_size=2)
    np.testing.assert_allclose(repeated[0], repeated[2], atol=1e-5)


def test_paraphrase_closer_than_unrelated(encoder: SentenceEncoder) -> None:
    fever, paraphrase, unrelated = encoder.embed([SENTENCES[0], SENTENCES[2], SENTENCES[3]])
    assert float(fever @ paraphrase) > float(fever @ unrelated) + 0.2


def test_truncation_at_max_length(encoder: SentenceEncoder) -> None:
    short = SentenceEncoder(encoder.model, encoder.tokenizer, encoder.device, max_length=6)
    # [CLS] + 4 word pieces + [SEP]: the texts differ only after the fourth word
    same = short.embed(["red green blue yellow purple", "red green blue yellow orange tea"])
    np.testing.assert_allclose(same[0], same[1], atol=1e-6)
    full = encoder.embed(["red green blue yellow purple", "red green blue yellow orange tea"])
    assert float(full[0] @ full[1]) < 0.999


def test_matches_sentence_transformers(encoder: SentenceEncoder) -> None:
    st = pytest.importorskip("sentence_transformers")
    reference = st.SentenceTransformer(encoder.name, device="cpu")
    expected = reference.encode(SENTENCES, normalize_embeddings=True)
    np.testing.assert_allclose(encoder.embed(SENTENCES, batch_size=4), expected, atol=1e-5)


def brute_force(
    a: np.ndarray, b: np.ndarray, exclude_self: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    an = a / np.linalg.norm(a, axis=1, keepdims=True)
    bn = b / np.linalg.norm(b, axis=1, keepdims=True)
    sims = an @ bn.T
    if exclude_self:
        sims = np.where(np.tril(np.ones_like(sims, dtype=bool), k=-1), sims, -np.inf)
    index = np.argmax(sims, axis=1)
    best = sims[np.arange(len(a)), index]
    return best, np.where(np.isfinite(best), index, -1)


@pytest.mark.parametrize("chunk", [1, 4, 7, 1024])
def test_cosine_max_similarity_matches_brute_force(chunk: int) -> None:
    rng = np.random.default_rng(5)
    a, b = rng.normal(size=(23, 6)), rng.normal(size=(31, 6)) * 3.0  # not unit vectors
    best, index = cosine_max_similarity(a, b, chunk)
    expected_best, expected_index = brute_force(a, b)
    np.testing.assert_allclose(best, expected_best, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(index, expected_index)
    best32, index32 = cosine_max_similarity(a.astype(np.float32), b.astype(np.float32), chunk)
    assert best32.dtype == np.float32
    np.testing.assert_allclose(best32, expected_best, atol=1e-5)
    np.testing.assert_array_equal(index32, expected_index)


@pytest.mark.parametrize("chunk", [1, 3, 8, 1024])
def test_cosine_max_similarity_exclude_self(chunk: int) -> None:
    rng = np.random.default_rng(7)
    x = rng.normal(size=(19, 5))
    x[11] = x[2] * 2.5  # a later near-copy (same direction) of row 2
    best, index = cosine_max_similarity(x, x, chunk, exclude_self=True)
    expected_best, expected_index = brute_force(x, x, exclude_self=True)
    np.testing.assert_allclose(best, expected_best, atol=1e-12)
    np.testing.assert_array_equal(index, expected_index)
    assert best[0] == -np.inf and index[0] == -1
    assert index[11] == 2 and best[11] == pytest.approx(1.0)
    assert best[2] < 0.999  # the first of the pair is not flagged
    # without exclude_self every row finds itself
    self_best, self_index = cosine_max_similarity(x, x, chunk)
    np.testing.assert_array_equal(self_index[:11], np.arange(11))
    np.testing.assert_allclose(self_best, 1.0, atol=1e-12)


def test_cosine_ties_zero_rows_and_empty_sets() -> None:
    b = np.array([[0, 1], [1, 0], [0, 1], [1, 0]], dtype=np.float64)
    for chunk in (1, 2, 3, 10):
        best, index = cosine_max_similarity(np.array([[1.0, 0.0], [0.0, 2.0]]), b, chunk)
        np.testing.assert_array_equal(index, [1, 0])  # lowest index among equal scores
        np.testing.assert_allclose(best, [1.0, 1.0])
    best, index = cosine_max_similarity(np.zeros((1, 2)), b)
    assert best[0] == 0.0 and index[0] == 0
    best, index = cosine_max_similarity(np.ones((3, 2)), np.zeros((0, 2)))
    assert np.all(best == -np.inf) and np.all(index == -1)
    best, index = cosine_max_similarity(np.zeros((0, 2)), b)
    assert best.shape == index.shape == (0,)
    with pytest.raises(ValueError, match="same set"):
        cosine_max_similarity(np.ones((2, 2)), np.ones((3, 2)), exclude_self=True)
    with pytest.raises(ValueError, match="widths"):
        cosine_max_similarity(np.ones((2, 2)), np.ones((3, 4)))


def naive_greedy(x: np.ndarray, threshold: float) -> np.ndarray:
    xn = x / np.linalg.norm(x, axis=1, keepdims=True)
    kept: list[int] = []
    for i in range(len(x)):
        if not kept or max(float(xn[i] @ xn[j]) for j in kept) < threshold:
            kept.append(i)
    keep = np.zeros(len(x), dtype=bool)
    keep[kept] = True
    return keep


def test_greedy_near_duplicates_keeps_first_and_ignores_dropped_rows() -> None:
    angles = np.deg2rad([0.0, 20.0, 40.0, 90.0, 1.0])
    x = np.column_stack([np.cos(angles), np.sin(angles)])
    threshold = float(np.cos(np.deg2rad(25.0)))
    for chunk in (1, 2, 10):
        keep, duplicate_of = greedy_near_duplicates(x, threshold, chunk)
        # 20° is a copy of 0°; 40° is close only to the dropped 20° row, so it stays
        np.testing.assert_array_equal(keep, [True, False, True, True, False])
        np.testing.assert_array_equal(duplicate_of, [-1, 0, -1, -1, 0])
    # thresholding exclude_self scores instead would also drop the 40° row
    best, _ = cosine_max_similarity(x, x, exclude_self=True)
    assert best[2] >= threshold

    rng = np.random.default_rng(3)
    centres = rng.normal(size=(6, 4))
    data = centres[rng.integers(0, 6, size=60)] + rng.normal(scale=0.15, size=(60, 4))
    for chunk in (1, 7, 64):
        keep, duplicate_of = greedy_near_duplicates(data, 0.97, chunk)
        np.testing.assert_array_equal(keep, naive_greedy(data, 0.97))
        dropped = np.flatnonzero(~keep)
        assert 6 <= keep.sum() < 60  # some rows kept, many dropped
        assert np.all(keep[duplicate_of[dropped]])
        assert np.all(duplicate_of[dropped] < dropped)
