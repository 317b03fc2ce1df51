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
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from synthdeid.artifacts import atomic_text, make_provenance, write_json_atomic
from synthdeid.cli_types import input_file, json_object, named_input_file, output_dir
from synthdeid.errors import ConfigError
from synthdeid.reporting import write_html
from synthdeid.runtime import add_runtime_arguments
from synthdeid.settings import settings_from_mapping
from synthdeid.tabular.budget import accounted_epsilon
from synthdeid.tabular.comparison import (
    REFERENCE,
    EvaluationSettings,
    cached_embedder,
    score_sample,
    spread,
)
from synthdeid.tabular.comparison_report import (
    comparison_csv,
    comparison_figure,
    comparison_markdown,
)
from synthdeid.tabular.spec import load_spec
from synthdeid.tabular.tables import read_table, split_parts

log = logging.getLogger(__name__)


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
        type=json_object,
        default={},
        help="JSON: max_subsets (null: all), encoder (null: bundled MiniLM, false: one-hot), seed",
    )
    parser.add_argument("--out-dir", required=True, type=output_dir)
    add_runtime_arguments(parser, threads=False, device=False)


def _parse_runs(runs: Sequence[tuple[str, Path]]) -> list[tuple[str, Path]]:
    """The ``--run LABEL=SAMPLES`` values, checked: labels must be unique."""
    runs = list(runs)
    labels = [label for label, _ in runs]
    if len(set(labels)) != len(labels):
        raise ConfigError(f"--run labels must be unique, got {labels}")
    return runs


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
    for label, path in _parse_runs(args.run):
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
