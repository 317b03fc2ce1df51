"""Scoring a synthesizer's samples against the real table (Lorenzo et al. 2026, Table 1).

:func:`score_sample` gives one sample's fidelity and similarity against the
train half and its novelty against both halves; the real holdout half is
scored the same way as the reference (``REFERENCE``, without novelty).
:func:`spread` summarizes a figure over a synthesizer's samples. The rows
are embedded by the bundled sentence encoder, each distinct text once
(:func:`cached_embedder`), or as one-hot vectors of their values.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from synthdeid.reporting import undefined_to_none
from synthdeid.tabular.metrics import (
    fidelity,
    identical_match_share,
    novelty,
    similarity,
    summarize_samples,
)

REFERENCE = "holdout (real)"


@dataclass(frozen=True)
class EvaluationSettings:
    """synth.tabular.evaluation: subsets for fidelity, the row encoder for similarity."""

    max_subsets: int | None = None
    encoder: str | bool | None = None  # None: bundled MiniLM; False: one-hot rows
    seed: int = 0


def onehot_embedder() -> Callable[[Sequence[str]], np.ndarray]:
    """Rows as indicator vectors of their ``variable: value`` pairs (no model needed)."""

    def embed(texts: Sequence[str]) -> np.ndarray:
        pairs = [text.split("; ") for text in texts]
        vocabulary = {p: i for i, p in enumerate(sorted({p for row in pairs for p in row}))}
        out = np.zeros((len(texts), len(vocabulary)), dtype=np.float32)
        for i, row in enumerate(pairs):
            out[i, [vocabulary[p] for p in row]] = 1.0
        return out

    return embed


def cached_embedder(
    encoder: str | bool | None, progress: bool
) -> Callable[[Sequence[str]], np.ndarray]:
    """The row encoder, each distinct text embedded once across every sample."""
    if encoder is False:
        return onehot_embedder()
    from synthdeid.embeddings import SentenceEncoder

    model = SentenceEncoder.load(encoder if isinstance(encoder, str) else None)
    cache: dict[str, np.ndarray] = {}

    def embed(texts: Sequence[str]) -> np.ndarray:
        new = [t for t in dict.fromkeys(texts) if t not in cache]
        if new:
            for text, vector in zip(new, model.embed(new, progress=progress), strict=True):
                cache[text] = vector
        return np.stack([cache[t] for t in texts])

    return embed


def score_sample(
    train: pd.DataFrame,
    holdout: pd.DataFrame,
    sample: pd.DataFrame,
    settings: EvaluationSettings,
    embed: Callable[[Sequence[str]], np.ndarray],
    with_novelty: bool,
) -> dict[str, float]:
    scores: dict[str, float] = {
        **fidelity(train, sample, max_subsets=settings.max_subsets, seed=settings.seed).as_dict(),
        "similarity": similarity(train, sample, embed),
    }
    if with_novelty:
        scores.update(novelty(train, holdout, sample).as_dict())
    else:
        scores["identical_match_share"] = identical_match_share(train, sample)
    return scores


def spread(values: list[float]) -> dict[str, float | None]:
    """Mean, std, min, max and n over samples; undefined figures (std of one) as None (JSON null)."""
    return undefined_to_none(summarize_samples(values))
