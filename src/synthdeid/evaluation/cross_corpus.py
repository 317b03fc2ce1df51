"""Runs x corpora: every run's model scored on its own holdout and on further corpora.

A model that scores well on the notes it was developed on may still fail on
another hospital's notes (SHIELD, sec. 3.3, cross-dataset tables). The
workflow's ``evaluation.corpora`` names further labelled corpora; every run's
model de-identifies each of them whole and ``evaluate-ner`` scores it
(``predict_ner_cross``, ``evaluate_ner_cross``). ``compare-ner`` then reads the
per-document counts of each (run, corpus) cell and writes one table per
headline metric (rows: runs; columns: corpora) with document-bootstrap
intervals, and one figure.

Within a corpus every run is scored on the same documents, with one resample
matrix, as in the run comparison; across corpora the documents differ, so
cells of different corpora are compared by their intervals only (no paired test).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from synthdeid.artifacts import atomic_text
from synthdeid.errors import ConfigError, InputError
from synthdeid.evaluation.bootstrap import bootstrap_metrics, check_same_documents
from synthdeid.evaluation.report import METRIC_LABELS, PER_DOCUMENT, read_per_document
from synthdeid.figures import (
    SERIES_COLORS,
    error_bars,
    mark_undefined,
    pyplot,
    save_figure,
    share_limits,
)
from synthdeid.reporting import format_interval, markdown_table, write_csv
from synthdeid.scoring.metrics import CountTable, order_labels
from synthdeid.scoring.vocabulary import select
from synthdeid.stats import Interval, resample_weights

# the headline figures of the table, safety first: recall, label-agnostic and
# label-consistent document leakage, then precision and span-overlap F1
CROSS_METRICS: tuple[str, ...] = select(
    "detection_recall",
    "leakage_detection_all",
    "leakage_overlap_all",
    "detection_precision",
    "span_overlap_f1",
)
CROSS_FIELDS: tuple[str, ...] = ("run", "corpus", "n_notes", "metric", "estimate", "ci_lo", "ci_hi")


@dataclass(frozen=True)
class CrossCell:
    """One run scored on one corpus."""

    run: str
    corpus: str
    n_notes: int
    metrics: dict[str, Interval]


def parse_cells(values: Sequence[Sequence[str]] | None) -> list[tuple[str, str, Path]]:
    """``--cross CORPUS RUN DIR`` arguments as (run, corpus, evaluate-ner folder)."""
    cells = []
    seen: set[tuple[str, str]] = set()
    for corpus, run, folder in values or ():
        if (run, corpus) in seen:
            raise ConfigError(f"--cross names run {run!r} on corpus {corpus!r} twice")
        seen.add((run, corpus))
        cells.append((run, corpus, Path(folder)))
    return cells


def _aligned(tables: dict[str, CountTable], folders: dict[str, Path], corpus: str) -> None:
    """Check that every run of one corpus scored the same documents (in place: one order)."""
    names = list(tables)
    first = tables[names[0]]
    for name in names[1:]:
        table = tables[name]
        if set(table.note_ids) != set(first.note_ids):
            raise InputError(
                folders[name] / PER_DOCUMENT,
                None,
                f"run {name!r} scored other documents of corpus {corpus!r} than run {names[0]!r}",
                "score every run on the whole corpus",
            )
        tables[name] = table.reordered(first.note_ids)
        try:
            check_same_documents(tables[name], first)
        except ValueError as exc:
            raise InputError(folders[name] / PER_DOCUMENT, None, str(exc)) from None


def score_cells(
    cells: Sequence[tuple[str, str, Path]], *, n_resamples: int, seed: int
) -> list[CrossCell]:
    """Bootstrap the headline metrics of every (run, corpus) cell, corpus by corpus.

    The runs of one corpus share a resample matrix (same documents, same draws).
    """
    by_corpus: dict[str, dict[str, Path]] = {}
    for run, corpus, folder in cells:
        by_corpus.setdefault(corpus, {})[run] = folder
    scored: dict[tuple[str, str], CrossCell] = {}
    for corpus, folders in by_corpus.items():
        tables = {run: read_per_document(folder / PER_DOCUMENT) for run, folder in folders.items()}
        labels = order_labels(label for t in tables.values() for label in t.labels)
        tables = {run: t.with_labels(labels) for run, t in tables.items()}
        _aligned(tables, folders, corpus)
        n_docs = len(next(iter(tables.values())).note_ids)
        weights = resample_weights(n_docs, n_resamples, seed)
        for run, table in tables.items():
            result = bootstrap_metrics(table, n_resamples=n_resamples, seed=seed, weights=weights)
            scored[(run, corpus)] = CrossCell(
                run, corpus, n_docs, {m: result.headline[m] for m in CROSS_METRICS}
            )
    return [scored[(run, corpus)] for run, corpus, _ in cells]


def runs_and_corpora(cells: Sequence[CrossCell]) -> tuple[list[str], list[str]]:
    """Runs and corpora in the order they were first named."""
    runs = list(dict.fromkeys(c.run for c in cells))
    corpora = list(dict.fromkeys(c.corpus for c in cells))
    return runs, corpora


def cross_rows(cells: Sequence[CrossCell]) -> list[dict[str, Any]]:
    """Long-format rows (one per run, corpus and metric); undefined figures are None."""
    return [
        {
            "run": c.run,
            "corpus": c.corpus,
            "n_notes": c.n_notes,
            "metric": m,
            **c.metrics[m].as_dict(),
        }
        for c in cells
        for m in CROSS_METRICS
    ]


def cross_markdown(cells: Sequence[CrossCell], titles: dict[str, str] | None = None) -> str:
    """One runs x corpora table per metric, each cell the estimate and its 95% interval."""
    runs, corpora = runs_and_corpora(cells)
    index = {(c.run, c.corpus): c for c in cells}
    n_notes = {c.corpus: c.n_notes for c in cells}
    titles = titles or {}
    header = ["run", *(f"{titles.get(k, k)} ({n_notes[k]} notes)" for k in corpora)]
    lines = [
        "## Runs on every corpus",
        "",
        "Each run's model on its own holdout and on every corpus of `evaluation.corpora`",
        "(whole corpus), with document-bootstrap 95% intervals; n/a where undefined and",
        "blank where a run was not scored on a corpus.",
    ]
    for metric in CROSS_METRICS:
        rows = [
            [
                run,
                *(
                    format_interval(index[(run, k)].metrics[metric]) if (run, k) in index else ""
                    for k in corpora
                ),
            ]
            for run in runs
        ]
        lines += ["", f"### {METRIC_LABELS.get(metric, metric)}", "", *markdown_table(header, rows)]
    return "\n".join(lines) + "\n"


PLOTTED: tuple[str, ...] = select(
    "detection_recall", "leakage_detection_all", "detection_precision"
)


def plot_cross(cells: Sequence[CrossCell], path: Path, titles: dict[str, str] | None = None) -> Any:
    """Recall, label-agnostic leakage and precision per run, one marker per corpus with its interval."""
    plt = pyplot()
    runs, corpora = runs_and_corpora(cells)
    index = {(c.run, c.corpus): c for c in cells}
    n_notes = {c.corpus: c.n_notes for c in cells}
    titles = titles or {}
    height = 1.2 + 0.35 * len(runs) * max(1, len(corpora)) ** 0.5
    fig, axes = plt.subplots(1, len(PLOTTED), figsize=(4.2 * len(PLOTTED), height), sharey=True)
    y = np.arange(len(runs), dtype=float)
    step = 0.7 / max(1, len(corpora))
    for ax, metric in zip(axes, PLOTTED, strict=True):
        for k, corpus in enumerate(corpora):
            offset = (k - (len(corpora) - 1) / 2) * step
            present = [
                (j, index[(r, corpus)].metrics[metric])
                for j, r in enumerate(runs)
                if (r, corpus) in index
            ]
            defined = [(j, i) for j, i in present if i.defined]
            if defined:
                ax.errorbar(
                    [i.estimate for _, i in defined],
                    [y[j] + offset for j, _ in defined],
                    xerr=error_bars([i for _, i in defined]),
                    fmt="o",
                    color=SERIES_COLORS[k % len(SERIES_COLORS)],
                    capsize=3,
                    label=f"{titles.get(corpus, corpus)} (n={n_notes[corpus]})",
                )
            mark_undefined(
                ax, [y[j] + offset for j, i in present if not i.defined], horizontal=True
            )
        # each panel fits its values (recall near 1, leakage near 0 would vanish on 0-1)
        ax.set_xlim(*share_limits([c.metrics[metric] for c in cells]))
        ax.set_xlabel(METRIC_LABELS.get(metric, metric) + " (95% CI; axis fits the values)")
        ax.grid(axis="x", alpha=0.3)
    axes[0].set_yticks(y, runs)
    axes[0].set_ylabel("run")
    axes[0].invert_yaxis()
    handles, labels = axes[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=min(4, len(corpora)), frameon=False)
    fig.suptitle("Every run on every corpus (document-bootstrap 95% intervals)")
    fig.tight_layout(rect=(0, 0.08, 1, 0.95))
    save_figure(fig, path)
    return fig


def write_cross_corpus(
    own: Sequence[tuple[str, Path]],
    own_corpus: str,
    others: Sequence[tuple[str, str, Path]],
    out: Path,
    *,
    n_resamples: int,
    seed: int,
) -> str:
    """cross_corpus.csv / .md / .png: the runs on their own holdout, then on every other corpus.

    ``own`` are the (run, folder) pairs of the holdout evaluation, ``others``
    the (run, corpus, folder) cells of ``--cross``; ``own_corpus`` names the
    holdout column. Returns the Markdown tables (for the report page).
    """
    if own_corpus in {corpus for _, corpus, _ in others}:
        raise ConfigError(f"--cross names the run's own corpus {own_corpus!r}; name the others")
    cells = score_cells(
        [(run, own_corpus, folder) for run, folder in own] + list(others),
        n_resamples=n_resamples,
        seed=seed,
    )
    titles = {own_corpus: f"{own_corpus} holdout"}
    write_csv(cross_rows(cells), CROSS_FIELDS, out / "cross_corpus.csv")
    markdown = cross_markdown(cells, titles)
    with atomic_text(out / "cross_corpus.md") as handle:
        handle.write(markdown)
    plot_cross(cells, out / "cross_corpus.png", titles)
    return markdown
