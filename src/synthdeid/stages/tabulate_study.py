"""The study table and forest plot: every arm against the reference arm (tabulate-study).

Reads compare-ner's ``comparison.json`` (arms over training seeds, two-level
paired bootstrap tests; :mod:`synthdeid.evaluation.arms`), each run's
build-mixture ``summary.json`` (training notes, realized synthetic share) and,
for arms whose data passed through the DP language model (its pools or
``tapt: dplm``), that model's ``privacy.json`` (epsilon, delta). Writes
study.csv, study.md and study.html (one row per arm; the HTML page is the
report's table) and study.png (the differences from the reference arm in
span-overlap F1 and document leakage, with their intervals).

Undefined figures (the SD of one seed, the notes of an ensemble, epsilon of a
non-DP arm) are empty in the CSV and ``n/a`` in the table, never 0.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

import numpy as np

from synthdeid.artifacts import atomic_text
from synthdeid.cli_types import input_file, named_input_file, output_dir
from synthdeid.errors import InputError
from synthdeid.evaluation.arms import ARM_METRICS
from synthdeid.figures import PALETTE, mark_undefined, pyplot, save_figure
from synthdeid.ner.mixtures import read_mixture_summary
from synthdeid.reporting import (
    NOT_AVAILABLE,
    bounds_text,
    interval_text,
    markdown_table,
    number_or_na,
    percent,
    write_csv,
    write_html,
)
from synthdeid.stats import is_undefined

log = logging.getLogger(__name__)

STUDY_CSV = "study.csv"
STUDY_MD = "study.md"
STUDY_HTML = "study.html"
STUDY_FIGURE = "study.png"
METRIC_TITLES: dict[str, str] = {
    "span_overlap_f1": "F1",
    "span_overlap_recall": "recall",
    "span_overlap_precision": "precision",
    "leakage_overlap_all": "label-consistent document leakage",
}
METRIC_UNITS: dict[str, str] = {
    "span_overlap_f1": "difference on the 0-1 scale",
    "span_overlap_recall": "difference on the 0-1 scale",
    "span_overlap_precision": "difference on the 0-1 scale",
    "leakage_overlap_all": "difference in the share of notes",
}
FOREST_METRICS: tuple[str, ...] = ("span_overlap_f1", "leakage_overlap_all")
# significant after Bonferroni / not
SIGNIFICANT_COLOR = PALETTE["blue"]
NOT_SIGNIFICANT_COLOR = PALETTE["grey"]


def read_json(path: Path, what: str) -> dict[str, Any]:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(path, None, f"cannot read the {what}: {exc}") from None
    if not isinstance(document, dict):
        raise InputError(path, None, f"the {what} is not a JSON object")
    return document


MIXTURE_FIELDS = ("n_train_total", "realized_synthetic_fraction")
PRIVACY_FIELDS = ("epsilon", "delta")


def read_sizes(path: Path) -> dict[str, Any]:
    """The sizes the study table reads from a build-mixture summary."""
    summary = read_mixture_summary(path)
    if any(key not in summary for key in MIXTURE_FIELDS):
        raise InputError(
            path,
            None,
            f"not a build-mixture summary: no {' / '.join(MIXTURE_FIELDS)}",
            "pass the summary.json that build-mixture wrote",
        )
    return summary


def read_privacy(path: Path) -> dict[str, Any]:
    """The budget a train-dp-lm privacy.json records."""
    record = read_json(path, "privacy record")
    if any(key not in record for key in PRIVACY_FIELDS):
        raise InputError(
            path, None, "not a train-dp-lm privacy record: no epsilon / delta", "pass privacy.json"
        )
    return record


def arm_of_runs(comparison: dict[str, Any], path: Path) -> dict[str, str]:
    if "arms" not in comparison or "arm_tests" not in comparison:
        raise InputError(
            path, None, "no arms in this comparison", "rerun compare-ner (it writes arms)"
        )
    return {run: arm for arm, entry in comparison["arms"].items() for run in entry["runs"]}


def mean_or_none(values: list[float]) -> float | None:
    return float(np.mean(values)) if values else None


def study_rows(
    comparison: dict[str, Any],
    mixtures: dict[str, dict[str, Any]],
    privacy: dict[str, dict[str, Any]],
) -> list[dict[str, Any]]:
    """One row per arm: sizes, epsilon, seed statistics and the test against the reference."""
    reference = comparison["reference_arm"]
    tests = {(t["arm"], t["metric"]): t for t in comparison["arm_tests"]}
    rows = []
    for arm in comparison.get("arm_order") or list(comparison["arms"]):
        entry = comparison["arms"][arm]
        runs = entry["runs"]
        summaries = [mixtures[run] for run in runs if run in mixtures]
        budgets = [privacy[run] for run in runs if run in privacy]
        row: dict[str, Any] = {
            "arm": arm,
            "reference": arm == reference,
            "seeds": len(runs),
            "train_notes": mean_or_none([s["n_train_total"] for s in summaries]),
            "synthetic_share": mean_or_none([s["realized_synthetic_fraction"] for s in summaries]),
            "epsilon": budgets[0]["epsilon"] if budgets else None,
            "delta": budgets[0]["delta"] if budgets else None,
        }
        for metric in ARM_METRICS:
            values = entry["metrics"][metric]
            row.update({f"{metric}_{key}": values[key] for key in ("mean", "sd", "ci_lo", "ci_hi")})
            row[f"{metric}_t_lo"], row[f"{metric}_t_hi"] = values["t_lo"], values["t_hi"]
            test = tests.get((arm, metric))
            for key in ("diff", "diff_lo", "diff_hi", "p", "p_bonferroni", "significant"):
                row[f"{metric}_{key}"] = test[key] if test else None
        rows.append(row)
    return rows


def metric_cell(row: dict[str, Any], metric: str) -> str:
    """``mean +- SD [interval]``; n/a where the metric is undefined."""
    mean = row[f"{metric}_mean"]
    if is_undefined(mean):
        return NOT_AVAILABLE
    sd = row[f"{metric}_sd"]
    spread = f" +- {sd:.3f}" if not is_undefined(sd) else ""
    return f"{mean:.3f}{spread} [{bounds_text(row[f'{metric}_ci_lo'], row[f'{metric}_ci_hi'])}]"


def p_text(p: float | None, n_resamples: int) -> str:
    """A bootstrap p; 0 means below the resolution of the resamples (2 / n, two-sided)."""
    if is_undefined(p):
        return f"p={NOT_AVAILABLE}"
    return f"p<{2 / n_resamples:.4f}" if p == 0 else f"p={p:.3f}"


def delta_cell(row: dict[str, Any], metric: str, n_resamples: int) -> str:
    if row["reference"]:
        return "(reference)"
    diff, lo, hi = (row[f"{metric}_{key}"] for key in ("diff", "diff_lo", "diff_hi"))
    if is_undefined(diff):
        return NOT_AVAILABLE
    mark = " *" if row[f"{metric}_significant"] else ""
    p = p_text(row[f"{metric}_p_bonferroni"], n_resamples)
    return f"{interval_text(diff, lo, hi, '+.3f')} {p}{mark}"


def study_markdown(rows: list[dict[str, Any]], comparison: dict[str, Any], title: str) -> str:
    reference = comparison["reference_arm"]
    n_notes = next(iter(comparison["runs"].values()))["counts"]["n_notes"]
    lines = [
        f"# {title}",
        "",
        f"Every arm scored on the same {int(n_notes)} evaluation notes. Metric cells: mean over "
        "the arm's training seeds +- SD (absent with one seed) [document bootstrap 95% interval "
        f"of the mean]. Differences from {reference}: two-level paired bootstrap over documents "
        "and training seeds, 95% interval, p Bonferroni-adjusted across arms (* below 0.05). "
        "Span metrics: overlap matching; leakage: share of notes with a gold span that no "
        "prediction of its own label overlaps (label-consistent). Train notes and synthetic share as realized by build_mixture; epsilon of "
        "the DP language model where the arm's data passed through it.",
        "",
    ]
    header = ["arm", "seeds", "train notes", "synthetic share", "epsilon"]
    header += [METRIC_TITLES[m] for m in ARM_METRICS]
    header += [f"delta {METRIC_TITLES[m]}" for m in FOREST_METRICS]
    lines += markdown_table(
        header,
        [
            [
                row["arm"] + (" (reference)" if row["reference"] else ""),
                str(row["seeds"]),
                number_or_na(row["train_notes"], ".0f"),
                percent(row["synthetic_share"]),
                number_or_na(row["epsilon"], ".2f"),
                *(metric_cell(row, m) for m in ARM_METRICS),
                *(delta_cell(row, m, comparison["n_resamples"]) for m in FOREST_METRICS),
            ]
            for row in rows
        ],
    )
    return "\n".join([*lines, ""])


def plot_forest(rows: list[dict[str, Any]], reference: str, n_notes: int, path: Path) -> Any:
    """Differences from the reference arm with their intervals, one panel per metric.

    An undefined difference is written n/a on its row. Returns the (closed) figure.
    """
    plt = pyplot()
    tested = [row for row in rows if not row["reference"]]
    fig, axes = plt.subplots(
        1, len(FOREST_METRICS), figsize=(10, max(2.5, 0.42 * len(tested) + 1.6)), sharey=True
    )
    positions = np.arange(len(tested))[::-1]
    for ax, metric in zip(np.atleast_1d(axes), FOREST_METRICS, strict=True):
        undefined = []
        for y, row in zip(positions, tested, strict=True):
            diff, lo, hi = (row[f"{metric}_{key}"] for key in ("diff", "diff_lo", "diff_hi"))
            if is_undefined(diff):
                undefined.append(float(y))
                continue
            color = SIGNIFICANT_COLOR if row[f"{metric}_significant"] else NOT_SIGNIFICANT_COLOR
            ax.errorbar(
                diff,
                y,
                xerr=[
                    [0.0 if is_undefined(lo) else max(0.0, diff - lo)],
                    [0.0 if is_undefined(hi) else max(0.0, hi - diff)],
                ],
                fmt="o",
                capsize=3,
                color=color,
            )
        mark_undefined(ax, undefined, horizontal=True)
        ax.axvline(0.0, color=PALETTE["black"], linewidth=0.8)
        ax.set_xlabel(
            f"{METRIC_TITLES[metric]}: arm - {reference}\n({METRIC_UNITS[metric]}, 95% interval)"
        )
        ax.grid(axis="x", alpha=0.3)
    first = np.atleast_1d(axes)[0]
    first.set_yticks(
        positions, [f"{row['arm']} (seeds={row['seeds']})" for row in tested], fontsize=8
    )
    first.set_ylabel("arm")
    fig.suptitle(
        f"Arms against {reference} on {n_notes} evaluation notes "
        "(blue: p < 0.05 after Bonferroni; grey: not)",
        fontsize=10,
    )
    fig.tight_layout()
    save_figure(fig, path)
    return fig


def register_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--comparison", required=True, type=input_file, help="compare-ner's comparison.json"
    )
    parser.add_argument(
        "--mixture",
        dest="mixtures",
        action="append",
        default=[],
        type=named_input_file,
        metavar="RUN=SUMMARY",
        help="a run's build-mixture summary.json (repeat; ensembles have none)",
    )
    parser.add_argument(
        "--privacy",
        dest="privacy",
        action="append",
        default=[],
        type=named_input_file,
        metavar="RUN=PRIVACY",
        help="the privacy.json of the DP model a run's data passed through (repeat)",
    )
    parser.add_argument("--title", default="Synthetic data arms against the reference")
    parser.add_argument("--out-dir", required=True, type=output_dir, help="folder for the outputs")


def run(args: argparse.Namespace) -> None:
    comparison = read_json(args.comparison, "comparison")
    runs = arm_of_runs(comparison, args.comparison)
    for kind, pairs in (("--mixture", args.mixtures), ("--privacy", args.privacy)):
        for name, path in pairs:
            if name not in runs:
                raise InputError(
                    path, None, f"{kind} names run {name!r}, which the comparison does not hold"
                )
    mixtures = {name: read_sizes(path) for name, path in args.mixtures}
    privacy = {name: read_privacy(path) for name, path in args.privacy}
    rows = study_rows(comparison, mixtures, privacy)
    out: Path = args.out_dir
    write_csv(rows, list(rows[0]), out / STUDY_CSV)
    markdown = study_markdown(rows, comparison, args.title)
    with atomic_text(out / STUDY_MD) as handle:
        handle.write(markdown)
    write_html(markdown, args.title, out / STUDY_HTML)
    n_notes = int(next(iter(comparison["runs"].values()))["counts"]["n_notes"])
    plot_forest(rows, comparison["reference_arm"], n_notes, out / STUDY_FIGURE)
    significant = [
        f"{row['arm']} ({METRIC_TITLES[m]})"
        for row in rows
        for m in ARM_METRICS
        if row[f"{m}_significant"]
    ]
    log.info(
        "tabulated %d arms against %s; intervals excluding zero after Bonferroni: %s -> %s",
        len(rows),
        comparison["reference_arm"],
        ", ".join(significant) or "none",
        out,
    )
