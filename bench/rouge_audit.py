"""Benchmark the bit-parallel max ROUGE-L against rouge_score's scorer.

    python bench/rouge_audit.py [--samples 50] [--references 300] [--words 150]

Texts are synthetic: words drawn from a Zipf-like distribution over a
vocabulary of made-up words (so common words repeat, as in prose), each text
``--words`` words long on average (uniform within +/- 20%). For every sample
both methods compute the maximum ROUGE-L F over all references:
``RougeIndex.max_rouge_l`` (index built once, its build time included) and
``RougeScorer(["rougeL"]).score`` on every pair. The maxima are checked to be
equal; the script prints both wall times and the speedup.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from rouge_score import rouge_scorer

from synthdeid.dplm.rouge import DEFAULT_BLOCK_BITS, RougeIndex


def make_texts(rng: np.random.Generator, count: int, words: int, vocab: list[str]) -> list[str]:
    ranks = np.arange(1, len(vocab) + 1, dtype=np.float64)
    weights = 1.0 / ranks
    weights /= weights.sum()
    lengths = rng.integers(int(words * 0.8), int(words * 1.2) + 1, size=count)
    return [" ".join(rng.choice(vocab, size=int(n), p=weights)) for n in lengths]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=50)
    parser.add_argument("--references", type=int, default=300)
    parser.add_argument("--words", type=int, default=150, help="mean words per text")
    parser.add_argument("--vocab", type=int, default=3000, help="vocabulary size")
    parser.add_argument("--block-bits", type=int, default=DEFAULT_BLOCK_BITS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--skip-baseline", action="store_true", help="time only the bit-parallel index"
    )
    args = parser.parse_args()

    rng = np.random.default_rng(args.seed)
    letters = list("abcdefghijklmnopqrstuvwxyz")
    vocab = sorted(
        {"".join(rng.choice(letters, size=rng.integers(2, 9))) for _ in range(args.vocab)}
    )
    references = make_texts(rng, args.references, args.words, vocab)
    samples = make_texts(rng, args.samples, args.words, vocab)

    start = time.perf_counter()
    index = RougeIndex(references, block_bits=args.block_bits)
    built = time.perf_counter()
    fast = [index.max_rouge_l(sample)[0] for sample in samples]
    fast_s = time.perf_counter() - start
    result: dict[str, float | int | bool | None] = {
        "samples": args.samples,
        "references": args.references,
        "mean_words": args.words,
        "pairs": args.samples * args.references,
        "bit_parallel_s": round(fast_s, 4),
        "bit_parallel_index_build_s": round(built - start, 4),
        "rouge_score_s": None,
        "speedup": None,
        "equal": None,
    }
    if not args.skip_baseline:
        scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False)
        start = time.perf_counter()
        slow = [
            max(scorer.score(target=r, prediction=s)["rougeL"].fmeasure for r in references)
            for s in samples
        ]
        slow_s = time.perf_counter() - start
        result |= {
            "rouge_score_s": round(slow_s, 4),
            "speedup": round(slow_s / fast_s, 1),
            "equal": fast == slow,
        }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
