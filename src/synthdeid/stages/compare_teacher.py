"""Teacher vs. student per PHI category, and the noise of the silver labels (compare-teacher).

SHIELD (Table 2, Figure 7) compares the teacher (an LLM labelling the gold
holdout) with its student (a small NER model trained on the teacher's silver
labels) on the same notes: per category precision and recall with percentile
bootstrap 95% intervals over document resamples, the gold support, and paired
bootstrap tests of ``student - teacher`` for precision and for recall, each a
family Bonferroni-corrected over the categories with gold support.

Inputs are ``evaluate-ner`` output folders; their ``per_document.parquet``
is re-scored here (:mod:`~synthdeid.evaluation.bootstrap`), so nothing is
predicted again.

* ``--teacher NAME=DIR`` and ``--student NAME=DIR``: the two systems scored on
  the same gold notes. One resample matrix serves both systems and both tests.
  Writes distillation.csv / .md / .json, distillation.html (the table, for the
  report) and distillation.png (dumbbell plot: precision and recall panels, a
  teacher and a student dot per category with its 95% interval, joined by a
  solid line when the student is at least as good and a dashed one otherwise).
  A figure a system leaves undefined (precision of a category it never
  predicted) is n/a, never 0.
* ``--silver TEACHER=DIR``: a teacher's silver pool labels scored against the gold spans of the
  pool notes, i.e. how noisy the student's training labels are. Writes
  silver_noise.csv / .md / .json and silver_noise.png.

``--match overlap`` (default) compares span overlap precision and recall,
``--match exact`` exact-boundary ones. Outputs of a branch whose inputs are
not given are not written.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from synthdeid.artifacts import atomic_text, make_provenance, write_json_atomic
from synthdeid.cli_types import named_input_dir, output_dir, positive_int
from synthdeid.errors import ConfigError
from synthdeid.evaluation.bootstrap import (
    BootstrapResult,
    PairedTestResult,
    bootstrap_metrics,
    paired_bootstrap_test,
)
from synthdeid.evaluation.compare import load_runs
from synthdeid.evaluation.metrics import ALL, DEFINITIONS, CountTable
from synthdeid.evaluation.report import (
    PER_DOCUMENT,
    plot_not_scored,
    read_per_document,
    reported_labels,
)
from synthdeid.figures import PALETTE, error_bars, mark_undefined, pyplot, save_figure
from synthdeid.reporting import (
    NOT_AVAILABLE,
    format_interval,
    markdown_table,
    number_or_na,
    p_text,
    undefined_to_none,
    write_csv,
    write_html,
)
from synthdeid.stats import ALPHA, N_RESAMPLES, SEED, Interval, is_undefined, resample_weights

if TYPE_CHECKING:
    from matplotlib.typing import LineStyleType

log = logging.getLogger(__name__)

MATCHES: tuple[str, ...] = ("overlap", "exact")
DISTILLATION = "distillation"
SILVER_NOISE = "silver_noise"
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
# connectors: colour and line style both tell the direction (colour-blind safe)
BETTER_OR_EQUAL: tuple[str, LineStyleType] = (PALETTE["sky"], "-")  # student >= teacher
WORSE: tuple[str, LineStyleType] = (PALETTE["vermillion"], "--")  # teacher ahead
TEACHER_COLOR = PALETTE["blue"]
STUDENT_COLOR = PALETTE["orange"]
PRECISION_COLOR = PALETTE["blue"]
RECALL_COLOR = PALETTE["orange"]
TOLERANCE = 1e-12


def match_metrics(match: str) -> dict[str, str]:
    """``precision`` / ``recall`` / ``f1`` -> the per-label ratio used for ``match``."""
    if match not in MATCHES:
        raise ConfigError(f"--match must be one of {list(MATCHES)}, got {match!r}")
    return {part: f"{match}_{part}" for part in ("precision", "recall", "f1")}


def distillation_fields() -> list[str]:
    fields = ["label", "support"]
    for system in ("teacher", "student"):
        for part in ("precision", "recall"):
            fields += [f"{system}_{part}", f"{system}_{part}_lo", f"{system}_{part}_hi"]
    for part in ("precision", "recall"):
        fields += [
            f"{part}_diff",
            f"{part}_diff_lo",
            f"{part}_diff_hi",
            f"{part}_p",
            f"{part}_p_bonferroni",
            f"{part}_significant",
        ]
    return [*fields, "m"]


@dataclass(frozen=True)
class Distillation:
    """Both systems' intervals and the two paired test families (student - teacher)."""

    teacher: str
    student: str
    match: str
    alpha: float
    teacher_result: BootstrapResult
    student_result: BootstrapResult
    tests: dict[str, PairedTestResult]  # "precision" / "recall" -> test family

    @property
    def labels(self) -> list[str]:
        """Labels with gold support, then ALL (the rows of the tests)."""
        return [row.label for row in self.tests["recall"].rows]

    @property
    def m(self) -> int:
        return self.tests["recall"].m


def compare_distillation(
    teacher: tuple[str, CountTable],
    student: tuple[str, CountTable],
    *,
    match: str,
    n_resamples: int,
    seed: int,
    alpha: float,
) -> Distillation:
    """Score both tables (already aligned by :func:`load_runs`) on one resample matrix."""
    (teacher_name, teacher_table), (student_name, student_table) = teacher, student
    metrics = match_metrics(match)
    weights = resample_weights(len(teacher_table.note_ids), n_resamples, seed)
    teacher_result, student_result = (
        bootstrap_metrics(table, n_resamples=n_resamples, seed=seed, weights=weights)
        for table in (teacher_table, student_table)
    )
    tests = {
        part: paired_bootstrap_test(
            student_table,
            teacher_table,
            metric=metrics[part],
            n_resamples=n_resamples,
            seed=seed,
            weights=weights,
            alpha=alpha,
        )
        for part in ("precision", "recall")
    }
    return Distillation(
        teacher_name, student_name, match, alpha, teacher_result, student_result, tests
    )


def distillation_rows(d: Distillation) -> list[dict[str, Any]]:
    """One row per label with gold support, then ALL (see :func:`distillation_fields`).

    Undefined figures (precision of a category a system never predicted, a
    difference involving one, its p) are None.
    """
    metrics = match_metrics(d.match)
    tested = {part: {row.label: row for row in t.rows} for part, t in d.tests.items()}
    rows = []
    for label in d.labels:
        row: dict[str, Any] = {"label": label, "support": tested["recall"][label].support}
        for system, result in (("teacher", d.teacher_result), ("student", d.student_result)):
            for part in ("precision", "recall"):
                interval = result.per_label[label][metrics[part]]
                row[f"{system}_{part}"] = interval.estimate
                row[f"{system}_{part}_lo"] = interval.lo
                row[f"{system}_{part}_hi"] = interval.hi
        for part in ("precision", "recall"):
            test = tested[part][label]
            row[f"{part}_diff"] = test.diff
            row[f"{part}_diff_lo"] = test.diff_lo
            row[f"{part}_diff_hi"] = test.diff_hi
            row[f"{part}_p"] = test.p
            row[f"{part}_p_bonferroni"] = test.p_bonferroni
            row[f"{part}_significant"] = test.significant
        row["m"] = d.m
        rows.append(undefined_to_none(row))
    return rows


def short_interval(interval: Interval) -> str:
    """``0.89 [0.86-0.93]``, as in SHIELD's Table 2; n/a where undefined."""
    return format_interval(interval, ".2f", sep="-")


def difference_cell(row: dict[str, Any], part: str, n_resamples: int) -> str:
    """``+0.12 (0.0040)*``, the Bonferroni-adjusted p in brackets; n/a without a difference."""
    if is_undefined(row[f"{part}_diff"]):
        return NOT_AVAILABLE
    mark = "*" if row[f"{part}_significant"] else ""
    p = p_text(row[f"{part}_p_bonferroni"], n_resamples, row["m"])
    return f"{row[f'{part}_diff']:+.2f} ({p}){mark}"


def significant_summary(rows: Sequence[dict[str, Any]], n_resamples: int) -> list[str]:
    """``"DATE recall: student lower (-1.00, p_bonf <0.0050)"`` for every significant test."""
    found = []
    for part in ("precision", "recall"):
        for row in rows:
            if row[f"{part}_significant"]:
                direction = "higher" if row[f"{part}_diff"] > 0 else "lower"
                found.append(
                    f"{row['label']} {part}: student {direction} "
                    f"({row[f'{part}_diff']:+.2f}, p_bonf "
                    f"{p_text(row[f'{part}_p_bonferroni'], n_resamples, row['m'])})"
                )
    return found


def distillation_markdown(d: Distillation, rows: Sequence[dict[str, Any]]) -> str:
    metrics = match_metrics(d.match)
    n_resamples, seed = d.tests["recall"].n_resamples, d.tests["recall"].seed
    lines = [
        f"# Distillation: {d.teacher} (teacher) vs. {d.student} (student)",
        "",
        f"Span-level distillation comparison: {d.teacher} (teacher) vs. {d.student} (student), "
        f"{d.match} span matching ({metrics['precision']}, {metrics['recall']}), with "
        f"percentile bootstrap 95% CIs ({n_resamples} document-level resamples, seed {seed}). "
        "Support: gold spans per category. ΔP and ΔR: student - teacher, with the two-sided "
        "paired bootstrap p-value on the same resamples, Bonferroni-corrected over "
        f"m = {d.m} categories with gold support in each family (precision, recall; the ALL "
        f"row gets the same correction). * marks p_bonf < alpha = {d.alpha:g} "
        f"(per-test alpha {d.alpha / max(d.m, 1):.4g}).",
        "",
    ]
    by_label = {row["label"]: row for row in rows}
    lines += markdown_table(
        [
            "Category",
            f"{d.teacher} P [95% CI]",
            f"{d.teacher} R [95% CI]",
            f"{d.student} P [95% CI]",
            f"{d.student} R [95% CI]",
            "Support",
            "ΔP (p_bonf)",
            "ΔR (p_bonf)",
        ],
        [
            [
                label,
                short_interval(d.teacher_result.per_label[label][metrics["precision"]]),
                short_interval(d.teacher_result.per_label[label][metrics["recall"]]),
                short_interval(d.student_result.per_label[label][metrics["precision"]]),
                short_interval(d.student_result.per_label[label][metrics["recall"]]),
                str(by_label[label]["support"]),
                difference_cell(by_label[label], "precision", n_resamples),
                difference_cell(by_label[label], "recall", n_resamples),
            ]
            for label in d.labels
        ],
    )
    found = significant_summary(rows, n_resamples)
    lines += ["", f"Significant after Bonferroni: {'; '.join(found) if found else 'none'}.", ""]
    return "\n".join(lines)


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


def system_document(
    name: str, folder: Path, result: BootstrapResult, labels: Sequence[str]
) -> dict[str, Any]:
    return {
        "name": name,
        "dir": str(folder),
        "counts": result.counts,
        "headline": {m: i.as_dict() for m, i in result.headline.items()},
        "per_label": {
            label: {
                **{m: i.as_dict() for m, i in result.per_label[label].items()},
                "support": result.support[label],
                "n_predicted": result.predicted[label],
            }
            for label in labels
        },
    }


def distillation_document(
    d: Distillation,
    rows: list[dict[str, Any]],
    folders: dict[str, Path],
    provenance: dict[str, Any],
) -> dict[str, Any]:
    metrics = match_metrics(d.match)
    return {
        "teacher": system_document(d.teacher, folders["teacher"], d.teacher_result, d.labels),
        "student": system_document(d.student, folders["student"], d.student_result, d.labels),
        "match": d.match,
        "metrics": {part: metrics[part] for part in ("precision", "recall")},
        "n_resamples": d.tests["recall"].n_resamples,
        "seed": d.tests["recall"].seed,
        "alpha": d.alpha,
        "m": d.m,
        "alpha_bonferroni": d.tests["recall"].alpha_bonferroni,
        "tests": {
            part: {
                **{k: v for k, v in asdict(test).items() if k != "rows"},
                "rows": [undefined_to_none(asdict(row)) for row in test.rows],
            }
            for part, test in d.tests.items()
        },
        "rows": rows,
        "significant": significant_summary(rows, d.tests["recall"].n_resamples),
        "definitions": {
            metrics[part]: DEFINITIONS[f"span_{metrics[part]}"] for part in ("precision", "recall")
        },
        "provenance": provenance,
    }


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


def probability(value: str) -> float:
    number = float(value)
    if not 0.0 < number < 1.0:
        raise argparse.ArgumentTypeError(f"must lie strictly between 0 and 1, got {value}")
    return number


def register_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--teacher",
        type=named_input_dir,
        default=None,
        metavar="NAME=DIR",
        help="evaluate-ner folder of the teacher's labels on the gold holdout (needed with "
        "--student)",
    )
    parser.add_argument(
        "--student",
        type=named_input_dir,
        default=None,
        metavar="NAME=DIR",
        help="evaluate-ner folder of the student's predictions on the same gold holdout",
    )
    parser.add_argument(
        "--silver",
        type=named_input_dir,
        default=None,
        metavar="TEACHER=DIR",
        help="evaluate-ner folder of a teacher's silver pool labels scored against the pool's "
        "gold, with the teacher's name",
    )
    parser.add_argument("--out-dir", required=True, type=output_dir, help="folder for the outputs")
    parser.add_argument(
        "--resamples", type=positive_int, default=N_RESAMPLES, help="bootstrap resamples"
    )
    parser.add_argument("--seed", type=int, default=SEED, help="bootstrap seed")
    parser.add_argument("--alpha", type=probability, default=ALPHA, help="family-wise alpha")
    parser.add_argument(
        "--match",
        choices=MATCHES,
        default="overlap",
        help="span matching of precision and recall (default: overlap)",
    )


def write_distillation(
    d: Distillation, folders: dict[str, Path], params: dict[str, Any], out: Path
) -> None:
    rows = distillation_rows(d)
    provenance = make_provenance(
        "compare-teacher",
        params,
        {name: folder / PER_DOCUMENT for name, folder in folders.items()},
    )
    write_csv(rows, distillation_fields(), out / f"{DISTILLATION}.csv")
    markdown = distillation_markdown(d, rows)
    with atomic_text(out / f"{DISTILLATION}.md") as handle:
        handle.write(markdown)
    write_html(markdown, f"Distillation: {d.teacher} vs. {d.student}", out / f"{DISTILLATION}.html")
    write_json_atomic(
        distillation_document(d, rows, folders, provenance), out / f"{DISTILLATION}.json"
    )
    plot_distillation(d, rows, out / f"{DISTILLATION}.png")
    overall = rows[-1]
    log.info(
        "%s vs %s on %d notes (%s): P %s -> %s, R %s -> %s; significant: %s -> %s",
        d.teacher,
        d.student,
        int(d.teacher_result.counts["n_notes"]),
        d.match,
        number_or_na(overall["teacher_precision"]),
        number_or_na(overall["student_precision"]),
        number_or_na(overall["teacher_recall"]),
        number_or_na(overall["student_recall"]),
        "; ".join(significant_summary(rows, d.tests["recall"].n_resamples)) or "none",
        out,
    )


def write_noise(
    name: str,
    folder: Path,
    result: BootstrapResult,
    match: str,
    params: dict[str, Any],
    out: Path,
) -> None:
    provenance = make_provenance("compare-teacher", params, {"silver": folder / PER_DOCUMENT})
    write_csv(noise_rows(result, match), NOISE_FIELDS, out / f"{SILVER_NOISE}.csv")
    with atomic_text(out / f"{SILVER_NOISE}.md") as handle:
        handle.write(noise_markdown(name, result, match))
    write_json_atomic(
        noise_document(name, folder, result, match, provenance), out / f"{SILVER_NOISE}.json"
    )
    plot_noise(name, result, match, out / f"{SILVER_NOISE}.png")
    metrics = match_metrics(match)
    log.info(
        "silver labels on %d pool notes (%s): P %.3f, R %.3f, detection recall %.3f -> %s",
        int(result.counts["n_notes"]),
        match,
        result.per_label[ALL][metrics["precision"]].estimate,
        result.per_label[ALL][metrics["recall"]].estimate,
        result.headline["detection_recall"].estimate,
        out,
    )


def write_noise_not_scored(
    name: str, folder: Path, reason: str, match: str, params: dict[str, Any], out: Path
) -> None:
    """The silver-noise outputs when the pool holds no note: every figure n/a, and why."""
    provenance = make_provenance("compare-teacher", params, {"silver": folder / PER_DOCUMENT})
    write_csv([], NOISE_FIELDS, out / f"{SILVER_NOISE}.csv")
    with atomic_text(out / f"{SILVER_NOISE}.md") as handle:
        handle.write(
            f"# Silver label noise: {name}\n\nNot measured: {reason}. "
            f"Every figure is {NOT_AVAILABLE}.\n"
        )
    write_json_atomic(
        {"teacher": name, "match": match, "not_scored": reason, "provenance": provenance},
        out / f"{SILVER_NOISE}.json",
    )
    plot_not_scored(
        out / f"{SILVER_NOISE}.png", f"{name}: silver label noise", reason, "precision / recall"
    )
    log.warning("silver labels of %s: not measured, %s -> %s", name, reason, out)


def run(args: argparse.Namespace) -> None:
    if args.student is None and args.silver is None:
        raise ConfigError("compare-teacher needs --student NAME=DIR, --silver DIR or both")
    if args.student is not None and args.teacher is None:
        raise ConfigError("--student needs --teacher NAME=DIR to compare against")
    params = {
        "teacher": args.teacher[0] if args.teacher else None,
        "student": args.student[0] if args.student else None,
        "match": args.match,
        "resamples": args.resamples,
        "seed": args.seed,
        "alpha": args.alpha,
    }
    # read and score every input before writing anything
    distillation = None
    if args.student is not None:
        teacher, student = args.teacher[0], args.student[0]
        if teacher == student:
            raise ConfigError(f"--teacher and --student need different names, both are {teacher!r}")
        tables = load_runs([args.teacher, args.student], teacher)
        distillation = compare_distillation(
            (teacher, tables[teacher]),
            (student, tables[student]),
            match=args.match,
            n_resamples=args.resamples,
            seed=args.seed,
            alpha=args.alpha,
        )
    noise = None
    not_scored = None
    if args.silver is not None:
        silver_table = read_per_document(args.silver[1] / PER_DOCUMENT)
        if silver_table.note_ids:
            noise = bootstrap_metrics(silver_table, n_resamples=args.resamples, seed=args.seed)
        else:
            not_scored = "the silver pool holds no note (the teacher kept none of its answers)"
    if distillation is not None:
        folders = {"teacher": args.teacher[1], "student": args.student[1]}
        write_distillation(distillation, folders, params, args.out_dir)
    if noise is not None:
        write_noise(args.silver[0], args.silver[1], noise, args.match, params, args.out_dir)
    if not_scored is not None:
        write_noise_not_scored(
            args.silver[0], args.silver[1], not_scored, args.match, params, args.out_dir
        )
