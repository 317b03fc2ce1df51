"""Text quality of generated notes: lexical diversity and length against real notes.

* ``distinct_n(texts, n)``: unique n-grams / total n-grams over the corpus.
  Words are the whitespace-separated words of each text, casefolded; n-grams
  are taken within each text (never across two texts); 0.0 when the corpus
  has no n-gram (every text shorter than ``n`` words).
* ``length_summary(texts)``: word counts (whitespace-separated words per text):
  n, mean, median, quartiles (numpy linear percentiles 25/75), min, max; the
  statistics are ``None`` when there are no texts.
* ``length_comparison(synthetic, real)``: both summaries and the two-sample
  Kolmogorov-Smirnov statistic on the word counts, ``D = max_x |F_s(x) -
  F_r(x)|`` over the empirical distribution functions (computed with numpy),
  with scipy's exact/asymptotic two-sided p-value (``scipy.stats.ks_2samp``,
  ``method="auto"``) when scipy is importable (``None`` otherwise, or when a
  side is empty).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from synthdeid.stats import quartiles

log = logging.getLogger(__name__)


def words(text: str) -> list[str]:
    """Whitespace-separated, casefolded words."""
    return text.casefold().split()


def distinct_n(texts: Iterable[str], n: int) -> float:
    """Unique n-grams / total n-grams over ``texts`` (see the module docstring)."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    unique: set[tuple[str, ...]] = set()
    total = 0
    for text in texts:
        tokens = words(text)
        grams = list(zip(*(tokens[i:] for i in range(n)), strict=False))
        total += len(grams)
        unique.update(grams)
    return len(unique) / total if total else 0.0


def word_counts(texts: Iterable[str]) -> np.ndarray:
    return np.array([len(text.split()) for text in texts], dtype=np.int64)


def length_summary(texts: Iterable[str]) -> dict[str, Any]:
    """Word-count summary: n, mean, median, q1, q3, min, max (``None`` when empty)."""
    counts = word_counts(texts)
    if counts.size == 0:
        return dict.fromkeys(("mean", "median", "q1", "q3", "min", "max"), None) | {"n": 0}
    q1, median, q3 = quartiles(counts)
    return {
        "n": int(counts.size),
        "mean": float(counts.mean()),
        "median": median,
        "q1": q1,
        "q3": q3,
        "min": int(counts.min()),
        "max": int(counts.max()),
    }


def ks_statistic(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> float:
    """Two-sample Kolmogorov-Smirnov statistic ``max |F_a - F_b|``."""
    x = np.sort(np.asarray(a, dtype=np.float64))
    y = np.sort(np.asarray(b, dtype=np.float64))
    if x.size == 0 or y.size == 0:
        raise ValueError("the KS statistic needs two non-empty samples")
    points = np.concatenate([x, y])
    cdf_x = np.searchsorted(x, points, side="right") / x.size
    cdf_y = np.searchsorted(y, points, side="right") / y.size
    return float(np.max(np.abs(cdf_x - cdf_y)))


def _ks_pvalue(a: np.ndarray, b: np.ndarray) -> float | None:
    try:
        from scipy.stats import ks_2samp
    except ImportError:  # pragma: no cover - scipy comes with scikit-learn
        log.info("scipy is not importable: no KS p-value")
        return None
    return float(ks_2samp(a, b).pvalue)


def length_comparison(synthetic: Iterable[str], real: Iterable[str]) -> dict[str, Any]:
    """Length summaries of both corpora and the KS statistic on their word counts."""
    synthetic_texts = list(synthetic)
    real_texts = list(real)
    a = word_counts(synthetic_texts)
    b = word_counts(real_texts)
    both = a.size > 0 and b.size > 0
    return {
        "unit": "whitespace-separated words per note",
        "synthetic": length_summary(synthetic_texts),
        "real": length_summary(real_texts),
        "ks_statistic": ks_statistic(a, b) if both else None,
        "ks_pvalue": _ks_pvalue(a, b) if both else None,
    }
