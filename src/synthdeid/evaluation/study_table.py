"""The study table and forest plot: every arm against the reference arm.

What ``tabulate-study`` (:mod:`synthdeid.stages.tabulate_study`) computes and
writes. It reads compare-ner's ``comparison.json`` (arms over training seeds,
two-level paired bootstrap tests; :mod:`synthdeid.evaluation.arms`), each
run's build-mixture ``summary.json`` (training notes, realized synthetic
share) and, for arms whose data passed through the DP language model (its
pools or ``tapt: dplm``), that model's ``privacy.json`` (epsilon, delta), and
each run's ``train_ner`` benchmark file (wall and CPU time of its training);
or all of these from an archive written by archive-run
(:func:`add_archived_runs`). It writes study.csv, study.md and study.html
(one row per arm; the HTML page is the report's table) and study.png (the
differences from the reference arm in span-overlap F1 and document leakage,
with their intervals).

Each test also carries its standard error and minimum detectable effect
(``{metric}_se``, ``{metric}_mde``, ``{metric}_mde_bonferroni``; see
:mod:`synthdeid.evaluation.arms`) and a plain reading (``{metric}_reading``:
helps, hurts or cannot tell; ``reading`` is that of span-overlap F1). The
table shows F1's Bonferroni-adjusted MDE and reading, and under it the range
of that MDE over the arms and how many reach ``--mde-target``. A comparison
written before compare-ner recorded the MDE still tabulates: its MDE is n/a.
Under the table a line names degenerate arms (reported as another arm) and one
names arms whose seeds drew from more than one version of a pool (the pool
files' digests differ, as when a study's runs were trained on several machines
that build a pool differently): their seed spread includes the pools' difference.

Metrics are named as :mod:`synthdeid.scoring.vocabulary` names them.
Undefined figures (the SD of one seed, the notes of an ensemble, epsilon of a
non-DP arm) are empty in the CSV and ``n/a`` in the table, never 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from synthdeid.artifacts import atomic_text
from synthdeid.errors import InputError
from synthdeid.evaluation.archive import TrainingOutcome, TrainTime, read_archives, read_json
from synthdeid.evaluation.arms import ARM_METRICS, CANNOT_TELL, reading
from synthdeid.figures import PALETTE, mark_undefined, pyplot, save_figure
from synthdeid.ner.duplicates import read_plan
from synthdeid.reporting import (
    NOT_AVAILABLE,
    bounds_text,
    interval_text,
    markdown_table,
    number_or_na,
    p_text,
    percent,
    write_csv,
    write_html,
)
from synthdeid.scoring import vocabulary
from synthdeid.scoring.vocabulary import label, select
from synthdeid.stats import ALPHA, MDE_POWER, is_undefined

STUDY_CSV = "study.csv"
STUDY_MD = "study.md"
STUDY_HTML = "study.html"
STUDY_FIGURE = "study.png"
# the plan-runs plan kept beside archived runs (degenerate arms)
PLAN_FILE = "plan.json"
FOREST_METRICS: tuple[str, ...] = select("span_overlap_f1", "leakage_overlap_all")
HEADLINE_METRIC = "span_overlap_f1"  # the metric of the table's MDE and reading columns
MDE_TARGET = 0.02  # the difference in F1 the study means to detect
# significant after Bonferroni / not
SIGNIFICANT_COLOR = PALETTE["blue"]
NOT_SIGNIFICANT_COLOR = PALETTE["grey"]


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
    train: Mapping[str, TrainTime] | None = None,
) -> list[dict[str, Any]]:
    """One row per arm: sizes, epsilon, train time, seed statistics and the test against the
    reference. Train minutes are the mean over the arm's runs with a benchmark (None: none)."""
    train = train or {}
    reference = comparison["reference_arm"]
    tests = {(t["arm"], t["metric"]): t for t in comparison["arm_tests"]}
    rows = []
    for arm in comparison.get("arm_order") or list(comparison["arms"]):
        entry = comparison["arms"][arm]
        runs = entry["runs"]
        summaries = [mixtures[run] for run in runs if run in mixtures]
        budgets = [privacy[run] for run in runs if run in privacy]
        times = [train[run] for run in runs if run in train]
        cpu = [t.cpu_s for t in times if t.cpu_s is not None]
        row: dict[str, Any] = {
            "arm": arm,
            "reference": arm == reference,
            "seeds": len(runs),
            "train_notes": mean_or_none([s["n_train_total"] for s in summaries]),
            "synthetic_share": mean_or_none([s["realized_synthetic_fraction"] for s in summaries]),
            "epsilon": budgets[0]["epsilon"] if budgets else None,
            "delta": budgets[0]["delta"] if budgets else None,
            "train_wall_min": mean_or_none([t.wall_s / 60 for t in times]),
            "train_cpu_min": mean_or_none([c / 60 for c in cpu])
            if len(cpu) == len(times)
            else None,
        }
        for metric in ARM_METRICS:
            values = entry["metrics"][metric]
            row.update({f"{metric}_{key}": values[key] for key in ("mean", "sd", "ci_lo", "ci_hi")})
            row[f"{metric}_t_lo"], row[f"{metric}_t_hi"] = values["t_lo"], values["t_hi"]
            test = tests.get((arm, metric))
            for key in ("diff", "diff_lo", "diff_hi", "p", "p_bonferroni", "significant"):
                row[f"{metric}_{key}"] = test[key] if test else None
            for key in ("m", "se", "mde", "mde_bonferroni"):  # absent from older comparisons
                row[f"{metric}_{key}"] = test.get(key) if test else None
            text = reading(metric, row[f"{metric}_diff"], row[f"{metric}_significant"])
            row[f"{metric}_reading"] = None if text == NOT_AVAILABLE else text
        row["reading"] = row[f"{HEADLINE_METRIC}_reading"]
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


def delta_cell(row: dict[str, Any], metric: str, n_resamples: int) -> str:
    if row["reference"]:
        return "(reference)"
    diff, lo, hi = (row[f"{metric}_{key}"] for key in ("diff", "diff_lo", "diff_hi"))
    if is_undefined(diff):
        return NOT_AVAILABLE
    mark = " *" if row[f"{metric}_significant"] else ""
    p = p_text(row[f"{metric}_p_bonferroni"], n_resamples, row[f"{metric}_m"] or 1)
    p = f"p{p}" if p.startswith("<") else f"p={p}"
    return f"{interval_text(diff, lo, hi, '+.3f')} {p}{mark}"


def mde_cell(row: dict[str, Any], metric: str = HEADLINE_METRIC) -> str:
    """The Bonferroni-adjusted MDE; n/a for the reference and where it is undefined."""
    return NOT_AVAILABLE if row["reference"] else number_or_na(row[f"{metric}_mde_bonferroni"])


def reading_cell(row: dict[str, Any], metric: str = HEADLINE_METRIC) -> str:
    """helps, hurts, or ``cannot tell (MDE 0.034)``; n/a where there is no test."""
    text = row[f"{metric}_reading"]
    if text is None:
        return NOT_AVAILABLE
    mde = row[f"{metric}_mde_bonferroni"]
    return f"{text} (MDE {mde:.3f})" if text == CANNOT_TELL and not is_undefined(mde) else text


def detectable_text(
    rows: list[dict[str, Any]],
    target: float = MDE_TARGET,
    alpha: float = ALPHA,
    metric: str = HEADLINE_METRIC,
) -> str:
    """The sentence under the table: the range of the Bonferroni-adjusted MDE over the
    tested arms, and how many of them reach ``target``."""
    m = sum(not row["reference"] for row in rows)
    if m == 0:
        return f"No arm is tested against the reference yet: no detectable difference ({NOT_AVAILABLE})."
    arms = "arm" if m == 1 else "arms"
    mdes = sorted(
        row[f"{metric}_mde_bonferroni"]
        for row in rows
        if not row["reference"] and not is_undefined(row[f"{metric}_mde_bonferroni"])
    )
    design = (
        f"Smallest detectable difference in {label(metric)} ({100 * (1 - alpha):g}%, "
        f"power {MDE_POWER:g}, Bonferroni over {m} {arms}, paired over seeds "
        "and documents): "
    )
    if not mdes:
        return f"{design}{NOT_AVAILABLE} (the comparison records no standard error)."
    low, high = f"{mdes[0]:.3f}", f"{mdes[-1]:.3f}"
    spread = low if low == high else f"{low} to {high} across arms"
    reached = sum(mde <= target for mde in mdes)
    return f"{design}{spread}; arms within the {target:g} target: {reached} of {m}."


def train_cell(row: Mapping[str, Any]) -> str:
    """Wall minutes of training (an arm's mean per run), CPU minutes in brackets; n/a where
    unmeasured."""
    wall = row.get("train_wall_min")
    if is_undefined(wall):
        return NOT_AVAILABLE
    return f"{wall:.1f} ({number_or_na(row.get('train_cpu_min'), '.1f')})"


def study_markdown(
    rows: list[dict[str, Any]],
    comparison: dict[str, Any],
    title: str,
    forest: Sequence[str] = FOREST_METRICS,
    mde_target: float = MDE_TARGET,
) -> str:
    reference = comparison["reference_arm"]
    alpha = comparison.get("alpha", ALPHA)
    headline = label(HEADLINE_METRIC)
    n_notes = next(iter(comparison["runs"].values()))["counts"]["n_notes"]
    lines = [
        f"# {title}",
        "",
        f"Every arm scored on the same {int(n_notes)} evaluation notes. Metric cells: mean over "
        "the arm's training seeds +- SD (absent with one seed) [document bootstrap 95% interval "
        f"of the mean]. Differences from {reference}: two-level paired bootstrap over documents "
        "and training seeds, 95% interval, p Bonferroni-adjusted across arms (* below 0.05). "
        "Span metrics: overlap matching; label-consistent leakage: share of notes with a gold "
        "span that no prediction of its own label overlaps; detection and label-agnostic "
        "leakage: a prediction of any label protects a span. Train notes and synthetic share "
        "as realized by build_mixture; epsilon of the DP language model where the arm's data "
        "passed through it; train min: wall minutes of train_ner per run (CPU minutes), mean "
        f"over the arm's seeds. MDE {headline}: the smallest true difference in {headline} "
        f"this design would detect with power {MDE_POWER:g} at the Bonferroni-adjusted level "
        "(from the standard error of the bootstrap differences); reading: helps or hurts "
        "where the difference is significant, else cannot tell (a true effect below the MDE "
        "may go unseen).",
        "",
    ]
    header = ["arm", "seeds", "train notes", "synthetic share", "epsilon", "train min (CPU)"]
    header += [label(m) for m in ARM_METRICS]
    header += [f"delta {label(m)}" for m in forest]
    header += [f"MDE {headline}", f"reading ({headline})"]
    lines += markdown_table(
        header,
        [
            [
                row["arm"] + (" (reference)" if row["reference"] else ""),
                str(row["seeds"]),
                number_or_na(row["train_notes"], ".0f"),
                percent(row["synthetic_share"]),
                number_or_na(row["epsilon"], ".2f"),
                train_cell(row),
                *(metric_cell(row, m) for m in ARM_METRICS),
                *(delta_cell(row, m, comparison["n_resamples"]) for m in forest),
                mde_cell(row),
                reading_cell(row),
            ]
            for row in rows
        ],
    )
    lines += ["", detectable_text(rows, mde_target, alpha)]
    return "\n".join([*lines, ""])


def plot_forest(
    rows: list[dict[str, Any]],
    reference: str,
    n_notes: int,
    path: Path,
    forest: Sequence[str] = FOREST_METRICS,
) -> Any:
    """Differences from the reference arm with their intervals, one panel per metric.

    An undefined difference is written n/a on its row. Returns the (closed) figure.
    """
    plt = pyplot()
    tested = [row for row in rows if not row["reference"]]
    fig, axes = plt.subplots(
        1,
        len(forest),
        figsize=(5 * len(forest), max(2.5, 0.42 * len(tested) + 1.6)),
        sharey=True,
    )
    positions = np.arange(len(tested))[::-1]
    for ax, metric in zip(np.atleast_1d(axes), forest, strict=True):
        undefined = []
        for y, row in zip(positions, tested, strict=True):
            diff, lo, hi = (row[f"{metric}_{key}"] for key in ("diff", "diff_lo", "diff_hi"))
            if is_undefined(diff):
                undefined.append(float(y))
                continue
            # the colour follows the interval drawn (does it exclude 0?), the filling the
            # Bonferroni-adjusted test, so a point never reads as other than its bar
            excludes_zero = not (is_undefined(lo) or is_undefined(hi)) and (lo > 0 or hi < 0)
            color = SIGNIFICANT_COLOR if excludes_zero else NOT_SIGNIFICANT_COLOR
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
                markerfacecolor=color if row[f"{metric}_significant"] else "white",
            )
        mark_undefined(ax, undefined, horizontal=True)
        ax.axvline(0.0, color=PALETTE["black"], linewidth=0.8)
        ax.set_xlabel(
            f"{label(metric)}: arm - {reference}\n"
            f"({vocabulary.metric(metric).difference_unit()}, 95% interval)"
        )
        ax.grid(axis="x", alpha=0.3)
    first = np.atleast_1d(axes)[0]
    first.set_yticks(
        positions, [f"{row['arm']} (seeds={row['seeds']})" for row in tested], fontsize=8
    )
    first.set_ylabel("arm")
    fig.suptitle(
        f"Arms against {reference} on {n_notes} evaluation notes (blue: the 95% interval "
        "excludes 0, grey: not; filled: p < 0.05 after Bonferroni, hollow: not)",
        fontsize=10,
    )
    fig.tight_layout()
    save_figure(fig, path)
    return fig


def degenerate_arms(plan: Path | None, archives: Sequence[Path] | None) -> dict[str, str]:
    """Degenerate arm -> its canonical arm, from ``plan`` or an archive's plan.json."""
    if plan is None:
        plan = next((a / PLAN_FILE for a in archives or () if (a / PLAN_FILE).is_file()), None)
    if plan is None:
        return {}
    try:
        return read_plan(read_json(plan, "run plan")).degenerate_arms
    except ValueError as exc:
        raise InputError(plan, None, str(exc), "rerun plan-runs") from None


def degenerate_text(degenerate: Mapping[str, str]) -> str:
    """The line under the table naming each arm reported as another."""
    pairs = "; ".join(f"{arm} is {canonical}" for arm, canonical in sorted(degenerate.items()))
    return (
        "Degenerate arms (every run's training mixture and settings identical to a run of "
        f"another arm; reported once, as that arm, and not trained): {pairs}."
    )


def mixed_pool_arms(
    comparison: Mapping[str, Any], mixtures: Mapping[str, Mapping[str, Any]]
) -> dict[str, list[str]]:
    """Arms whose runs drew a pool in more than one version, with those pools' names.

    A pool's version is the digest of its file (``pool_digests`` of a build-mixture
    summary or an archived run). Runs whose mixtures record no digests (archived before
    they were recorded) are left out of the check.
    """
    mixed: dict[str, list[str]] = {}
    for arm in comparison.get("arm_order") or list(comparison["arms"]):
        versions: dict[str, set[str]] = {}
        for run in comparison["arms"][arm]["runs"]:
            digests = (mixtures.get(run) or {}).get("pool_digests") or {}
            for pool, digest in digests.items():
                versions.setdefault(pool, set()).add(digest)
        pools = sorted(pool for pool, seen in versions.items() if len(seen) > 1)
        if pools:
            mixed[arm] = pools
    return mixed


def mixed_pools_text(mixed: Mapping[str, Sequence[str]]) -> str:
    """The line under the table naming each arm whose seeds drew different pool versions."""
    arms = "; ".join(f"{arm} ({', '.join(pools)})" for arm, pools in sorted(mixed.items()))
    return (
        "Arms whose seeds drew from more than one version of a pool (pool files with "
        "different digests, e.g. built on machines that generate or key them differently; "
        f"their seed spread includes the pools' difference): {arms}."
    )


def add_archived_runs(
    archives: Sequence[Path],
    runs: Mapping[str, str],
    mixtures: dict[str, dict[str, Any]],
    privacy: dict[str, dict[str, Any]],
    train: dict[str, TrainTime],
    trained: dict[str, TrainingOutcome] | None = None,
    formats: dict[str, str] | None = None,
) -> None:
    """Add the sizes, budgets, train times, training outcomes and number formats of the
    archived runs that ``runs`` (run -> arm, of the comparison) holds to ``mixtures``,
    ``privacy``, ``train``, ``trained`` and ``formats``, in place."""
    for archived in read_archives(archives):
        if archived.name not in runs:
            continue  # an archive may hold more runs than one comparison
        if archived.mixture is not None:
            mixtures[archived.name] = archived.mixture
        if archived.privacy is not None:
            privacy[archived.name] = archived.privacy
        if archived.train is not None:
            train[archived.name] = archived.train
        if archived.trained is not None and trained is not None:
            trained[archived.name] = archived.trained
        if archived.number_format is not None and formats is not None:
            formats[archived.name] = archived.number_format


def significant_cells(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """``arm (metric)`` for every difference significant after Bonferroni."""
    return [
        f"{row['arm']} ({label(m)})" for row in rows for m in ARM_METRICS if row[f"{m}_significant"]
    ]


def write_study(
    rows: list[dict[str, Any]],
    comparison: dict[str, Any],
    out: Path,
    *,
    title: str,
    forest: Sequence[str] = FOREST_METRICS,
    mde_target: float = MDE_TARGET,
    degenerate: Mapping[str, str] | None = None,
    mixed_pools: Mapping[str, Sequence[str]] | None = None,
) -> None:
    """study.csv, study.md, study.html and study.png of ``rows`` into ``out``."""
    write_csv(rows, list(rows[0]), out / STUDY_CSV)
    markdown = study_markdown(rows, comparison, title, forest, mde_target)
    if degenerate:
        markdown += "\n" + degenerate_text(degenerate) + "\n"
    if mixed_pools:
        markdown += "\n" + mixed_pools_text(mixed_pools) + "\n"
    with atomic_text(out / STUDY_MD) as handle:
        handle.write(markdown)
    write_html(markdown, title, out / STUDY_HTML)
    n_notes = int(next(iter(comparison["runs"].values()))["counts"]["n_notes"])
    plot_forest(rows, comparison["reference_arm"], n_notes, out / STUDY_FIGURE, forest)
