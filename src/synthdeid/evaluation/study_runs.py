"""The runs of a study, one row each: what it trained on and with, and how it scored.

``tabulate-study`` writes it beside the study table (study_runs.csv and
study_runs.md), from the same inputs: compare-ner's ``comparison.json`` (each
run's figures with their document bootstrap intervals), each run's
build-mixture sizes and ``train_ner`` benchmark, its training outcome
(:class:`synthdeid.evaluation.archive.TrainingOutcome`: the epoch kept of the
epochs run, the code and machine it trained with) and the number format it
trained in; or all of these from an archive. It is the per-run table a results
page shows under the study table, so that page needs no hand-made rows: a run
archived before its outcome was recorded reads n/a there, never a guess.

Rows go arm by arm in the comparison's order, runs in the order the comparison
lists them. Metrics are named as :mod:`synthdeid.scoring.vocabulary` names them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from synthdeid.artifacts import atomic_text
from synthdeid.evaluation.archive import TrainingOutcome, TrainTime
from synthdeid.evaluation.arms import ARM_METRICS
from synthdeid.evaluation.study_table import train_cell
from synthdeid.reporting import (
    NOT_AVAILABLE,
    interval_text,
    markdown_table,
    percent,
    write_csv,
)
from synthdeid.scoring.vocabulary import label

RUNS_CSV = "study_runs.csv"
RUNS_MD = "study_runs.md"


def machine_text(environment: Mapping[str, Any] | None) -> str | None:
    """``AMD EPYC (family 25, model 17), AVX512, 2 threads`` or the GPU's name; None where
    the run's history does not name its machine."""
    if not environment:
        return None
    if environment.get("device_name"):
        return str(environment["device_name"])
    parts = [environment.get("cpu") or "CPU n/a"]
    if environment.get("cpu_capability"):
        parts.append(str(environment["cpu_capability"]))
    if environment.get("threads"):
        parts.append(f"{environment['threads']} threads")
    return ", ".join(str(part) for part in parts)


def run_rows(
    comparison: Mapping[str, Any],
    mixtures: Mapping[str, Mapping[str, Any]],
    train: Mapping[str, TrainTime],
    trained: Mapping[str, TrainingOutcome],
    formats: Mapping[str, str],
) -> list[dict[str, Any]]:
    """One row per run of the comparison: arm, sizes, outcome, number format (``formats``:
    the one each trained in), machine, time and figures (None where a run has no such
    record: an ensemble's training, an older archive's machine)."""
    reference = comparison["reference_arm"]
    rows = []
    for arm in comparison.get("arm_order") or list(comparison["arms"]):
        for run in comparison["arms"][arm]["runs"]:
            mixture = mixtures.get(run) or {}
            time = train.get(run)
            outcome = trained.get(run)
            environment = outcome.environment if outcome is not None else None
            row: dict[str, Any] = {
                "run": run,
                "arm": arm,
                "reference": arm == reference,
                "train_notes": mixture.get("n_train_total"),
                "synthetic_share": mixture.get("realized_synthetic_fraction"),
                "best_epoch": outcome.best_epoch if outcome is not None else None,
                "epochs": outcome.epochs if outcome is not None else None,
                "precision": formats.get(run),
                "code_version": (environment or {}).get("code_version"),
                "machine": machine_text(environment),
                "train_wall_min": time.wall_s / 60 if time is not None else None,
                "train_cpu_min": time.cpu_s / 60
                if time is not None and time.cpu_s is not None
                else None,
            }
            headline = comparison["runs"][run]["headline"]
            for metric in ARM_METRICS:
                value = headline.get(metric) or {}
                row[metric] = value.get("estimate")
                row[f"{metric}_ci_lo"] = value.get("ci_lo")
                row[f"{metric}_ci_hi"] = value.get("ci_hi")
            rows.append(row)
    return rows


def _text(value: Any) -> str:
    return NOT_AVAILABLE if value is None else str(value)


def _epoch_cell(row: Mapping[str, Any]) -> str:
    if row["best_epoch"] is None:
        return NOT_AVAILABLE
    return f"{row['best_epoch']} of {row['epochs']}"


def _notes_cell(row: Mapping[str, Any]) -> str:
    if row["train_notes"] is None:
        return NOT_AVAILABLE
    return f"{row['train_notes']} ({percent(row['synthetic_share'])} synthetic)"


def runs_markdown(
    rows: Sequence[Mapping[str, Any]], comparison: Mapping[str, Any], title: str
) -> str:
    n_notes = int(next(iter(comparison["runs"].values()))["counts"]["n_notes"])
    lines = [
        f"# {title}: the runs",
        "",
        f"Every run scored on the same {n_notes} evaluation notes; figures with their "
        "document bootstrap 95% interval. Span metrics: overlap matching; label-consistent "
        "leakage: share of notes with a gold span that no prediction of its own label "
        "overlaps; detection and label-agnostic leakage: a prediction of any label protects "
        "a span. Train notes as realized by build_mixture; best epoch: the epoch whose "
        "weights were kept, of the epochs run; format: the number format it trained in; "
        "trained with: the package version and git commit of the code that trained it; "
        "machine: its CPU and the vector kernels torch used there, or its GPU; train min: "
        "wall minutes of train_ner (CPU minutes). n/a: not recorded for this run.",
        "",
    ]
    header = ["run", "arm", "train notes", "best epoch", "format", "trained with", "machine"]
    header += [label(metric) for metric in ARM_METRICS]
    header += ["train min (CPU)"]
    lines += markdown_table(
        header,
        [
            [
                row["run"],
                row["arm"] + (" (reference)" if row["reference"] else ""),
                _notes_cell(row),
                _epoch_cell(row),
                _text(row["precision"]),
                _text(row["code_version"]),
                _text(row["machine"]),
                *(interval_text(row[m], row[f"{m}_ci_lo"], row[f"{m}_ci_hi"]) for m in ARM_METRICS),
                train_cell(row),
            ]
            for row in rows
        ],
    )
    return "\n".join([*lines, ""])


def write_runs(
    rows: Sequence[dict[str, Any]], comparison: Mapping[str, Any], out: Path, *, title: str
) -> None:
    """study_runs.csv and study_runs.md of ``rows`` into ``out``."""
    write_csv(rows, list(rows[0]), out / RUNS_CSV)
    with atomic_text(out / RUNS_MD) as handle:
        handle.write(runs_markdown(rows, comparison, title))
