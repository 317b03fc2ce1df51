"""The extraction comparison as people read it: a table (Markdown, CSV) and a figure.

Rows are the spec's variables and the overall mean; columns, per extractor,
accuracy and F1 as in Table 4 of Lorenzo et al. 2026. The overall accuracy
carries its 95% bootstrap interval over test reports. Undefined figures read
n/a, never 0.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from synthdeid.figures import error_bars, pyplot, save_figure
from synthdeid.reporting import NOT_AVAILABLE, markdown_table, number_or_na
from synthdeid.stats import Interval
from synthdeid.tabular.extraction import ExtractionScores


def _interval_text(found: Interval | None) -> str:
    if found is None:
        return NOT_AVAILABLE
    return f"{found.estimate:.3f} [{number_or_na(found.lo)}, {number_or_na(found.hi)}]"


def extraction_table(scores: Mapping[str, ExtractionScores]) -> str:
    """Markdown: one row per variable and the overall row; Acc and F1 per extractor."""
    methods = list(scores)
    header = ["Variable", *(f"Acc {m}" for m in methods), *(f"F1 {m}" for m in methods)]
    names = list(next(iter(scores.values())).per_variable) if scores else []
    rows = [
        [
            name,
            *(number_or_na(scores[m].per_variable[name].accuracy) for m in methods),
            *(number_or_na(scores[m].per_variable[name].f1) for m in methods),
        ]
        for name in names
    ]
    rows.append(
        [
            "**Overall** (accuracy: 95% CI over reports)",
            *(_interval_text(scores[m].accuracy) for m in methods),
            *(number_or_na(scores[m].f1) for m in methods),
        ]
    )
    return "\n".join(markdown_table(header, rows)) + "\n"


def extraction_csv(scores: Mapping[str, ExtractionScores]) -> str:
    """CSV: extractor, variable (``overall`` last), reports, answered, accuracy, F1, CI."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(
        ["extractor", "variable", "reports", "answered", "accuracy", "f1", "ci_low", "ci_high"]
    )
    for method, found in scores.items():
        for name, s in found.per_variable.items():
            writer.writerow([method, name, s.reports, s.answered, s.accuracy, s.f1, "", ""])
        overall = found.accuracy
        writer.writerow(
            [
                method,
                "overall",
                "",
                "",
                overall.estimate if overall else None,
                found.f1,
                overall.lo if overall else None,
                overall.hi if overall else None,
            ]
        )
    return buffer.getvalue()


def extraction_figure(
    scores: Mapping[str, ExtractionScores], path: Path, *, n_reports: int, title: str
) -> Any:
    """Accuracy per variable and overall (with its interval) per extractor; n/a marked.

    Returns the (closed) figure.
    """
    plt = pyplot()
    methods = list(scores)
    names = [*next(iter(scores.values())).per_variable, "overall"] if scores else []
    figure, ax = plt.subplots(figsize=(9, 0.26 * len(names) * max(1, len(methods)) + 1.6))
    height = 0.8 / max(1, len(methods))
    positions = np.arange(len(names))
    for k, method in enumerate(methods):
        found = scores[method]
        values = [found.per_variable[n].accuracy for n in names[:-1]]
        values.append(found.accuracy.estimate if found.accuracy else None)
        ys = positions + (k - (len(methods) - 1) / 2) * height
        ax.barh(ys, [0.0 if v is None else v for v in values], height=height, label=method)
        ends = [0.0 if v is None else v for v in values]
        if found.accuracy is not None:
            ax.errorbar(
                [found.accuracy.estimate],
                [ys[-1]],
                xerr=error_bars([found.accuracy]),
                fmt="none",
                ecolor="black",
                capsize=3,
            )
            ends[-1] = max(ends[-1], found.accuracy.hi)  # the label goes past the interval
        for y, value, end in zip(ys, values, ends, strict=True):
            text = NOT_AVAILABLE if value is None else f"{value:.2f}"
            ax.text(end + 0.01, y, text, va="center", fontsize=6)
    ax.set_yticks(positions, names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 1.12)
    ax.set_xlabel("accuracy (share of test reports with the variable read correctly)")
    ax.set_ylabel("variable")
    ax.set_title(f"{title} (n = {n_reports} test reports)", fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    figure.tight_layout()
    save_figure(figure, path)
    return figure


def extraction_markdown(scores: Mapping[str, ExtractionScores], n_train: int, n_scored: int) -> str:
    """What was trained on and scored on, then :func:`extraction_table`; says when no LLM
    baseline was run (no backend configured)."""
    baselines = (
        ""
        if len(scores) > 1
        else " No LLM backend is configured (synth.tabular.extraction.llm.backend), so the 0-shot"
        " and few-shot baselines are n/a."
    )
    return (
        f"Extractors trained on {n_train} synthetic reports (faithful pairs), scored on "
        f"{n_scored} reports of real holdout rows written by the seeded grammar (real values, "
        f"not real report text).{baselines}\n\n" + extraction_table(scores)
    )


def extraction_summary(
    scores: Mapping[str, ExtractionScores],
    everything: ExtractionScores,
    failures: Mapping[str, Mapping[str, int]],
    trained: Mapping[str, Any],
    n_train: int,
    n_scored: int,
    n_tests: int,
) -> dict[str, Any]:
    """extraction.json without its provenance: the reports trained and scored on, every
    extractor's scores, the fine-tuned one's on every test report, the LLM answers that
    named no value, and what the fine-tuning did."""
    return {
        "training_reports": n_train,
        "test_reports": n_scored,
        "test_reports_written": n_tests,
        "test_reports_from": "real holdout rows, written by the seeded grammar",
        "extractors": {name: found.as_dict() for name, found in scores.items()},
        "fine_tuned_on_every_test_report": everything.as_dict(),
        "llm_answers_naming_no_value": failures,
        "fine_tuning": trained,
    }
