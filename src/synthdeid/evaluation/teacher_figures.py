"""Figures of the teacher comparison: the distillation dumbbell plot and the silver label noise.

Colour and line style both tell a connector's direction (colour-blind safe);
a figure a system leaves undefined is written n/a, never drawn as 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from synthdeid.evaluation.bootstrap import BootstrapResult
from synthdeid.evaluation.report import reported_labels
from synthdeid.evaluation.teacher_comparison import Distillation, match_metrics
from synthdeid.figures import PALETTE, error_bars, mark_undefined, pyplot, save_figure
from synthdeid.reporting import NOT_AVAILABLE
from synthdeid.stats import is_undefined

if TYPE_CHECKING:
    from matplotlib.typing import LineStyleType


# connectors: colour and line style both tell the direction (colour-blind safe)
BETTER_OR_EQUAL: tuple[str, LineStyleType] = (PALETTE["sky"], "-")  # student >= teacher
WORSE: tuple[str, LineStyleType] = (PALETTE["vermillion"], "--")  # teacher ahead
TEACHER_COLOR = PALETTE["blue"]
STUDENT_COLOR = PALETTE["orange"]
PRECISION_COLOR = PALETTE["blue"]
RECALL_COLOR = PALETTE["orange"]
TOLERANCE = 1e-12


def plot_distillation(d: Distillation, rows: Sequence[dict[str, Any]], path: Path) -> Any:
    """Dumbbell plot (SHIELD, Figure 7): precision and recall panels, one row per label.

    Each system's point carries its 95% bootstrap interval (horizontal bar);
    a figure a system leaves undefined is written n/a on its row. Returns the
    (closed) figure.
    """
    from matplotlib.lines import Line2D

    plt = pyplot()
    labels = d.labels
    positions = np.arange(len(labels), dtype=float)[::-1]  # first label on top
    offsets = {"teacher": 0.12, "student": -0.12}
    fig, axes = plt.subplots(1, 2, figsize=(10.0, 0.55 * len(labels) + 2.6), sharey=True)
    for ax, part in zip(axes, ("precision", "recall"), strict=True):
        for row, y in zip(rows, positions, strict=True):
            teacher, student = row[f"teacher_{part}"], row[f"student_{part}"]
            if is_undefined(teacher) or is_undefined(student):
                continue  # no connector; the undefined side is written n/a below
            color, style = BETTER_OR_EQUAL if student >= teacher - TOLERANCE else WORSE
            ax.plot(
                [teacher, student],
                [y + offsets["teacher"], y + offsets["student"]],
                color=color,
                linestyle=style,
                linewidth=2.0,
                zorder=1,
            )
            if row[f"{part}_significant"]:
                ax.annotate(
                    "*",
                    (max(teacher, student), y),
                    xytext=(8, -4),
                    textcoords="offset points",
                    color=PALETTE["black"],
                    fontsize=12,
                )
        for system, marker, color, z in (
            ("teacher", "o", TEACHER_COLOR, 2),
            ("student", "D", STUDENT_COLOR, 3),
        ):
            shown = [
                (row, y)
                for row, y in zip(rows, positions, strict=True)
                if not is_undefined(row[f"{system}_{part}"])
            ]
            estimates = [row[f"{system}_{part}"] for row, _ in shown]
            lower = [
                0.0
                if is_undefined(row[f"{system}_{part}_lo"])
                else est - row[f"{system}_{part}_lo"]
                for (row, _), est in zip(shown, estimates, strict=True)
            ]
            upper = [
                0.0
                if is_undefined(row[f"{system}_{part}_hi"])
                else row[f"{system}_{part}_hi"] - est
                for (row, _), est in zip(shown, estimates, strict=True)
            ]
            ax.errorbar(
                estimates,
                [y + offsets[system] for _, y in shown],
                xerr=np.clip(np.array([lower, upper], dtype=float).reshape(2, -1), 0.0, None),
                fmt=marker,
                markersize=6,
                capsize=3,
                elinewidth=1.2,
                color=color,
                zorder=z,
            )
            mark_undefined(
                ax,
                [
                    float(y) + offsets[system]
                    for row, y in zip(rows, positions, strict=True)
                    if is_undefined(row[f"{system}_{part}"])
                ],
                horizontal=True,
                text=f"{system}: {NOT_AVAILABLE}",
            )
        ax.set_xlim(-0.02, 1.1)
        ax.set_xlabel(f"span {d.match} {part} (0 to 1)")
        ax.set_title(f"{part} (95% bootstrap interval)", fontsize=10)
        ax.grid(axis="x", alpha=0.3)
    axes[0].set_yticks(positions, [f"{row['label']} (n={row['support']})" for row in rows])
    axes[0].set_ylabel("PHI label (n = gold spans)")
    axes[0].set_ylim(-0.7, len(labels) - 0.3)
    handles = [
        Line2D(
            [], [], marker="o", linestyle="", color=TEACHER_COLOR, label=f"{d.teacher} (teacher)"
        ),
        Line2D(
            [], [], marker="D", linestyle="", color=STUDENT_COLOR, label=f"{d.student} (student)"
        ),
        Line2D(
            [],
            [],
            color=BETTER_OR_EQUAL[0],
            linestyle=BETTER_OR_EQUAL[1],
            linewidth=2.0,
            label="student >= teacher",
        ),
        Line2D([], [], color=WORSE[0], linestyle=WORSE[1], linewidth=2.0, label="teacher ahead"),
    ]
    fig.legend(handles=handles, loc="lower center", ncol=4, fontsize=8, frameon=False)
    n_notes = int(d.teacher_result.counts["n_notes"])
    fig.suptitle(
        f"{d.teacher} (teacher) vs. {d.student} (student) on n = {n_notes} notes: span "
        f"{d.match} matching (* significant after Bonferroni)",
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    save_figure(fig, path)
    return fig


def plot_noise(name: str, result: BootstrapResult, match: str, path: Path) -> Any:
    """Per-label silver precision and recall with 95% CI error bars, two markers per label.

    A figure undefined for a label (precision where the teacher gave it no
    span, recall where it has no gold) is written n/a. Returns the (closed) figure.
    """
    metrics = match_metrics(match)
    plt = pyplot()
    labels = reported_labels(result)
    positions = np.arange(len(labels), dtype=float)
    fig, ax = plt.subplots(figsize=(max(5.0, 0.9 * len(labels) + 2.0), 4.2))
    for part, offset, marker, color in (
        ("precision", -0.12, "o", PRECISION_COLOR),
        ("recall", 0.12, "s", RECALL_COLOR),
    ):
        intervals = [result.per_label[label][metrics[part]] for label in labels]
        shown = [k for k, i in enumerate(intervals) if i.defined]
        ax.errorbar(
            positions[shown] + offset,
            [intervals[k].estimate for k in shown],
            yerr=error_bars([intervals[k] for k in shown]),
            fmt=marker,
            capsize=3,
            color=color,
            label=f"silver {part}",
        )
        mark_undefined(
            ax, [positions[k] + offset for k, i in enumerate(intervals) if not i.defined]
        )
    ticks = [f"{label}\n(n={result.support[label]})" for label in labels]
    ax.set_xticks(positions, ticks, fontsize=8)
    ax.set_xlim(-0.6, len(labels) - 0.4)
    ax.set_ylim(-0.02, 1.05)
    ax.set_xlabel("PHI label (n = gold spans)")
    ax.set_ylabel(f"span {match} precision / recall (0 to 1)")
    ax.set_title(
        f"{name}: silver label noise on n = {int(result.counts['n_notes'])} pool notes\n"
        f"({match} matching, 95% bootstrap interval)",
        fontsize=10,
    )
    ax.legend(fontsize=8, loc="best")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    save_figure(fig, path)
    return fig
