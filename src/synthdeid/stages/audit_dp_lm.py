"""Memorization audit and text quality of the language models' samples (Zecevic et al., secs. 4.6, 4.7).

``synthdeid audit-dp-lm --run dp=samples.parquet:MODEL_DIR --run non_dp=...
--masked masked.parquet --canaries canaries.parquet --notes notes.parquet
--settings JSON --out-dir DIR``

For every model (``--run NAME=SAMPLES:MODEL``), over all its raw samples:

- memorization: each sample's maximum ROUGE-L against every training note
  (the masked seed notes and the planted canaries and outliers, i.e. exactly
  what the model was trained on), exact and near duplicates
  (:mod:`synthdeid.dplm.memorization`);
- canaries: each canary's best ROUGE-L against all samples, and the samples
  reproducing its distinctive phrase (:mod:`synthdeid.dplm.canaries`);
- outliers (when ``--canaries`` holds any): the same test of the planted
  clinically plausible outliers, each outlier's best (maximum) ROUGE-L against
  all samples and the samples regenerating its rare clinical combination
  (:mod:`synthdeid.dplm.outliers`);
- text quality: perplexity of held-out real notes (masked like the seeds,
  with their control code) under the model, distinct-1/2/3, and word counts
  against the held-out real notes (:mod:`synthdeid.dplm.text_quality`).

Writes audit.json, audit.md, audit.csv, audit.html, max_rouge_l.png,
canaries.png and, with outliers planted, outliers.png in ``--out-dir``.
"""

from __future__ import annotations

import argparse
import csv
import io
import logging
from pathlib import Path
from typing import Any

from synthdeid.artifacts import (
    atomic_text,
    make_provenance,
    write_json_atomic,
)
from synthdeid.cli_types import input_dir, input_file, json_object, output_dir
from synthdeid.dplm.audit_report import (
    DISTINCT_N,
    audit_rows,
    heldout_masked,
    quality_for,
    quality_markdown,
    read_samples,
)
from synthdeid.errors import ConfigError, InputError
from synthdeid.notes import read_notes
from synthdeid.runtime import add_runtime_arguments, pick_device, set_threads

log = logging.getLogger(__name__)

SETTING_KEYS = {
    "near_threshold",
    "phrase_min_share",
    "resamples",
    "seed",
    "perplexity_parts",
    "exposure_references",
}
# reference canaries are drawn with the audit seed plus this, never the planting seed
REFERENCE_SEED_OFFSET = 1_000_003


def _parse_run(value: str) -> tuple[str, Path, Path]:
    """``NAME=SAMPLES:MODEL`` -> (name, samples path, model directory)."""
    name, sep, rest = value.partition("=")
    samples, sep2, model = rest.partition(":")
    if not (sep and sep2 and name and samples and model):
        raise argparse.ArgumentTypeError(f"expected NAME=SAMPLES.parquet:MODEL_DIR, got {value!r}")
    samples_path, model_dir = input_file(samples), input_dir(model)
    assert samples_path is not None and model_dir is not None  # None only for an empty value
    return name, samples_path, model_dir


def register_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--run", action="append", required=True, type=_parse_run, help="NAME=SAMPLES:MODEL_DIR"
    )
    parser.add_argument(
        "--masked", required=True, type=input_file, help="masked.parquet (training)"
    )
    parser.add_argument(
        "--canaries",
        required=True,
        type=input_file,
        help="canaries.parquet (the planted canaries and outliers)",
    )
    parser.add_argument("--notes", required=True, type=input_file, help="split notes.parquet")
    parser.add_argument("--settings", type=json_object, default={}, help="JSON: synth.dplm.audit")
    parser.add_argument("--out-dir", required=True, type=output_dir)
    add_runtime_arguments(parser)


def _csv_text(rows: list[dict[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def run(args: argparse.Namespace) -> None:

    from synthdeid.dplm.canaries import (
        CANARY,
        OUTLIER,
        CanaryReport,
        canary_report,
        of_kind,
        read_planted,
        reference_canaries,
    )
    from synthdeid.dplm.memorization import (
        audit_markdown,
        memorization_audit,
        plot_canaries,
        plot_max_rouge_histograms,
    )
    from synthdeid.dplm.rouge import RougeIndex
    from synthdeid.dplm.text_quality import distinct_n
    from synthdeid.reporting import markdown_to_html

    settings = dict(args.settings)
    unknown = sorted(set(settings) - SETTING_KEYS)
    if unknown:
        raise ConfigError(
            f"synth.dplm.audit: unknown keys {unknown}; known: {sorted(SETTING_KEYS)}"
        )
    names = [name for name, _, _ in args.run]
    if len(set(names)) != len(names):
        raise ConfigError(f"--run names must be distinct, got {names}")
    set_threads(args.threads)
    device = pick_device(args.device)
    planted = read_planted(args.canaries)
    canaries, outliers = of_kind(planted, CANARY), of_kind(planted, OUTLIER)
    if not canaries:
        raise InputError(args.canaries, None, "no canaries: the canary test needs at least one")
    training = [n.text for n in read_notes(args.masked)] + [c.text for c in planted]
    heldout = heldout_masked(args.notes, list(settings.get("perplexity_parts", ["holdout"])))
    near = float(settings.get("near_threshold", 0.8))
    resamples = int(settings.get("resamples", 2000))
    seed = int(settings.get("seed", 42))
    index = RougeIndex(training)
    references = reference_canaries(
        canaries, int(settings.get("exposure_references", 200)), seed + REFERENCE_SEED_OFFSET
    )
    canary_texts = ([c.text for c in canaries], [c.text for c in references])
    audits, quality = {}, {}
    canary_reports: dict[str, CanaryReport] = {}
    outlier_reports: dict[str, CanaryReport] = {}  # none without planted outliers
    phrase_min_share = float(settings.get("phrase_min_share", 0.8))
    for name, samples_path, model_dir in args.run:
        samples, outcomes = read_samples(samples_path)
        log.info(
            "%s: auditing %d samples against %d training notes", name, len(samples), len(training)
        )
        audits[name] = memorization_audit(
            samples,
            training,
            near_threshold=near,
            resamples=resamples,
            seed=seed,
            progress=not args.no_progress,
            index=index,
        )
        samples_index = RougeIndex(samples)
        for reports, notes in ((canary_reports, canaries), (outlier_reports, outliers)):
            if notes:
                reports[name] = canary_report(
                    notes,
                    samples,
                    phrase_min_share=phrase_min_share,
                    resamples=resamples,
                    seed=seed,
                    index=samples_index,
                )
        quality[name] = quality_for(
            name,
            samples,
            model_dir,
            heldout,
            device=device,
            canaries=canary_texts,
            resamples=resamples,
            seed=seed,
        )
        quality[name]["outcomes"] = outcomes
    real_distinct = {f"distinct_{n}": distinct_n(heldout, n) for n in DISTINCT_N}
    out = args.out_dir
    out.mkdir(parents=True, exist_ok=True)
    plot_max_rouge_histograms(audits, out / "max_rouge_l.png")
    plot_canaries(canary_reports, out / "canaries.png")
    figures = ["max_rouge_l.png", "canaries.png"]
    if outlier_reports:
        plot_canaries(outlier_reports, out / "outliers.png")
        figures.append("outliers.png")
    else:  # no outliers planted: no figure of them, not even one left from an earlier run
        (out / "outliers.png").unlink(missing_ok=True)
    markdown = "\n".join(
        [
            "# DP language model: memorization audit and text quality",
            "",
            audit_markdown(
                audits,
                canary_reports,
                histogram="max_rouge_l.png",
                canary_figure="canaries.png",
                outliers=outlier_reports or None,
                outlier_figure="outliers.png" if outlier_reports else None,
            ),
            quality_markdown(quality, real_distinct),
        ]
    )
    with atomic_text(out / "audit.md") as handle:
        handle.write(markdown)
    with atomic_text(out / "audit.html") as handle:
        handle.write(
            markdown_to_html(
                markdown,
                "DP language model audit",
                images={name: out / name for name in figures},
            )
        )
    rows = audit_rows(audits, quality, canary_reports, outlier_reports)
    with atomic_text(out / "audit.csv") as handle:
        handle.write(_csv_text(rows))
    provenance = make_provenance(
        "audit-dp-lm",
        {"settings": settings, "runs": names},
        {"masked": args.masked, "canaries": args.canaries, "notes": args.notes}
        | {f"samples_{name}": path for name, path, _ in args.run},
    )
    write_json_atomic(
        {
            "models": {
                name: {
                    "memorization": audits[name].to_json(),
                    "canaries": canary_reports[name].to_json(),
                    "outliers": (
                        outlier_reports[name].to_json() if name in outlier_reports else None
                    ),
                    **quality[name],
                }
                for name in names
            },
            "real_heldout": {"notes": len(heldout), **real_distinct},
            "training_notes": len(training),
            "provenance": provenance,
        },
        out / "audit.json",
    )
    for row in rows:
        log.info(
            "%s: mean max ROUGE-L %.3f [%.3f, %.3f], near duplicates %d/%d, canaries "
            "reproduced %d, outliers regenerated %s",
            row["model"],
            row["mean_max_rouge_l"],
            row["mean_ci_lo"],
            row["mean_ci_hi"],
            row["n_near_duplicates"],
            row["n_samples"],
            row["canaries_reproduced"],
            f"{row['outliers_regenerated']}/{len(outliers)}" if outliers else "n/a (none planted)",
        )
