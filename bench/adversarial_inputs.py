"""Benchmark steps on adversarial input sizes: each must scale linearly.

    python bench/adversarial_inputs.py [--size-factor 1.0] [--repeats 3]

Each case builds a hostile input of size n (a 120,000-character LOCATION
span, a note of 100,000 date-like tokens, ...) and times the step on n/4,
n/2 and n in this process. It prints the median seconds of each size and the
ratio of each time to the time at n/4 measured in the same run: linear work
gives ratios near 2 and 4, quadratic work near 4 and 16. The target is under
2 s at full size on a 2-core machine.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

TARGET_SECONDS = 2.0

# case name -> (full size n, builder: n -> a zero-argument callable that runs the step once)
Case = tuple[int, Callable[[int], Callable[[], object]]]
CASES: dict[str, Case] = {}


def case(name: str, size: int) -> Callable[[Callable[[int], Callable[[], object]]], object]:
    def register(
        build: Callable[[int], Callable[[], object]],
    ) -> Callable[[int], Callable[[], object]]:
        CASES[name] = (size, build)
        return build

    return register


def timed(run: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-factor", type=float, default=1.0, help="scale every case's n")
    parser.add_argument("--repeats", type=int, default=3, help="median of this many runs")
    parser.add_argument("--cases", nargs="*", default=None, help="only these cases")
    args = parser.parse_args()
    print("| case | n | s at n/4 | s at n/2 | s at n | ratio n/2 | ratio n | under 2 s |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for name, (size, build) in CASES.items():
        if args.cases and name not in args.cases:
            continue
        n = int(size * args.size_factor)
        seconds = [timed(build(max(1, n * k // 4)), args.repeats) for k in (1, 2, 4)]
        base = seconds[0] or float("nan")
        print(
            f"| {name} | {n:,} | {seconds[0]:.3f} | {seconds[1]:.3f} | {seconds[2]:.3f} "
            f"| {seconds[1] / base:.2f} | {seconds[2] / base:.2f} "
            f"| {'yes' if seconds[2] < TARGET_SECONDS else 'NO'} |"
        )


# ------------------------------------------------------------------ cases
# Each case imports what it needs inside its builder, so one case's imports
# do not slow another's timing.


@case("mask_repeated_date", 100_000)
def mask_repeated_date(n: int) -> Callable[[], object]:
    """mask_note on n ``1/`` tokens, every tenth a DATE gold span: one surface, n mentions."""
    from synthdeid.mask import mask_note
    from synthdeid.notes import Note, Span

    text = "1/ " * n
    spans = tuple(Span(3 * i, 3 * i + 2, "DATE") for i in range(0, n, 10))
    note = Note("bench", "bench", text, spans, "bench", "seed")
    return lambda: mask_note(note)


@case("mask_distinct_dates", 20_000)
def mask_distinct_dates(n: int) -> Callable[[], object]:
    """mask_note on n distinct dates, each a DATE gold span and mentioned again unmarked."""
    from synthdeid.mask import mask_note
    from synthdeid.notes import Note, Span

    tokens = [f"{i // 28 % 12 + 1}/{i % 28 + 1}/{1900 + i // 336}" for i in range(n)]
    text = " ".join(tokens) + " " + " ".join(tokens)
    spans, start = [], 0
    for token in tokens:
        spans.append(Span(start, start + len(token), "DATE"))
        start += len(token) + 1
    note = Note("bench", "bench", text, tuple(spans), "bench", "seed")
    return lambda: mask_note(note)


@case("location_long_span", 120_000)
def location_long_span(n: int) -> Callable[[], object]:
    """The location operator on one LOCATION span of n characters: words, no zip code."""
    from synthdeid.surrogate.keying import SurrogateKey
    from synthdeid.surrogate.operators.base import Mention
    from synthdeid.surrogate.operators.places import LocationOperator

    operator = LocationOperator(SurrogateKey(b"adversarial inputs benchmark"))
    mention = Mention(("a " * (n // 2 + 1))[:n], "LOCATION", "bench", "bench")
    return lambda: operator.replace(mention)


if __name__ == "__main__":
    main()
