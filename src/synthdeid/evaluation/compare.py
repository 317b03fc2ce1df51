"""Comparing evaluated NER runs: shared resamples, run and arm tables, paired tests, figures.

The ``compare-ner`` stage (:mod:`synthdeid.stages.compare_ner`) calls these
and documents the files it writes.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from synthdeid.errors import ConfigError, InputError
from synthdeid.evaluation.arms import (
    ARM_METRICS,
    ArmMetric,
    ArmSummary,
    ArmTest,
    RunScores,
    arm_paired_test,
    summarize_arm,
)
from synthdeid.evaluation.bootstrap import (
    BootstrapResult,
    PairedTestResult,
    check_same_documents,
)
from synthdeid.evaluation.report import METRIC_LABELS, PER_DOCUMENT, read_per_document
from synthdeid.figures import PALETTE, error_bars, mark_undefined, pyplot, save_figure
from synthdeid.ner.sweeps import training_seed_of
from synthdeid.reporting import (
    NOT_AVAILABLE,
    bounds_text,
    format_interval,
    interval_text,
    markdown_table,
    number_or_na,
    p_text,
    undefined_to_none,
)
from synthdeid.scoring import vocabulary
from synthdeid.scoring.metrics import DEFINITIONS, CountTable, order_labels
from synthdeid.scoring.vocabulary import select
from synthdeid.stats import (
    Interval,
    is_undefined,
)

log = logging.getLogger(__name__)

RUNS_HTML = "runs.html"
RUN_METRICS: tuple[str, ...] = select(
    "leakage_overlap_all",
    "leakage_overlap_phi",
    "leakage_detection_all",
    "leakage_detection_phi",
    "detection_recall",
    "detection_precision",
    "span_overlap_f1",
    "span_exact_f1",
)
TEST_FIELDS: tuple[str, ...] = (
    "run",
    "reference",
    "metric",
    "label",
    "support",
    "run_value",
    "reference_value",
    "diff",
    "diff_lo",
    "diff_hi",
    "p",
    "p_bonferroni",
    "m",
    "alpha_bonferroni",
    "significant",
)


def load_runs(runs: list[tuple[str, Path]], reference: str) -> dict[str, CountTable]:
    """Read every run's counts, on the reference's documents and a common label set."""
    names = [name for name, _ in runs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigError(f"--run names must be unique; repeated: {duplicates}")
    if reference not in names:
        raise ConfigError(f"--reference {reference!r} is not one of the runs {names}")
    tables = {name: read_per_document(folder / PER_DOCUMENT) for name, folder in runs}
    labels = order_labels(label for t in tables.values() for label in t.labels)
    tables = {name: t.with_labels(labels) for name, t in tables.items()}
    ref = tables[reference]
    folders = dict(runs)
    for name, table in tables.items():
        path = folders[name] / PER_DOCUMENT
        if set(table.note_ids) != set(ref.note_ids) or len(table.note_ids) != len(ref.note_ids):
            only_here = sorted(set(table.note_ids) - set(ref.note_ids))[:5]
            only_ref = sorted(set(ref.note_ids) - set(table.note_ids))[:5]
            raise InputError(
                path,
                None,
                f"run {name!r} scored other documents than the reference {reference!r}: "
                f"only here {only_here}, only in the reference {only_ref}",
                "evaluate every run on the same gold notes and --parts",
            )
        tables[name] = table.reordered(ref.note_ids)
        try:
            check_same_documents(tables[name], ref)
        except ValueError as exc:
            raise InputError(path, None, str(exc)) from None
    return tables


def rank_key(result: BootstrapResult) -> tuple[float, float]:
    """VetSynth's order: lower label-consistent leakage, then higher overlap F1; n/a last."""
    leakage = result.headline["leakage_overlap_all"].estimate
    f1 = result.headline["span_overlap_f1"].estimate
    return (
        float("inf") if is_undefined(leakage) else leakage,
        float("inf") if is_undefined(f1) else -f1,
    )


def run_rows(results: dict[str, BootstrapResult], reference: str) -> list[dict[str, Any]]:
    """One row per run, with the VetSynth rank (lower leakage, then higher overlap F1).

    Undefined figures are None (an empty CSV cell, JSON null).
    """
    ranking = sorted(results, key=lambda n: rank_key(results[n]))
    rows = []
    for name, result in results.items():
        row: dict[str, Any] = {
            "run": name,
            "rank": ranking.index(name) + 1,
            "reference": name == reference,
            "n_notes": int(result.counts["n_notes"]),
        }
        for metric in RUN_METRICS:
            interval = result.headline[metric].as_dict()
            row[metric] = interval["estimate"]
            row[f"{metric}_lo"] = interval["ci_lo"]
            row[f"{metric}_hi"] = interval["ci_hi"]
        rows.append(row)
    return rows


def paired_rows(name: str, reference: str, result: PairedTestResult) -> list[dict[str, Any]]:
    """One row per label tested; undefined values (no p without a difference) are None."""
    return [
        undefined_to_none(
            {
                "run": name,
                "reference": reference,
                "metric": result.metric,
                "label": row.label,
                "support": row.support,
                "run_value": row.system,
                "reference_value": row.reference,
                "diff": row.diff,
                "diff_lo": row.diff_lo,
                "diff_hi": row.diff_hi,
                "p": row.p,
                "p_bonferroni": row.p_bonferroni,
                "m": result.m,
                "alpha_bonferroni": result.alpha_bonferroni,
                "significant": row.significant,
            }
        )
        for row in result.rows
    ]


def runs_markdown(
    results: dict[str, BootstrapResult], reference: str, rows: list[dict[str, Any]]
) -> str:
    ranks = {row["run"]: row["rank"] for row in rows}
    lines = [
        "# NER runs",
        "",
        "Ranked by document leakage (overlap, all notes), then span-overlap F1 (VetSynth). "
        "Estimates with 95% percentile bootstrap intervals over documents, one shared "
        f"resample matrix; reference run: {reference}.",
        "",
    ]
    lines += markdown_table(
        ["rank", "run", "notes", *(METRIC_LABELS[m] for m in RUN_METRICS)],
        [
            [
                str(ranks[name]),
                name + (" (reference)" if name == reference else ""),
                str(int(result.counts["n_notes"])),
                *(format_interval(result.headline[m]) for m in RUN_METRICS),
            ]
            for name, result in sorted(results.items(), key=lambda item: ranks[item[0]])
        ],
    )
    lines += ["", *(f"- {METRIC_LABELS[m]} (`{m}`): {DEFINITIONS[m]}" for m in RUN_METRICS), ""]
    return "\n".join(lines)


def tests_markdown(
    rows: list[dict[str, Any]], metric: str, reference: str, n_resamples: int
) -> str:
    lines = [
        f"# Paired bootstrap tests against {reference}",
        "",
        f"Difference run - reference in {metric}, per label with gold support and ALL. "
        "Two-sided p from sign changes across resamples; Bonferroni across the labels tested "
        "(m), also applied to ALL; significant when p_bonferroni < alpha.",
        "",
    ]
    if not rows:
        return "\n".join([*lines, "No other run to test (a single run was given).", ""])
    lines += markdown_table(
        [
            "run",
            "label",
            "support",
            "run value",
            "reference value",
            "diff [95% CI]",
            "p",
            "p_bonf",
            "sig.",
        ],
        [
            [
                r["run"],
                r["label"],
                str(r["support"]),
                number_or_na(r["run_value"]),
                number_or_na(r["reference_value"]),
                interval_text(r["diff"], r["diff_lo"], r["diff_hi"], "+.3f"),
                p_text(r["p"], n_resamples),
                p_text(r["p_bonferroni"], n_resamples, r["m"]),
                "yes" if r["significant"] else "no",
            ]
            for r in rows
        ],
    )
    return "\n".join([*lines, ""])


# the two leakage variants of the leakage panel: metric, legend label, colour, marker
LEAKAGE_SERIES: tuple[tuple[str, str, str, str], ...] = (
    (
        "leakage_detection_all",
        "label-agnostic: any overlapping prediction protects a span",
        PALETTE["blue"],
        "o",
    ),
    (
        "leakage_overlap_all",
        "label-consistent: the overlapping prediction must carry the span's label",
        PALETTE["orange"],
        "s",
    ),
)


def draw_intervals(
    ax: Any,
    intervals: list[Interval],
    positions: np.ndarray,
    *,
    scale: float,
    color: str,
    marker: str,
    label: str | None = None,
) -> None:
    """Horizontal points with interval bars at ``positions``; n/a where undefined."""
    shown = [k for k, i in enumerate(intervals) if i.defined]
    scaled = [
        Interval(intervals[k].estimate * scale, intervals[k].lo * scale, intervals[k].hi * scale)
        for k in shown
    ]
    ax.errorbar(
        [i.estimate for i in scaled],
        positions[shown],
        xerr=error_bars(scaled),
        fmt=marker,
        capsize=3,
        color=color,
        label=label,
    )
    mark_undefined(
        ax, [float(positions[k]) for k, i in enumerate(intervals) if not i.defined], horizontal=True
    )


def plot_runs(results: dict[str, BootstrapResult], reference: str, path: Path) -> Any:
    """Leakage (label-agnostic and label-consistent) and span-overlap F1 per run, with intervals.

    One row per run (named on the y axis, the reference marked), the first
    run on top; both panels share the rows. Leakage is in percent of the
    evaluation notes, F1 on its 0-1 scale. Returns the (closed) figure.
    """
    plt = pyplot()
    names = list(results)
    positions = np.arange(len(names), dtype=float)[::-1]
    first = next(iter(results.values()))
    n_notes, n_resamples = int(first.counts["n_notes"]), first.n_resamples
    fig, (leak_ax, f1_ax) = plt.subplots(
        1,
        2,
        figsize=(11.0, max(3.2, 0.55 * len(names) + 2.4)),
        sharey=True,
        gridspec_kw={"width_ratios": [1.3, 1.0]},
    )
    offset = 0.14 if len(names) > 0 else 0.0
    for k, (metric, label, color, marker) in enumerate(LEAKAGE_SERIES):
        draw_intervals(
            leak_ax,
            [results[name].headline[metric] for name in names],
            positions + (offset if k == 0 else -offset),
            scale=100.0,
            color=color,
            marker=marker,
            label=label,
        )
    leak_ax.set_xlabel(f"notes with missed PHI (% of the {n_notes} evaluation notes)")
    leak_ax.set_title("Document leakage\n(lower is safer)", fontsize=10)
    leak_ax.set_xlim(left=-2.0)  # room for points at 0%
    leak_ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), frameon=False)
    draw_intervals(
        f1_ax,
        [results[name].headline["span_overlap_f1"] for name in names],
        positions,
        scale=1.0,
        color=PALETTE["blue"],
        marker="o",
    )
    f1 = vocabulary.metric("span_overlap_f1")
    f1_ax.set_xlabel(f"{f1.label} (0 to 1)")
    f1_ax.set_title(
        f"{f1.label[0].upper()}{f1.label[1:]}, label-consistent\n({f1.better} is better)",
        fontsize=10,
    )
    f1_ax.set_xlim(-0.03, 1.05)
    ticks = [f"{name} (reference)" if name == reference else name for name in names]
    leak_ax.set_ylim(-0.6, len(names) - 0.4)
    for ax in (leak_ax, f1_ax):
        # every panel names its runs (shared rows would hide the second panel's labels)
        ax.set_yticks(positions, ticks, fontsize=8)
        ax.tick_params(axis="y", labelleft=True)
        ax.set_ylabel("run")
        ax.grid(axis="x", alpha=0.3)
    fig.suptitle(
        f"Runs on n = {n_notes} evaluation notes; 95% bootstrap intervals over documents "
        f"({n_resamples} resamples)",
        fontsize=10,
    )
    fig.tight_layout()
    save_figure(fig, path)
    return fig


def group_arms(names: list[str], arm_of: list[tuple[str, str]]) -> dict[str, list[str]]:
    """Arm -> its runs, in run order; a run given no arm is its own."""
    mapping = dict(arm_of)
    unknown = sorted(set(mapping) - set(names))
    if unknown:
        raise ConfigError(f"--arm names runs that were not given with --run: {unknown}")
    clashes = sorted(set(mapping.values()) & (set(names) - set(mapping)))
    if clashes:
        raise ConfigError(f"arm names {clashes} are also names of runs outside those arms")
    arms: dict[str, list[str]] = {}
    for name in names:
        arms.setdefault(mapping.get(name, name), []).append(name)
    return arms


def compare_arms(
    tables: dict[str, CountTable],
    arms: dict[str, list[str]],
    reference_arm: str,
    weights: np.ndarray,
    *,
    seed: int,
    alpha: float,
) -> tuple[dict[str, ArmSummary], list[ArmTest]]:
    """Every arm's summary, and each other arm tested against the reference arm."""
    scores = {run: RunScores.of(table, weights) for run, table in tables.items()}
    summaries = {
        arm: summarize_arm(arm, {run: scores[run] for run in runs}) for arm, runs in arms.items()
    }
    reference_runs = arms[reference_arm]
    reference_seeds = [training_seed_of(run, reference_arm) for run in reference_runs]
    others = [arm for arm in arms if arm != reference_arm]
    tests = [
        arm_paired_test(
            arm,
            {run: scores[run] for run in arms[arm]},
            reference_arm,
            {run: scores[run] for run in reference_runs},
            metric=metric,
            seeds=[training_seed_of(run, arm) for run in arms[arm]],
            reference_seeds=reference_seeds,
            rng_seed=seed,
            alpha=alpha,
            m=len(others),
        )
        for metric in ARM_METRICS
        for arm in others
    ]
    return summaries, tests


def arm_rows(summaries: dict[str, ArmSummary], reference_arm: str) -> list[dict[str, Any]]:
    rows = []
    for arm, summary in summaries.items():
        row: dict[str, Any] = {
            "arm": arm,
            "reference": arm == reference_arm,
            "seeds": len(summary.runs),
            "runs": " ".join(summary.runs),
        }
        for metric, value in summary.metrics.items():
            row.update({f"{metric}_{key}": v for key, v in value.as_dict().items()})
        rows.append(row)
    return rows


def format_seed_spread(value: ArmMetric) -> str:
    """``mean +- SD [t-interval]``, the mean and n/a with one seed, n/a where undefined."""
    if is_undefined(value.mean):
        return NOT_AVAILABLE
    if value.sd is None or value.t_lo is None or value.t_hi is None:
        return f"{value.mean:.3f} (SD {NOT_AVAILABLE})"
    return f"{value.mean:.3f} +- {value.sd:.3f} [{bounds_text(value.t_lo, value.t_hi)}]"


def format_arm_cell(value: ArmMetric) -> str:
    """The seed spread, then the document interval of the mean (n/a where undefined)."""
    bounds = bounds_text(value.ci_lo, value.ci_hi)
    interval = bounds if bounds == NOT_AVAILABLE else f"[{bounds}]"
    return f"{format_seed_spread(value)}; CI {interval}"


def arms_markdown(
    summaries: dict[str, ArmSummary],
    reference_arm: str,
    tests: list[ArmTest],
    n_resamples: int,
) -> str:
    lines = [
        "# Arms over training seeds",
        "",
        "Each cell: mean over the arm's training seeds +- SD [t-interval over seeds], then "
        "the document bootstrap 95% interval of that mean. SD and t-interval are n/a for "
        "an arm with one seed. Tests: two-level paired bootstrap (documents and seeds) of "
        f"arm - {reference_arm}, Bonferroni across arms.",
        "",
    ]
    lines += markdown_table(
        ["arm", "seeds", *ARM_METRICS],
        [
            [
                arm + (" (reference)" if arm == reference_arm else ""),
                str(len(summary.runs)),
                *(format_arm_cell(summary.metrics[m]) for m in ARM_METRICS),
            ]
            for arm, summary in summaries.items()
        ],
    )
    if tests:
        lines += ["", "## Against the reference arm", ""]
        lines += markdown_table(
            ["arm", "metric", "seeds", "diff [95% CI]", "p", "p_bonf", "sig."],
            [
                [
                    t.arm,
                    t.metric,
                    f"{t.seeds} vs {t.reference_seeds}" + (" (paired)" if t.seeds_paired else ""),
                    interval_text(t.diff, t.diff_lo, t.diff_hi, "+.3f"),
                    p_text(t.p, n_resamples),
                    p_text(t.p_bonferroni, n_resamples, t.m),
                    "yes" if t.significant else "no",
                ]
                for t in tests
            ],
        )
    return "\n".join([*lines, ""])
