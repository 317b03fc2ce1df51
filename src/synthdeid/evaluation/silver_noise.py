"""The noise of a teacher's silver labels: the silver spans scored against the pool's gold.

Precision below 1 teaches the student false PHI, recall below 1 teaches it that
missed PHI is ordinary text. :func:`noise_rows`, :func:`noise_markdown` and
:func:`noise_document` are the table, its Markdown and its JSON; the figure is
:func:`synthdeid.evaluation.teacher_figures.plot_noise`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from synthdeid.evaluation.bootstrap import BootstrapResult
from synthdeid.evaluation.report import reported_labels
from synthdeid.evaluation.teacher_comparison import match_metrics, short_interval
from synthdeid.reporting import markdown_table
from synthdeid.scoring.metrics import ALL, DEFINITIONS

# headline figures reported for the silver labels, beside the per-label table
NOISE_HEADLINE: tuple[str, ...] = (
    "detection_recall",
    "detection_precision",
    "leakage_overlap_all",
)
NOISE_FIELDS: tuple[str, ...] = (
    "scope",
    "label",
    "metric",
    "estimate",
    "ci_lo",
    "ci_hi",
    "support",
    "predicted",
)


def noise_rows(result: BootstrapResult, match: str) -> list[dict[str, Any]]:
    """Long table: headline rows (:data:`NOISE_HEADLINE`), then precision/recall/F1 per label."""
    metrics = match_metrics(match)
    rows: list[dict[str, Any]] = [
        {
            "scope": "headline",
            "label": ALL,
            "metric": name,
            **result.headline[name].as_dict(),
            "support": result.support[ALL],
            "predicted": result.predicted[ALL],
        }
        for name in NOISE_HEADLINE
    ]
    for label in reported_labels(result):
        for part in ("precision", "recall", "f1"):
            rows.append(
                {
                    "scope": "label",
                    "label": label,
                    "metric": metrics[part],
                    **result.per_label[label][metrics[part]].as_dict(),
                    "support": result.support[label],
                    "predicted": result.predicted[label],
                }
            )
    return rows


def noise_caption(name: str, result: BootstrapResult, match: str) -> str:
    return (
        f"The silver labels of teacher {name} scored against the gold spans of the "
        f"{int(result.counts['n_notes'])} pool notes ({match} span matching); percentile "
        f"bootstrap 95% CIs over {result.n_resamples} document resamples (seed {result.seed}). "
        "Precision < 1 means the student learns false PHI: silver spans on ordinary text teach "
        "it to flag text that is not PHI. Recall < 1 means the student is taught that missed "
        "PHI is ordinary text: every gold span the silver labels miss is a negative training "
        "example."
    )


def noise_markdown(name: str, result: BootstrapResult, match: str) -> str:
    metrics = match_metrics(match)
    lines = [f"# Silver label noise: {name}", "", noise_caption(name, result, match), ""]
    lines += markdown_table(
        ["metric", "estimate [95% CI]", "definition"],
        [[m, short_interval(result.headline[m]), DEFINITIONS[m]] for m in NOISE_HEADLINE],
    )
    lines += ["", "## Per category", ""]
    lines += markdown_table(
        [
            "Category",
            "Silver P [95% CI]",
            "Silver R [95% CI]",
            "Silver F1 [95% CI]",
            "Support (gold spans)",
            "Predicted (silver spans)",
        ],
        [
            [
                label,
                *(
                    short_interval(result.per_label[label][metrics[part]])
                    for part in ("precision", "recall", "f1")
                ),
                str(result.support[label]),
                str(result.predicted[label]),
            ]
            for label in reported_labels(result)
        ],
    )
    return "\n".join([*lines, ""])


def noise_document(
    name: str, folder: Path, result: BootstrapResult, match: str, provenance: dict[str, Any]
) -> dict[str, Any]:
    metrics = match_metrics(match)
    return {
        "name": name,
        "dir": str(folder),
        "match": match,
        "metrics": metrics,
        "caption": noise_caption(name, result, match),
        "counts": result.counts,
        "headline": {m: result.headline[m].as_dict() for m in NOISE_HEADLINE},
        "per_label": {
            label: {
                **{part: result.per_label[label][m].as_dict() for part, m in metrics.items()},
                "support": result.support[label],
                "predicted": result.predicted[label],
            }
            for label in reported_labels(result)
        },
        "rows": noise_rows(result, match),
        "n_resamples": result.n_resamples,
        "seed": result.seed,
        "definitions": {m: DEFINITIONS[m] for m in NOISE_HEADLINE},
        "provenance": provenance,
    }
