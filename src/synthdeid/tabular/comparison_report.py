"""The synthesizer comparison as a table, a long CSV and a figure.

:func:`comparison_markdown` lays the figures out as Table 1 of Lorenzo et
al. 2026 (metrics as rows, synthesizers as columns, mean +- standard deviation
over the samples); :func:`comparison_figure` draws fidelity by order and two
novelty shares per synthesizer. A figure undefined on every sample is n/a.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import numpy as np

from synthdeid.figures import PALETTE, mark_undefined, pyplot, save_figure
from synthdeid.reporting import NOT_AVAILABLE, markdown_table, percent
from synthdeid.stats import is_undefined
from synthdeid.tabular.budget import TOLERANCE as EPSILON_TOLERANCE

FIDELITY_ROWS = (
    ("overall", "Overall accuracy"),
    ("univariate", "Accuracy - univariate"),
    ("bivariate", "Accuracy - bivariate"),
    ("trivariate", "Accuracy - trivariate"),
)
NOVELTY_ROWS = (
    ("identical_match_share", "% identical matches (lower is better)"),
    ("nndr_ratio", "NNDR, synthetic / holdout (higher is more novel)"),
    ("dcr_share", "DCR share (0.5 is ideal)"),
    ("dcr_overfitting_score", "DCR overfitting score (1 is best)"),
)
PERCENT = {"overall", "univariate", "bivariate", "trivariate", "identical_match_share", "dcr_share"}


def _number(value: float, key: str) -> str:
    if is_undefined(value):
        return NOT_AVAILABLE
    return percent(value, 2) if key in PERCENT else f"{value:.3f}"


def privacy_cell(result: dict[str, Any]) -> str:
    """``epsilon 3``, or ``epsilon 0.878 accounted (budget 3)`` where the synthesizer's own
    accountant reports less than its budget (DP-CTGAN after its configured epochs)."""
    budget, accounted = result.get("epsilon"), result.get("epsilon_accounted")
    if budget is None:
        return str(result.get("privacy", ""))
    if accounted is None or abs(accounted - budget) <= EPSILON_TOLERANCE:
        return f"epsilon {budget:g}"
    return f"epsilon {accounted:.3g} accounted (budget {budget:g})"


def comparison_markdown(results: list[dict[str, Any]]) -> str:
    """Metrics as rows, synthesizers as columns (mean, with the spread over samples)."""
    labels = [r["label"] for r in results]
    table = [
        [
            "**Privacy**",
            *(privacy_cell(r) for r in results),
        ]
    ]
    sections = (
        ("**Fidelity**", FIDELITY_ROWS),
        ("**Similarity**", (("similarity", "Cosine similarity"),)),
        ("**Novelty**", NOVELTY_ROWS),
    )
    for title, rows in sections:
        table.append([title, *([""] * len(labels))])
        for key, name in rows:
            cells = []
            for r in results:
                metric = r["metrics"].get(key)
                if metric is None:  # not measured for this column (the real reference)
                    cells.append("-")
                    continue
                if metric["mean"] is None:  # undefined on every sample
                    cells.append(NOT_AVAILABLE)
                    continue
                std = metric["std"]
                text = _number(metric["mean"], key)
                if std is not None and metric["n"] > 1:
                    text += f" ± {_number(std, key)}"
                cells.append(text)
            table.append([name, *cells])
    samples = ", ".join(f"{r['label']} {r['samples']}" for r in results)
    lines = markdown_table(["Metric \\ Synthesizer", *labels], table)
    lines.append("")
    lines.append(
        f"Mean ± standard deviation over independent samples ({samples}); "
        f"-: not measured for the real reference; {NOT_AVAILABLE}: undefined."
    )
    return "\n".join(lines) + "\n"


def comparison_csv(results: list[dict[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["synthesizer", "metric", "mean", "std", "min", "max", "n"])
    for r in results:
        for key, m in r["metrics"].items():
            writer.writerow([r["label"], key, m["mean"], m["std"], m["min"], m["max"], m["n"]])
    return buffer.getvalue()


# legend names of the figure's series (the table's row names, without the hints)
FIGURE_LABELS: dict[str, str] = {
    "univariate": "univariate",
    "bivariate": "bivariate",
    "trivariate": "trivariate",
    "identical_match_share": "identical matches with training rows",
    "dcr_share": "DCR share (closer to a training row than to a holdout row)",
}


def comparison_figure(results: list[dict[str, Any]], path: Path) -> Any:
    """Fidelity by order and two novelty figures per synthesizer, with the spread over samples.

    Bars are means over each synthesizer's samples (n in the tick labels),
    error bars the standard deviation; an undefined mean is written n/a.
    Returns the (closed) figure.
    """
    plt = pyplot()
    labels = [f"{r['label']}\n(n = {r['samples']})" for r in results]
    x = np.arange(len(labels))
    figure, axes = plt.subplots(1, 2, figsize=(max(9, 1.8 * len(labels) + 4), 4.6))
    panels = (
        (axes[0], ("univariate", "bivariate", "trivariate"), "Fidelity (accuracy, 1 is best)"),
        (axes[1], ("identical_match_share", "dcr_share"), "Novelty (shares of rows)"),
    )
    for ax, keys, title in panels:
        width = 0.8 / len(keys)
        for j, key in enumerate(keys):
            means = [r["metrics"].get(key, {}).get("mean") for r in results]
            stds = [r["metrics"].get(key, {}).get("std") for r in results]
            shown = [k for k, m in enumerate(means) if m is not None and not np.isnan(m)]
            offsets = x + (j - (len(keys) - 1) / 2) * width
            ax.bar(
                offsets[shown],
                [means[k] for k in shown],
                width,
                yerr=[0.0 if stds[k] is None or np.isnan(stds[k]) else stds[k] for k in shown],
                capsize=2,
                label=FIGURE_LABELS[key],
            )
            mark_undefined(ax, [float(offsets[k]) for k in range(len(means)) if k not in shown])
        ax.set_xticks(x, labels, rotation=30, ha="right", fontsize=8)
        ax.set_xlabel("synthesizer (n = independent samples)")
        ax.set_ylim(0, 1.12)
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=7, loc="upper right")
    axes[0].set_ylabel("accuracy (1 - half the L1 distance, 0 to 1)")
    axes[1].set_ylabel("share of synthetic rows (0 to 1)")
    axes[1].axhline(0.5, color=PALETTE["grey"], linewidth=0.8, linestyle="--")
    figure.suptitle("Mean over samples, error bars: standard deviation", fontsize=9)
    figure.tight_layout()
    save_figure(figure, path)
    return figure
