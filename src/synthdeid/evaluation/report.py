"""Writing an evaluation (metrics.json / .md / .html / .csv, per_document.parquet, a figure).

``per_document.parquet`` keeps every counter of every document (explicit
schema, provenance and :data:`PER_DOCUMENT_VERSION` in the metadata), so runs
can be re-scored and compared later (``compare-ner``) without the
predictions; a file older than a counter reads with that counter missing
(:func:`read_per_document`). Every file is written
atomically. Figures take their look from :mod:`synthdeid.figures`, tables
their text and pages from :mod:`synthdeid.reporting`.
"""

from __future__ import annotations

import logging
import textwrap
from collections.abc import Collection, Mapping, Sequence
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
from synthdeid.errors import InputError
from synthdeid.evaluation.bootstrap import BootstrapResult
from synthdeid.figures import PALETTE, error_bars, mark_undefined, pyplot, save_figure
from synthdeid.reporting import (
    NOT_AVAILABLE,
    format_interval,
    markdown_table,
    write_csv,
    write_html,
)
from synthdeid.scoring.metrics import (
    ALL,
    DEFINITIONS,
    HEADLINE_COUNTS,
    HEADLINE_RATIOS,
    LABEL_RATIOS,
    CountTable,
    split_column,
    table_columns,
)
from synthdeid.scoring.vocabulary import (
    BY_NAME,
    CORE_COUNTERS,
    DOCUMENT_COUNTERS,
    LABEL_COUNTERS,
    select,
)

log = logging.getLogger(__name__)

METRICS_JSON = "metrics.json"
METRICS_MD = "metrics.md"
METRICS_HTML = "metrics.html"
METRICS_CSV = "metrics.csv"
PER_DOCUMENT = "per_document.parquet"
# the counters a per-document table holds: version 1 is LABEL_COUNTERS and
# DOCUMENT_COUNTERS as first written (files from before the version was recorded);
# raise it when a counter is added (older files then read with that counter missing)
PER_DOCUMENT_VERSION = 1
PER_DOCUMENT_VERSION_KEY = b"synthdeid.per_document_version"
RECALL_FIGURE = "per_label_recall.png"
OUTPUTS: tuple[str, ...] = (
    METRICS_JSON,
    METRICS_MD,
    METRICS_HTML,
    METRICS_CSV,
    PER_DOCUMENT,
    RECALL_FIGURE,
)


# human names of the evaluation figures, for axes and legends (never raw keys): by key
# and by per-label name
METRIC_LABELS: dict[str, str] = {name: m.label for name, m in BY_NAME.items()}

# per-label columns of the Markdown table (safety first)
MD_LABEL_RATIOS: tuple[str, ...] = select(
    "detection_recall",
    "overlap_recall",
    "exact_recall",
    "overlap_precision",
    "overlap_f1",
    "exact_f1",
)


def per_document_schema(labels: Sequence[str], missing: Collection[str] = ()) -> pa.Schema:
    """note_id, then every counter column of ``labels`` but those of ``missing`` counters."""
    fields = [pa.field("note_id", pa.string(), nullable=False)]
    fields += [
        pa.field(name, pa.int32(), nullable=False)
        for name in table_columns(labels)
        if split_column(name)[1] not in missing
    ]
    return pa.schema(fields)


def per_document_table(table: CountTable) -> pa.Table:
    """The counts as a table; a counter the source lacked (:attr:`CountTable.missing`) is
    left out, not written as zeros."""
    schema = per_document_schema(table.labels, table.missing)
    arrays = [pa.array(table.note_ids, pa.string())]
    arrays += [
        pa.array(table.column(name), pa.int32()) for name in schema.names if name != "note_id"
    ]
    return pa.Table.from_arrays(arrays, schema=schema)


def write_per_document(
    table: CountTable, path: Path, provenance: Mapping[str, Any] | None = None
) -> None:
    """``per_document.parquet``: the counts, their provenance and :data:`PER_DOCUMENT_VERSION`."""
    write_parquet_atomic(
        per_document_table(table),
        path,
        provenance,
        metadata={PER_DOCUMENT_VERSION_KEY: str(PER_DOCUMENT_VERSION).encode()},
    )


def per_document_version(metadata: Mapping[bytes, bytes] | None, path: str | Path) -> int:
    """The schema version a per-document table records (1 where it records none)."""
    raw = (metadata or {}).get(PER_DOCUMENT_VERSION_KEY)
    if raw is None:
        return 1
    try:
        return int(raw)
    except ValueError:
        raise InputError(path, None, f"unreadable per-document schema version {raw!r}") from None


def read_per_document(path: str | Path) -> CountTable:
    """Read a ``per_document.parquet`` written by ``evaluate-ner`` back into counts.

    A counter the file does not hold (it was written before the counter
    existed) is *missing*: the table carries it in :attr:`CountTable.missing`
    and every metric computed from it is undefined. A counter this version
    does not know (a newer file's) is ignored. A counter present for some
    labels and not others, or a file without :data:`CORE_COUNTERS`, is refused.
    """
    arrow, _ = read_parquet_with_provenance(path)
    require_columns(path, arrow.column_names, ["note_id"], "a per-document table")
    version = per_document_version(arrow.schema.metadata, path)
    present = [split_column(name) for name in arrow.column_names if name != "note_id"]
    labels = tuple(
        dict.fromkeys(
            label for label, counter in present if label != ALL and counter in LABEL_COUNTERS
        )
    )
    held = {counter for label, counter in present if label in (*labels, ALL)}
    missing = frozenset(LABEL_COUNTERS + DOCUMENT_COUNTERS) - held - CORE_COUNTERS
    expected = per_document_schema(labels, missing).names
    require_columns(
        path,
        arrow.column_names,
        expected,
        "a per-document table from evaluate-ner",
        "re-run evaluate-ner with this version",
    )
    if missing:
        log.warning(
            "%s (per-document schema %d) holds no %s: the figures computed from %s are n/a",
            path,
            version,
            ", ".join(sorted(missing)),
            "it" if len(missing) == 1 else "them",
        )
    columns, held_columns = table_columns(labels), set(expected)
    values = np.zeros((arrow.num_rows, len(columns)), dtype=np.int64)
    for k, name in enumerate(columns):
        if name in held_columns:
            values[:, k] = arrow.column(name).to_numpy().astype(np.int64)
    note_ids = tuple(arrow.column("note_id").to_pylist())
    return CountTable(note_ids, labels, values, missing)


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
    """Span-overlap recall per label with its interval; n/a where a label has no gold.

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
    ax.set_ylabel(f"{METRIC_LABELS['overlap_recall']} (share of gold spans)")
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
    write_per_document(empty, paths[PER_DOCUMENT], provenance)
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
        paths[RECALL_FIGURE],
        f"{run}: {METRIC_LABELS['overlap_recall']} per label",
        reason,
        METRIC_LABELS["overlap_recall"],
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
    write_per_document(table, paths[PER_DOCUMENT], provenance)
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
        result, paths[RECALL_FIGURE], f"{run}: {METRIC_LABELS['overlap_recall']} per label (95% CI)"
    )
    return paths
