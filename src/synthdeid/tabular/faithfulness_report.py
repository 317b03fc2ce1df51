"""The faithfulness check's report: accuracy tables, the sentence a uniform result gets, figures.

Per variable, the share of judged reports stating the row's value; per
document, the buckets of Lorenzo et al. 2026 (Table 3); with an LLM judge, its
agreement with the rule checker. An accuracy nothing was judged for is n/a;
when every accuracy is 0, 1 or n/a, :func:`uniform_finding` says what that
means (the figure's title and the table's first line).
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import numpy as np

from synthdeid.figures import PALETTE, pyplot, save_figure
from synthdeid.reporting import NOT_AVAILABLE, markdown_table, number_or_na, percent
from synthdeid.tabular.faithfulness import Agreement


def accuracy_table(
    per_variable: dict[str, float | None], overall: float | None, buckets: dict[str, float] | None
) -> str:
    """Accuracies over the judged pairs; n/a where nothing was judged."""
    accuracies = [[name, number_or_na(value, ".3f")] for name, value in per_variable.items()]
    accuracies.append(["**Overall**", f"**{number_or_na(overall, '.3f')}**"])
    shares = (
        [["(no document with a judged variable)", NOT_AVAILABLE]]
        if buckets is None
        else [[name, percent(share)] for name, share in buckets.items()]
    )
    lines = markdown_table(["Variable", "Accuracy"], accuracies)
    lines += ["", *markdown_table(["Document accuracy bucket", "Share of documents"], shares)]
    return "\n".join(lines) + "\n"


def uniform_finding(
    per_variable: dict[str, float | None], n_reports: int, checker: str
) -> str | None:
    """A plain sentence when every accuracy is 0, 1 or undefined (bars that show no contrast).

    Such a figure is not a finding about particular variables: the title says
    what it means (e.g. that the checker found no variable stated correctly in
    any of the reports), with n. None when the accuracies differ.
    """
    judged = [value for value in per_variable.values() if value is not None]
    if not judged:
        return f"n/a: the {checker} checker judged no variable in the {n_reports} reports"
    if all(value == 0 for value in judged):
        return (
            f"The {checker} checker found no variable stated correctly in any of the "
            f"{n_reports} reports"
        )
    if all(value == 1 for value in judged):
        return (
            f"The {checker} checker found every variable stated correctly in all "
            f"{n_reports} reports"
        )
    return None


def accuracy_figure(
    per_variable: dict[str, float | None],
    buckets: dict[str, float] | None,
    path: Path,
    *,
    n_reports: int,
    checker: str,
) -> Any:
    """Per-variable accuracy (n/a written where none was judged) and the document buckets.

    Every bar carries its value, so a 0 is seen as 0, not as a missing bar;
    when every accuracy is 0, 1 or undefined the figure says so in its title
    (:func:`uniform_finding`). Returns the (closed) figure.
    """
    plt = pyplot()
    figure, axes = plt.subplots(1, 2, figsize=(11, 4.6), gridspec_kw={"width_ratios": [3, 2]})
    names = list(per_variable)
    positions = np.arange(len(names))
    values = [per_variable[n] for n in names]
    axes[0].barh(positions, [v if v is not None else 0.0 for v in values], color=PALETTE["blue"])
    for y, value in zip(positions, values, strict=True):
        text = NOT_AVAILABLE if value is None else f"{value:.2f}"
        shown = 0.0 if value is None else value
        inside = shown > 0.85
        axes[0].text(
            shown - 0.01 if inside else shown + 0.01,
            y,
            text,
            va="center",
            ha="right" if inside else "left",
            fontsize=7,
            color="white" if inside else PALETTE["black"],
        )
    axes[0].set_yticks(positions, names, fontsize=8)
    axes[0].invert_yaxis()
    axes[0].set_xlim(0, 1)
    axes[0].set_xlabel("share of judged reports stating the variable correctly (0 to 1)")
    axes[0].set_ylabel("variable")
    axes[0].set_title(f"Per-variable accuracy (n = {n_reports} reports)", fontsize=10)
    if buckets is None:
        axes[1].text(0.5, 0.5, f"{NOT_AVAILABLE}: no report judged", ha="center", va="center")
        axes[1].set_xticks([])
    else:
        bars = axes[1].bar(
            list(buckets), [100 * v for v in buckets.values()], color=PALETTE["green"]
        )
        axes[1].bar_label(bars, labels=[f"{100 * v:.0f}%" for v in buckets.values()], fontsize=7)
        axes[1].set_ylim(0, 110)
        axes[1].tick_params(axis="x", rotation=30)
    axes[1].set_xlabel("share of a report's variables stated correctly")
    axes[1].set_ylabel("% of documents")
    axes[1].set_title(f"Document-level accuracy (n = {n_reports} reports)", fontsize=10)
    finding = uniform_finding(per_variable, n_reports, checker)
    if finding is not None:
        figure.suptitle(textwrap.fill(finding, width=100, break_on_hyphens=False), fontsize=10)
    figure.tight_layout()
    save_figure(figure, path)
    return figure


def agreement_line(found: Agreement) -> str:
    """The judge's agreement with the rule checker, n/a where it is undefined."""
    observed = number_or_na(found.observed, ".3f")
    kappa = number_or_na(found.kappa, ".3f")
    return (
        f"Agreement with the rule checker over {found.pairs} judged pairs: "
        f"{observed} (Cohen's kappa {kappa})."
    )


def message_figure(message: str, path: Path) -> Any:
    """A figure that only says ``message`` (no report to draw). Returns the (closed) figure."""
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(6, 2))
    axis.axis("off")
    axis.text(0.5, 0.5, message, ha="center", va="center")
    save_figure(figure, path)
    return figure
