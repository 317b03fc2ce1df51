"""Compare tabular synthesizers: fidelity, similarity and novelty over their samples (Lorenzo et al. 2026, Table 1).

Each synthesizer's independent samples are scored against the train half
(fidelity, similarity, identical matches, NNDR) and the holdout half (DCR
share, DCR overfitting score); every figure is the mean over the samples,
with its standard deviation, minimum and maximum. The real holdout half is
scored like a sample as the reference a synthesizer is read against (its
novelty figures, which compare with the holdout itself, are left empty).
Writes comparison.json, a Markdown table laid out like Table 1 of Lorenzo et al. 2026
(and the same table as comparison.html, which the Snakemake report shows inline),
a long CSV and a figure.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from synthdeid.artifacts import atomic_text, make_provenance, write_json_atomic
from synthdeid.cli_types import input_file, named_input_file, output_dir
from synthdeid.errors import ConfigError
from synthdeid.figures import PALETTE, mark_undefined, pyplot, save_figure
from synthdeid.reporting import (
    NOT_AVAILABLE,
    markdown_table,
    percent,
    undefined_to_none,
    write_html,
)
from synthdeid.runtime import add_runtime_arguments
from synthdeid.settings import settings_from_mapping
from synthdeid.stats import is_undefined
from synthdeid.tabular.budget import TOLERANCE as EPSILON_TOLERANCE
from synthdeid.tabular.budget import accounted_epsilon
from synthdeid.tabular.metrics import (
    fidelity,
    identical_match_share,
    novelty,
    similarity,
    summarize_samples,
)
from synthdeid.tabular.spec import load_spec
from synthdeid.tabular.tables import read_table, split_parts

log = logging.getLogger(__name__)

REFERENCE = "holdout (real)"
FIDELITY_ROWS = (
    ("overall", "Overall accuracy"),
    ("univariate", "Accuracy - univariate"),
    ("bivariate", "Accuracy - bivariate"),
    ("trivariate", "Accuracy - trivariate"),
)
NOVELTY_ROWS = (
    ("identical_match_share", "% identical matches (lower is better)"),
    ("nndr_ratio", "NNDR, synthetic / holdout (higher is more novel)"),
    ("dcr_share", "DCR share (0.5 is ideal)"),
    ("dcr_overfitting_score", "DCR overfitting score (1 is best)"),
)
PERCENT = {"overall", "univariate", "bivariate", "trivariate", "identical_match_share", "dcr_share"}


@dataclass(frozen=True)
class EvaluationSettings:
    """synth.tabular.evaluation: subsets for fidelity, the row encoder for similarity."""

    max_subsets: int | None = None
    encoder: str | bool | None = None  # None: bundled MiniLM; False: one-hot rows
    seed: int = 0


def register_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prepared", required=True, type=input_file, help="prepared.parquet")
    parser.add_argument("--spec", required=True, type=input_file, help="variable spec (YAML)")
    parser.add_argument(
        "--run",
        action="append",
        required=True,
        type=named_input_file,
        metavar="LABEL=SAMPLES",
        help="a synthesizer's samples.parquet (privacy.json beside it), repeatable",
    )
    parser.add_argument(
        "--settings",
        type=json.loads,
        default={},
        help="JSON: max_subsets (null: all), encoder (null: bundled MiniLM, false: one-hot), seed",
    )
    parser.add_argument("--out-dir", required=True, type=output_dir)
    add_runtime_arguments(parser, threads=False, device=False)


def parse_runs(runs: Sequence[tuple[str, Path]]) -> list[tuple[str, Path]]:
    """The ``--run LABEL=SAMPLES`` values, checked: labels must be unique."""
    runs = list(runs)
    labels = [label for label, _ in runs]
    if len(set(labels)) != len(labels):
        raise ConfigError(f"--run labels must be unique, got {labels}")
    return runs


def onehot_embedder() -> Callable[[Sequence[str]], np.ndarray]:
    """Rows as indicator vectors of their ``variable: value`` pairs (no model needed)."""

    def embed(texts: Sequence[str]) -> np.ndarray:
        pairs = [text.split("; ") for text in texts]
        vocabulary = {p: i for i, p in enumerate(sorted({p for row in pairs for p in row}))}
        out = np.zeros((len(texts), len(vocabulary)), dtype=np.float32)
        for i, row in enumerate(pairs):
            out[i, [vocabulary[p] for p in row]] = 1.0
        return out

    return embed


def cached_embedder(
    encoder: str | bool | None, progress: bool
) -> Callable[[Sequence[str]], np.ndarray]:
    """The row encoder, each distinct text embedded once across every sample."""
    if encoder is False:
        return onehot_embedder()
    from synthdeid.embeddings import SentenceEncoder

    model = SentenceEncoder.load(encoder if isinstance(encoder, str) else None)
    cache: dict[str, np.ndarray] = {}

    def embed(texts: Sequence[str]) -> np.ndarray:
        new = [t for t in dict.fromkeys(texts) if t not in cache]
        if new:
            for text, vector in zip(new, model.embed(new, progress=progress), strict=True):
                cache[text] = vector
        return np.stack([cache[t] for t in texts])

    return embed


def score_sample(
    train: pd.DataFrame,
    holdout: pd.DataFrame,
    sample: pd.DataFrame,
    settings: EvaluationSettings,
    embed: Callable[[Sequence[str]], np.ndarray],
    with_novelty: bool,
) -> dict[str, float]:
    scores: dict[str, float] = {
        **fidelity(train, sample, max_subsets=settings.max_subsets, seed=settings.seed).as_dict(),
        "similarity": similarity(train, sample, embed),
    }
    if with_novelty:
        scores.update(novelty(train, holdout, sample).as_dict())
    else:
        scores["identical_match_share"] = identical_match_share(train, sample)
    return scores


def spread(values: list[float]) -> dict[str, float | None]:
    """Mean, std, min, max and n over samples; undefined figures (std of one) as None (JSON null)."""
    return undefined_to_none(summarize_samples(values))


def _number(value: float, key: str) -> str:
    if is_undefined(value):
        return NOT_AVAILABLE
    return percent(value, 2) if key in PERCENT else f"{value:.3f}"


def privacy_cell(result: dict[str, Any]) -> str:
    """``epsilon 3``, or ``epsilon 0.878 accounted (budget 3)`` where the synthesizer's own
    accountant reports less than its budget (DP-CTGAN after its configured epochs)."""
    budget, accounted = result.get("epsilon"), result.get("epsilon_accounted")
    if budget is None:
        return str(result.get("privacy", ""))
    if accounted is None or abs(accounted - budget) <= EPSILON_TOLERANCE:
        return f"epsilon {budget:g}"
    return f"epsilon {accounted:.3g} accounted (budget {budget:g})"


def comparison_markdown(results: list[dict[str, Any]]) -> str:
    """Metrics as rows, synthesizers as columns (mean, with the spread over samples)."""
    labels = [r["label"] for r in results]
    table = [
        [
            "**Privacy**",
            *(privacy_cell(r) for r in results),
        ]
    ]
    sections = (
        ("**Fidelity**", FIDELITY_ROWS),
        ("**Similarity**", (("similarity", "Cosine similarity"),)),
        ("**Novelty**", NOVELTY_ROWS),
    )
    for title, rows in sections:
        table.append([title, *([""] * len(labels))])
        for key, name in rows:
            cells = []
            for r in results:
                metric = r["metrics"].get(key)
                if metric is None:  # not measured for this column (the real reference)
                    cells.append("-")
                    continue
                if metric["mean"] is None:  # undefined on every sample
                    cells.append(NOT_AVAILABLE)
                    continue
                std = metric["std"]
                text = _number(metric["mean"], key)
                if std is not None and metric["n"] > 1:
                    text += f" ± {_number(std, key)}"
                cells.append(text)
            table.append([name, *cells])
    samples = ", ".join(f"{r['label']} {r['samples']}" for r in results)
    lines = markdown_table(["Metric \\ Synthesizer", *labels], table)
    lines.append("")
    lines.append(
        f"Mean ± standard deviation over independent samples ({samples}); "
        f"-: not measured for the real reference; {NOT_AVAILABLE}: undefined."
    )
    return "\n".join(lines) + "\n"


def comparison_csv(results: list[dict[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["synthesizer", "metric", "mean", "std", "min", "max", "n"])
    for r in results:
        for key, m in r["metrics"].items():
            writer.writerow([r["label"], key, m["mean"], m["std"], m["min"], m["max"], m["n"]])
    return buffer.getvalue()


# legend names of the figure's series (the table's row names, without the hints)
FIGURE_LABELS: dict[str, str] = {
    "univariate": "univariate",
    "bivariate": "bivariate",
    "trivariate": "trivariate",
    "identical_match_share": "identical matches with training rows",
    "dcr_share": "DCR share (closer to a training row than to a holdout row)",
}


def comparison_figure(results: list[dict[str, Any]], path: Path) -> Any:
    """Fidelity by order and two novelty figures per synthesizer, with the spread over samples.

    Bars are means over each synthesizer's samples (n in the tick labels),
    error bars the standard deviation; an undefined mean is written n/a.
    Returns the (closed) figure.
    """
    plt = pyplot()
    labels = [f"{r['label']}\n(n = {r['samples']})" for r in results]
    x = np.arange(len(labels))
    figure, axes = plt.subplots(1, 2, figsize=(max(9, 1.8 * len(labels) + 4), 4.6))
    panels = (
        (axes[0], ("univariate", "bivariate", "trivariate"), "Fidelity (accuracy, 1 is best)"),
        (axes[1], ("identical_match_share", "dcr_share"), "Novelty (shares of rows)"),
    )
    for ax, keys, title in panels:
        width = 0.8 / len(keys)
        for j, key in enumerate(keys):
            means = [r["metrics"].get(key, {}).get("mean") for r in results]
            stds = [r["metrics"].get(key, {}).get("std") for r in results]
            shown = [k for k, m in enumerate(means) if m is not None and not np.isnan(m)]
            offsets = x + (j - (len(keys) - 1) / 2) * width
            ax.bar(
                offsets[shown],
                [means[k] for k in shown],
                width,
                yerr=[0.0 if stds[k] is None or np.isnan(stds[k]) else stds[k] for k in shown],
                capsize=2,
                label=FIGURE_LABELS[key],
            )
            mark_undefined(ax, [float(offsets[k]) for k in range(len(means)) if k not in shown])
        ax.set_xticks(x, labels, rotation=30, ha="right", fontsize=8)
        ax.set_xlabel("synthesizer (n = independent samples)")
        ax.set_ylim(0, 1.12)
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=7, loc="upper right")
    axes[0].set_ylabel("accuracy (1 - half the L1 distance, 0 to 1)")
    axes[1].set_ylabel("share of synthetic rows (0 to 1)")
    axes[1].axhline(0.5, color=PALETTE["grey"], linewidth=0.8, linestyle="--")
    figure.suptitle("Mean over samples, error bars: standard deviation", fontsize=9)
    figure.tight_layout()
    save_figure(figure, path)
    return figure


def run(args: argparse.Namespace) -> None:
    settings = settings_from_mapping(EvaluationSettings, args.settings, "synth.tabular.evaluation")
    spec = load_spec(args.spec)
    prepared, _ = read_table(args.prepared, spec, ("split",))
    train, holdout = split_parts(prepared, args.prepared)
    train, holdout = train[spec.names], holdout[spec.names]
    embed = cached_embedder(settings.encoder, progress=not args.no_progress)
    results: list[dict[str, Any]] = []
    reference = score_sample(train, holdout, holdout, settings, embed, with_novelty=False)
    results.append(
        {
            "label": REFERENCE,
            "privacy": "real",
            "samples": 1,
            "metrics": {k: spread([v]) for k, v in reference.items()},
        }
    )
    inputs: dict[str, Path] = {"prepared": args.prepared, "spec": args.spec}
    for label, path in parse_runs(args.run):
        samples, provenance = read_table(path, spec, ("sample",))
        privacy = json.loads((path.parent / "privacy.json").read_text(encoding="utf-8"))
        per_sample: dict[str, list[float]] = {}
        groups = list(samples.groupby("sample", sort=True))
        for _, sample in tqdm(groups, desc=f"scoring {label}", disable=args.no_progress):
            scores = score_sample(train, holdout, sample[spec.names], settings, embed, True)
            for key, value in scores.items():
                per_sample.setdefault(key, []).append(value)
        results.append(
            {
                "label": label,
                "synthesizer": privacy["synthesizer"],
                "dp": privacy["dp"],
                "epsilon": privacy.get("epsilon_total"),
                "epsilon_accounted": accounted_epsilon(privacy),
                "privacy": f"epsilon {privacy['epsilon_total']:g}" if privacy["dp"] else "none",
                "samples": len(groups),
                "metrics": {k: spread(v) for k, v in per_sample.items()},
            }
        )
        inputs[label] = path
    out = args.out_dir
    provenance = make_provenance("evaluate-tabular", {"settings": args.settings}, inputs)
    write_json_atomic({"results": results, "provenance": provenance}, out / "comparison.json")
    markdown = comparison_markdown(results)
    with atomic_text(out / "comparison.md") as handle:
        handle.write(markdown)
    write_html(markdown, "Synthesizer comparison", out / "comparison.html")
    with atomic_text(out / "comparison.csv") as handle:
        handle.write(comparison_csv(results))
    comparison_figure(results, out / "comparison.png")
    for r in results[1:]:
        m = r["metrics"]
        log.info(
            "%s: fidelity %.3f, similarity %.3f, identical %.3f, DCR share %.3f",
            r["label"],
            m["overall"]["mean"],
            m["similarity"]["mean"],
            m["identical_match_share"]["mean"],
            m["dcr_share"]["mean"],
        )
