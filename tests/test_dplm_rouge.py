"""Bit-parallel ROUGE-L equals rouge_score's RougeScorer(["rougeL"]) exactly."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rouge_score import rouge_scorer

from synthdeid.dplm.rouge import RougeIndex, f_measure, lcs_length, rouge_l, tokenize

SCORER = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False)
STEMMING_SCORER = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)

# small vocabularies force repeated tokens and long common subsequences
WORDS = [
    "the", "The", "patient", "patients", "resting", "rested", "a", "b", "c", "x1", "2",
    "bp", "BP", "...", ",", "-", "é", "Straße", "ß", "日本", "café", "naïve", "Ω", "",
    "running", "runs", "k\u212a",
]  # fmt: skip
SEPARATORS = [" ", "  ", "\n", "\t", ", ", ".", "-", "/", "\u00a0", ""]


def reference_score(reference: str, candidate: str, scorer: rouge_scorer.RougeScorer) -> float:
    return scorer.score(target=reference, prediction=candidate)["rougeL"].fmeasure


def dp_lcs(a: list[str], b: list[str]) -> int:
    table = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            table[i][j] = (
                table[i - 1][j - 1] + 1
                if a[i - 1] == b[j - 1]
                else max(table[i - 1][j], table[i][j - 1])
            )
    return table[-1][-1]


def random_text(rng: random.Random, max_words: int = 40) -> str:
    parts = []
    for _ in range(rng.randint(0, max_words)):
        parts.append(rng.choice(WORDS))
        parts.append(rng.choice(SEPARATORS))
    return "".join(parts)


texts = st.lists(st.tuples(st.sampled_from(WORDS), st.sampled_from(SEPARATORS)), max_size=30).map(
    lambda parts: "".join(w + s for w, s in parts)
)
free_texts = st.text(alphabet=st.sampled_from(list("abcAB12 .,-\n\té日ßΩ\u212a")), max_size=60)


def test_tokenizer_is_rouge_scores() -> None:
    assert tokenize("The BP-was 120/80, café!") == ["the", "bp", "was", "120", "80", "caf"]
    assert tokenize("...!!!") == []
    assert tokenize("Running runs", use_stemmer=True) == ["run", "run"]


def test_known_pairs() -> None:
    assert rouge_l("a b c d", "a b c d") == 1.0
    assert rouge_l("a b c d", "e f g") == 0.0
    assert rouge_l("", "a b") == 0.0
    assert rouge_l("a b", "") == 0.0
    assert rouge_l("...", "...") == 0.0
    # lcs("a b c d e", "a c e x") = 3: P = 3/4, R = 3/5, F = 2/3
    assert rouge_l("a b c d e", "a c e x") == pytest.approx(2 * 0.75 * 0.6 / 1.35)
    assert lcs_length(["a", "b", "a", "b"], ["b", "a", "b", "a"]) == 3
    assert f_measure(0, 3, 4) == 0.0


@settings(max_examples=300, deadline=None)
@given(texts, texts)
def test_pair_equals_rouge_score(reference: str, candidate: str) -> None:
    assert rouge_l(reference, candidate) == reference_score(reference, candidate, SCORER)
    ref, can = tokenize(reference), tokenize(candidate)
    assert lcs_length(ref, can) == dp_lcs(ref, can)


@settings(max_examples=150, deadline=None)
@given(free_texts, free_texts)
def test_pair_equals_rouge_score_on_arbitrary_characters(reference: str, candidate: str) -> None:
    assert rouge_l(reference, candidate) == reference_score(reference, candidate, SCORER)


@settings(max_examples=60, deadline=None)
@given(st.lists(texts, min_size=1, max_size=12), texts, st.sampled_from([1, 5, 40, 1 << 14]))
def test_index_equals_rouge_score(references: list[str], candidate: str, block_bits: int) -> None:
    index = RougeIndex(references, block_bits=block_bits)
    expected = [reference_score(r, candidate, SCORER) for r in references]
    assert index.scores(candidate).tolist() == expected
    best, where = index.max_rouge_l(candidate)
    assert best == max(expected)
    if best > 0:
        assert where == expected.index(best)
    else:
        assert where == -1


def test_index_on_seeded_random_corpus() -> None:
    rng = random.Random(20240604)
    references = [random_text(rng, 80) for _ in range(120)] + ["", "!!!", "a a a a a a a"]
    for block_bits in (64, 1 << 14):
        index = RougeIndex(references, block_bits=block_bits)
        for _ in range(15):
            candidate = random_text(rng, 80)
            expected = [reference_score(r, candidate, SCORER) for r in references]
            got = index.scores(candidate)
            assert got.dtype == np.float64
            assert got.tolist() == expected
            assert index.lcs_lengths(candidate).tolist() == [
                dp_lcs(index.tokenize(r), index.tokenize(candidate)) for r in references
            ]


def test_index_with_stemmer() -> None:
    rng = random.Random(5)
    references = [random_text(rng, 30) for _ in range(30)]
    index = RougeIndex(references, use_stemmer=True)
    for _ in range(10):
        candidate = random_text(rng, 30)
        expected = [reference_score(r, candidate, STEMMING_SCORER) for r in references]
        assert index.scores(candidate).tolist() == expected
    assert rouge_l("running patients", "runs patient", use_stemmer=True) == 1.0


def test_identical_copy_and_disjoint_vocabulary() -> None:
    index = RougeIndex(["alpha beta gamma delta", "one two three", "Beta alpha."])
    assert index.max_rouge_l("one two three") == (1.0, 1)
    assert index.max_rouge_l("ONE, two... three!") == (1.0, 1)
    assert index.max_rouge_l("zeta eta theta") == (0.0, -1)
    assert index.max_rouge_l("") == (0.0, -1)
    assert len(index) == 3
    # ties go to the first reference reaching the maximum
    assert RougeIndex(["x y", "x y"]).max_rouge_l("x y") == (1.0, 0)


def test_empty_index_and_bad_block_size() -> None:
    assert RougeIndex([]).max_rouge_l("anything") == (0.0, -1)
    with pytest.raises(ValueError, match="block_bits"):
        RougeIndex(["a"], block_bits=0)
