"""Writing an evaluation (metrics.json / .md / .html / .csv, per_document.parquet, a figure).

``per_document.parquet`` keeps every counter of every document (explicit
schema, provenance in the metadata), so runs can be re-scored and compared
later (``compare-ner``) without the predictions. Every file is written
atomically. Figures take their look from :mod:`synthdeid.figures`, tables
their text and pages from :mod:`synthdeid.reporting`.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from synthdeid.artifacts import (
    atomic_text,
    read_parquet_with_provenance,
    require_columns,
    write_json_atomic,
    write_parquet_atomic,
)
from synthdeid.evaluation.bootstrap import BootstrapResult
from synthdeid.evaluation.metrics import (
    ALL,
    DEFINITIONS,
    HEADLINE_COUNTS,
    HEADLINE_RATIOS,
    LABEL_RATIOS,
    CountTable,
    split_column,
    table_columns,
)
from synthdeid.figures import PALETTE, error_bars, mark_undefined, pyplot, save_figure
from synthdeid.reporting import (
    NOT_AVAILABLE,
    format_interval,
    markdown_table,
    write_csv,
    write_html,
)

METRICS_JSON = "metrics.json"
METRICS_MD = "metrics.md"
METRICS_HTML = "metrics.html"
METRICS_CSV = "metrics.csv"
PER_DOCUMENT = "per_document.parquet"
RECALL_FIGURE = "per_label_recall.png"
OUTPUTS: tuple[str, ...] = (
    METRICS_JSON,
    METRICS_MD,
    METRICS_HTML,
    METRICS_CSV,
    PER_DOCUMENT,
    RECALL_FIGURE,
)


# human names of the evaluation figures, for axes and legends (never raw keys)
METRIC_LABELS: dict[str, str] = {
    "leakage_overlap_all": "label-consistent leakage",
    "leakage_overlap_phi": "label-consistent leakage, notes with PHI",
    "leakage_detection_all": "label-agnostic leakage",
    "leakage_detection_phi": "label-agnostic leakage, notes with PHI",
    "detection_recall": "detection recall",
    "detection_precision": "detection precision",
    "detection_f1": "detection F1",
    "span_overlap_recall": "span overlap recall",
    "span_overlap_precision": "span overlap precision",
    "span_overlap_f1": "span overlap F1",
    "span_exact_recall": "span exact recall",
    "span_exact_precision": "span exact precision",
    "span_exact_f1": "span exact F1",
    "coverage80_recall": "80% coverage recall",
    "token_recall": "token recall",
    "token_precision": "token precision",
    "token_f1": "token F1",
}
METRIC_LABELS.update(
    {key.removeprefix("span_"): name for key, name in METRIC_LABELS.items() if "span_" in key}
)

# per-label columns of the Markdown table (safety first)
MD_LABEL_RATIOS: tuple[str, ...] = (
    "detection_recall",
    "overlap_recall",
    "exact_recall",
    "overlap_precision",
    "overlap_f1",
    "exact_f1",
)


def per_document_schema(labels: Sequence[str]) -> pa.Schema:
    fields = [pa.field("note_id", pa.string(), nullable=False)]
    fields += [pa.field(name, pa.int32(), nullable=False) for name in table_columns(labels)]
    return pa.schema(fields)


def per_document_table(table: CountTable) -> pa.Table:
    schema = per_document_schema(table.labels)
    arrays = [pa.array(table.note_ids, pa.string())]
    arrays += [pa.array(table.values[:, k], pa.int32()) for k in range(table.values.shape[1])]
    return pa.Table.from_arrays(arrays, schema=schema)


def read_per_document(path: str | Path) -> CountTable:
    """Read a ``per_document.parquet`` written by ``evaluate-ner`` back into counts."""
    arrow, _ = read_parquet_with_provenance(path)
    require_columns(path, arrow.column_names, ["note_id"], "a per-document table")
    labels = tuple(
        dict.fromkeys(
            label for label, _ in map(split_column, arrow.column_names) if label and label != ALL
        )
    )
    expected = table_columns(labels)
    require_columns(
        path,
        arrow.column_names,
        expected,
        "a per-document table from evaluate-ner",
        "re-run evaluate-ner with this version",
    )
    values = np.column_stack(
        [arrow.column(name).to_numpy().astype(np.int64) for name in expected]
    ).reshape(arrow.num_rows, len(expected))
    note_ids = tuple(arrow.column("note_id").to_pylist())
    return CountTable(note_ids, labels, values)


def reported_labels(result: BootstrapResult) -> list[str]:
    """Labels with gold support or predictions, then ALL."""
    labels = [
        lab
        for lab in result.per_label
        if lab != ALL and (result.support[lab] or result.predicted[lab])
    ]
    return [*labels, ALL]


def metrics_document(
    run: str, result: BootstrapResult, provenance: dict[str, Any] | None = None
) -> dict[str, Any]:
    per_label = {}
    for label in reported_labels(result):
        entry: dict[str, Any] = {
            name: result.per_label[label][name].as_dict() for name in LABEL_RATIOS
        }
        entry["support"] = result.support[label]
        entry["n_predicted"] = result.predicted[label]
        per_label[label] = entry
    return {
        "run": run,
        "headline": {name: result.headline[name].as_dict() for name in HEADLINE_RATIOS},
        "counts": {name: int(value) for name, value in result.counts.items()},
        "per_label": per_label,
        "definitions": DEFINITIONS,
        "bootstrap": {
            "n_resamples": result.n_resamples,
            "seed": result.seed,
            "unit": "document, resampled with replacement",
            "interval": "95% percentile",
        },
        "provenance": provenance or {},
    }


def metrics_markdown(run: str, result: BootstrapResult) -> str:
    counts = result.counts
    lines = [
        f"# NER evaluation: {run}",
        "",
        f"{int(counts['n_notes'])} notes ({int(counts['n_notes_with_phi'])} with PHI), "
        f"{int(counts['n_gold_spans'])} gold spans, {int(counts['n_predicted_spans'])} "
        f"predicted spans. Intervals: 95% percentile bootstrap over documents "
        f"({result.n_resamples} resamples, seed {result.seed}).",
        "",
        "## Headline (safety first)",
        "",
    ]
    lines += markdown_table(
        ["metric", "estimate [95% CI]", "definition"],
        [
            [name, format_interval(result.headline[name]), DEFINITIONS[name]]
            for name in HEADLINE_RATIOS
        ],
    )
    lines += ["", "## Per label", ""]
    lines += markdown_table(
        ["label", "support", "predicted", *MD_LABEL_RATIOS],
        [
            [
                label,
                str(result.support[label]),
                str(result.predicted[label]),
                *(format_interval(result.per_label[label][name]) for name in MD_LABEL_RATIOS),
            ]
            for label in reported_labels(result)
        ],
    )
    lines += ["", f"Conventions: {DEFINITIONS['conventions']}.", ""]
    return "\n".join(lines)


def metrics_rows(result: BootstrapResult) -> list[dict[str, Any]]:
    """Long table: one row per (scope, label, metric)."""
    rows: list[dict[str, Any]] = []
    for name in HEADLINE_RATIOS:
        rows.append(
            {"scope": "headline", "label": ALL, "metric": name, **result.headline[name].as_dict()}
        )
    for label in reported_labels(result):
        for name in LABEL_RATIOS:
            rows.append(
                {
                    "scope": "label",
                    "label": label,
                    "metric": name,
                    **result.per_label[label][name].as_dict(),
                    "support": result.support[label],
                    "n_predicted": result.predicted[label],
                }
            )
    return rows


def plot_per_label_recall(result: BootstrapResult, path: Path, title: str) -> Any:
    """Span overlap recall per label with its interval; n/a where a label has no gold.

    Returns the (closed) figure, so tests can read its axes.
    """
    plt = pyplot()
    labels = [lab for lab in reported_labels(result) if result.support[lab]] or [ALL]
    intervals = [result.per_label[lab]["overlap_recall"] for lab in labels]
    fig, ax = plt.subplots(figsize=(max(4.0, 0.8 * len(labels) + 1.5), 3.8))
    positions = np.arange(len(labels))
    shown = [k for k, i in enumerate(intervals) if i.defined]
    ax.errorbar(
        positions[shown],
        [intervals[k].estimate for k in shown],
        yerr=error_bars([intervals[k] for k in shown]),
        fmt="o",
        capsize=4,
        color=PALETTE["blue"],
    )
    mark_undefined(ax, [float(k) for k, i in enumerate(intervals) if not i.defined])
    ax.set_xticks(positions, [f"{lab}\n(n={result.support[lab]})" for lab in labels], fontsize=8)
    ax.set_xlim(-0.5, len(labels) - 0.5)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("PHI label (n = gold spans)")
    ax.set_ylabel("span overlap recall (share of gold spans)")
    ax.set_title(f"{title}\n{int(result.counts['n_notes'])} notes", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    save_figure(fig, path)
    return fig


def plot_not_scored(path: Path, title: str, reason: str, ylabel: str) -> None:
    """A figure that says its statistic is undefined (never bars at 0)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.0, 3.0))
    text = textwrap.fill(f"n/a: {reason}", width=48)
    ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=9, transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    save_figure(fig, path)


def write_not_scored_report(
    out_dir: Path, run: str, reason: str, provenance: dict[str, Any] | None = None
) -> dict[str, Path]:
    """The outputs of ``evaluate-ner`` when no note can be scored: every figure n/a.

    For a silver pool from which the teacher kept no note (every answer
    failed): the step still finishes, and says why nothing was scored.
    """
    paths = {name: out_dir / name for name in OUTPUTS}
    empty = CountTable((), (), np.zeros((0, len(table_columns(()))), dtype=np.int64))
    write_parquet_atomic(per_document_table(empty), paths[PER_DOCUMENT], provenance)
    write_json_atomic(
        {
            "run": run,
            "not_scored": reason,
            "headline": {name: None for name in HEADLINE_RATIOS},
            "counts": {name: 0 for name in HEADLINE_COUNTS},
            "per_label": {},
            "definitions": DEFINITIONS,
            "bootstrap": None,
            "provenance": provenance or {},
        },
        paths[METRICS_JSON],
    )
    markdown = f"# {run}\n\nNo note scored: {reason}. Every figure is {NOT_AVAILABLE}.\n"
    with atomic_text(paths[METRICS_MD]) as handle:
        handle.write(markdown)
    write_html(markdown, f"NER evaluation: {run}", paths[METRICS_HTML])
    write_csv(
        [],
        ["scope", "label", "metric", "estimate", "ci_lo", "ci_hi", "support", "n_predicted"],
        paths[METRICS_CSV],
    )
    plot_not_scored(
        paths[RECALL_FIGURE], f"{run}: span overlap recall per label", reason, "span overlap recall"
    )
    return paths


def write_report(
    out_dir: Path,
    run: str,
    table: CountTable,
    result: BootstrapResult,
    provenance: dict[str, Any] | None = None,
) -> dict[str, Path]:
    """Write every output of ``evaluate-ner`` into ``out_dir``; return their paths."""
    paths = {name: out_dir / name for name in OUTPUTS}
    write_parquet_atomic(per_document_table(table), paths[PER_DOCUMENT], provenance)
    write_json_atomic(metrics_document(run, result, provenance), paths[METRICS_JSON])
    markdown = metrics_markdown(run, result)
    with atomic_text(paths[METRICS_MD]) as handle:
        handle.write(markdown)
    write_html(markdown, f"NER evaluation: {run}", paths[METRICS_HTML])
    write_csv(
        metrics_rows(result),
        ["scope", "label", "metric", "estimate", "ci_lo", "ci_hi", "support", "n_predicted"],
        paths[METRICS_CSV],
    )
    plot_per_label_recall(
        result, paths[RECALL_FIGURE], f"{run}: span overlap recall per label (95% CI)"
    )
    return paths
