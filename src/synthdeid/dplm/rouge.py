"""Exact ROUGE-L F-measure, fast: bit-parallel LCS against many references at once.

Definitions (identical to ``rouge_score`` 0.1.2, ``RougeScorer(["rougeL"])``):

* tokens: ``rouge_score.tokenizers.DefaultTokenizer(use_stemmer)`` (lower case,
  every run of characters outside ``[a-z0-9]`` is a separator, optional Porter
  stemming of tokens longer than three characters). The tokenizer object of
  ``rouge_score`` itself is used, so the tokens are the same by construction.
* ``lcs``: length of the longest common subsequence of the two token lists.
* ``precision = lcs / len(candidate tokens)``, ``recall = lcs / len(reference
  tokens)``, ``F = 2 * precision * recall / (precision + recall)``; F is 0.0 when
  either token list is empty or ``lcs`` is 0. ``RougeScorer.score(target=reference,
  prediction=candidate)`` is the same number, bit for bit: the same float
  operations in the same order.

Algorithm: the LCS length is computed with the bit-parallel recurrence of
Allison and Dix (1986) in Hyyrö's form (2004). For a reference of ``m`` tokens,
``PM[t]`` is the bitset of the positions where token ``t`` occurs; starting from
``V = 1^m``, every candidate token ``t`` updates ``U = V & PM[t]; V = (V + U) |
(V - U)``, and ``lcs`` is the number of zero bits of ``V``. Python integers are
the bitsets, so one candidate token costs four big-integer operations.

:class:`RougeIndex` packs many references into one bitset per block (about
``block_bits`` bits): reference ``j`` owns bits ``[offset_j, offset_j + m_j)``
followed by one guard bit. ``U`` is a subset of ``V``, so ``V - U`` never
borrows; the carry out of the top bit of a reference's field in ``V + U`` stops
in the (zero) guard bit, and masking with ``keep`` (all field bits, no guard
bits) clears it again after each step. One update therefore advances the LCS
of every reference of a block at once. Candidate tokens absent from a block are
skipped (``U = 0`` leaves ``V`` unchanged). There is no prefilter: every
reference's LCS is computed exactly, and the maximum is taken over all of them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from rouge_score import tokenizers

log = logging.getLogger(__name__)

DEFAULT_BLOCK_BITS = 1 << 14  # reference tokens packed per bitset (a soft limit)


def make_tokenizer(use_stemmer: bool = False) -> tokenizers.DefaultTokenizer:
    """The tokenizer ``rouge_score.rouge_scorer.RougeScorer`` uses by default."""
    return tokenizers.DefaultTokenizer(use_stemmer)


def tokenize(text: str, use_stemmer: bool = False) -> list[str]:
    """ROUGE tokens of ``text`` (see the module docstring)."""
    return list(make_tokenizer(use_stemmer).tokenize(text))


def _position_masks(tokens: Sequence[str], offset: int = 0) -> dict[str, int]:
    """Token -> bitset of its positions (bit ``offset + i`` for position ``i``)."""
    positions: dict[str, list[int]] = {}
    for i, token in enumerate(tokens):
        positions.setdefault(token, []).append(offset + i)
    masks = {}
    for token, where in positions.items():
        mask = 0
        for p in where:
            mask |= 1 << p
        masks[token] = mask
    return masks


def lcs_length(reference: Sequence[str], candidate: Sequence[str]) -> int:
    """Length of the longest common subsequence of two token lists (bit-parallel)."""
    m = len(reference)
    if m == 0 or not candidate:
        return 0
    masks = _position_masks(reference)
    full = (1 << m) - 1
    v = full
    get = masks.get
    for token in candidate:
        pm = get(token)
        if pm is None:
            continue
        u = v & pm
        v = ((v + u) | (v - u)) & full
    return m - v.bit_count()


def f_measure(lcs: int, candidate_len: int, reference_len: int) -> float:
    """ROUGE-L F from an LCS length, exactly as ``rouge_score`` computes it."""
    if candidate_len == 0 or reference_len == 0:
        return 0.0
    precision = lcs / candidate_len
    recall = lcs / reference_len
    if precision + recall > 0:
        return 2 * precision * recall / (precision + recall)
    return 0.0


def rouge_l(reference: str, candidate: str, *, use_stemmer: bool = False) -> float:
    """ROUGE-L F of one pair: ``RougeScorer(["rougeL"]).score(reference, candidate)``."""
    tokenizer = make_tokenizer(use_stemmer)
    ref = tokenizer.tokenize(reference)
    can = tokenizer.tokenize(candidate)
    return f_measure(lcs_length(ref, can), len(can), len(ref))


@dataclass(frozen=True)
class _Block:
    """References ``first .. first + len(starts) - 1`` packed into one bitset."""

    first: int
    starts: np.ndarray  # bit offset of each reference's field (int64)
    ends: np.ndarray  # one past its last bit (int64)
    keep: int  # all field bits, no guard bits
    n_bytes: int
    masks: dict[str, int]


class RougeIndex:
    """References prepared once for ROUGE-L of many candidates against all of them.

    ``scores(candidate)`` equals ``[RougeScorer(["rougeL"], use_stemmer).score(
    target=r, prediction=candidate).fmeasure for r in references]`` exactly.
    """

    def __init__(
        self,
        references: Iterable[str],
        *,
        use_stemmer: bool = False,
        block_bits: int = DEFAULT_BLOCK_BITS,
    ) -> None:
        if block_bits < 1:
            raise ValueError(f"block_bits must be positive, got {block_bits}")
        self.use_stemmer = use_stemmer
        self._tokenizer = make_tokenizer(use_stemmer)
        lengths: list[int] = []
        self._blocks: list[_Block] = []
        fields: list[tuple[int, Sequence[str]]] = []  # the block being filled
        used = 0
        for text in references:  # one pass; only the current block's tokens are held
            tokens = self._tokenizer.tokenize(text)
            # at least one reference per block; then as many as fit in block_bits
            if fields and used + len(tokens) + 1 > block_bits:
                self._blocks.append(self._make_block(len(lengths) - len(fields), fields, used))
                fields, used = [], 0
            fields.append((used, tokens))
            used += len(tokens) + 1
            lengths.append(len(tokens))
        if fields:
            self._blocks.append(self._make_block(len(lengths) - len(fields), fields, used))
        self.reference_lengths = np.array(lengths, dtype=np.int64)
        log.debug(
            "ROUGE-L index: %d references, %d tokens, %d blocks",
            len(lengths),
            int(self.reference_lengths.sum()),
            len(self._blocks),
        )

    @staticmethod
    def _make_block(first: int, fields: list[tuple[int, Sequence[str]]], used: int) -> _Block:
        positions: dict[str, list[int]] = {}
        keep = 0
        for start, tokens in fields:
            keep |= ((1 << len(tokens)) - 1) << start
            for i, token in enumerate(tokens):
                positions.setdefault(token, []).append(start + i)
        masks = {}
        for token, where in positions.items():
            bits = np.zeros(used, dtype=np.uint8)
            bits[where] = 1
            masks[token] = int.from_bytes(np.packbits(bits, bitorder="little").tobytes(), "little")
        starts = np.array([s for s, _ in fields], dtype=np.int64)
        ends = starts + np.array([len(t) for _, t in fields], dtype=np.int64)
        return _Block(first, starts, ends, keep, (used + 7) // 8, masks)

    def __len__(self) -> int:
        return len(self.reference_lengths)

    def tokenize(self, text: str) -> list[str]:
        """ROUGE tokens of ``text``, with this index's tokenizer."""
        return list(self._tokenizer.tokenize(text))

    def lcs_lengths_tokens(self, candidate: Sequence[str]) -> np.ndarray:
        """LCS length of a token list against every reference (int64, index order)."""
        out = np.zeros(len(self), dtype=np.int64)
        if not candidate:
            return out
        for block in self._blocks:
            get = block.masks.get
            keep = block.keep
            v = keep
            for token in candidate:
                pm = get(token)
                if pm is None:
                    continue
                u = v & pm
                v = ((v + u) | (v - u)) & keep
            if v == keep:
                continue  # no candidate token matched anywhere in the block
            zeros = keep ^ v  # matched positions: the zero bits of V inside the fields
            bits = np.unpackbits(
                np.frombuffer(zeros.to_bytes(block.n_bytes, "little"), dtype=np.uint8),
                bitorder="little",
            )
            cumulative = np.concatenate(([0], np.cumsum(bits, dtype=np.int64)))
            lcs = cumulative[block.ends] - cumulative[block.starts]
            out[block.first : block.first + len(lcs)] = lcs
        return out

    def lcs_lengths(self, candidate: str) -> np.ndarray:
        """LCS length of ``candidate``'s tokens against every reference."""
        return self.lcs_lengths_tokens(self.tokenize(candidate))

    def scores_tokens(self, candidate: Sequence[str]) -> np.ndarray:
        """ROUGE-L F of a token list against every reference (float64, index order)."""
        lcs = self.lcs_lengths_tokens(candidate)
        scores = np.zeros(len(self), dtype=np.float64)
        hit = lcs > 0  # implies both token lists are non-empty
        if not hit.any():
            return scores
        lcs_hit = lcs[hit].astype(np.float64)
        # the same IEEE operations, in the same order, as rouge_score's Python floats
        precision = lcs_hit / float(len(candidate))
        recall = lcs_hit / self.reference_lengths[hit].astype(np.float64)
        scores[hit] = 2 * precision * recall / (precision + recall)
        return scores

    def scores(self, candidate: str) -> np.ndarray:
        """ROUGE-L F of ``candidate`` against every reference."""
        return self.scores_tokens(self.tokenize(candidate))

    def max_rouge_l_tokens(self, candidate: Sequence[str]) -> tuple[float, int]:
        """Best F over all references and the first reference reaching it.

        The index is -1 when the best F is 0.0 (no reference shares a token).
        """
        if len(self) == 0:
            return 0.0, -1
        scores = self.scores_tokens(candidate)
        best = int(np.argmax(scores))
        value = float(scores[best])
        return (value, best) if value > 0 else (0.0, -1)

    def max_rouge_l(self, candidate: str) -> tuple[float, int]:
        """``(best_f, best_index)`` of ``candidate`` over all references."""
        return self.max_rouge_l_tokens(self.tokenize(candidate))
