"""Train an extractor on the synthetic report/value pairs; score it on reports of real rows (Lorenzo et al. 2026, sec. 4).

The fine-tuned extractor (:mod:`synthdeid.tabular.extractor`) learns from the
faithful pairs of check_faithfulness; with an LLM backend configured, the
0-shot and k-shot baselines (:mod:`synthdeid.tabular.extraction_llm`) answer
the same test reports. The test reports are the real holdout rows written by
the seeded grammar (:func:`synthdeid.tabular.extraction.holdout_examples`): real
values, the grammar's wording, no real report text. Every extractor is scored
on the same reports (the first ``llm.max_reports`` when baselines run).

Writes extraction.json / .md / .html / .csv / .png (scores only) and, in a
``local/`` folder, the predictions on the test reports (derived from real
rows: local-only).
"""

from __future__ import annotations

import argparse
import logging
from collections import Counter
from typing import Any

import pyarrow as pa

from synthdeid.artifacts import (
    atomic_text,
    make_provenance,
    read_parquet_with_provenance,
    require_columns,
    write_json_atomic,
    write_parquet_atomic,
)
from synthdeid.cli_types import (
    input_dir,
    input_file,
    json_list,
    json_object,
    output_dir,
    output_file,
)
from synthdeid.errors import ConfigError, InputError
from synthdeid.local_only import LOCAL_ONLY_METADATA, require_local_path
from synthdeid.reporting import write_html
from synthdeid.runtime import add_runtime_arguments, pick_device, set_threads
from synthdeid.settings import settings_from_mapping
from synthdeid.tabular.endpoint import guarded_backend, split_policy
from synthdeid.tabular.expert_rules import parse_rules
from synthdeid.tabular.extraction import (
    ExtractionScores,
    HoldoutSettings,
    holdout_examples,
    score_extraction,
    split_validation,
    training_examples,
)
from synthdeid.tabular.extraction_llm import (
    LlmBaselineSettings,
    load_extraction_prompt,
    run_llm_extraction,
)
from synthdeid.tabular.extraction_report import (
    extraction_csv,
    extraction_figure,
    extraction_markdown,
    extraction_summary,
)
from synthdeid.tabular.extractor import ExtractorSettings, train_extractor
from synthdeid.tabular.spec import load_spec
from synthdeid.tabular.tables import read_table, split_parts

log = logging.getLogger(__name__)

SECTION = "synth.tabular.extraction"
TITLE = "Information extraction from reports of real rows"
FINE_TUNED = "fine-tuned"
PARTS = ("model", "test", "llm")  # the sections of --settings besides the endpoint policy
PAIRS_COLUMNS = ("record_id", "report", "kept_json")
PREDICTIONS_SCHEMA = pa.schema(
    [
        pa.field("record_id", pa.string(), nullable=False),
        pa.field("extractor", pa.string(), nullable=False),
        pa.field("variable", pa.string(), nullable=False),
        pa.field("gold", pa.string(), nullable=False),
        pa.field("predicted", pa.string()),
    ]
)


def register_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pairs", required=True, type=input_file, help="faithful pairs.parquet")
    parser.add_argument("--prepared", required=True, type=input_file, help="prepared.parquet")
    parser.add_argument("--spec", required=True, type=input_file, help="variable spec (YAML)")
    parser.add_argument("--prompt", required=True, type=input_file, help="tabular_extraction.yaml")
    parser.add_argument("--settings", type=json_object, default={}, help=f"JSON object: {SECTION}")
    parser.add_argument(
        "--rules", type=json_list, default=[], help="JSON list: synth.tabular.verbalize.rules"
    )
    parser.add_argument("--cache-dir", type=input_dir, help="LLM response cache")
    parser.add_argument("--out-dir", required=True, type=output_dir)
    parser.add_argument(
        "--predictions",
        required=True,
        type=output_file,
        help="local/predictions.parquet (from real rows: local-only)",
    )
    add_runtime_arguments(parser)


def run(args: argparse.Namespace) -> None:
    require_local_path(args.predictions, "--predictions", "values read from real rows")
    policy, rest = split_policy(args.settings, SECTION)
    unknown = sorted(set(rest) - set(PARTS))
    if unknown:
        raise ConfigError(f"{SECTION}: unknown keys {unknown}; known: {list(PARTS)}")
    model_settings = settings_from_mapping(
        ExtractorSettings, rest.get("model", {}), f"{SECTION}.model"
    )
    test_settings = settings_from_mapping(HoldoutSettings, rest.get("test", {}), f"{SECTION}.test")
    llm_settings = settings_from_mapping(LlmBaselineSettings, rest.get("llm", {}), f"{SECTION}.llm")
    spec = load_spec(args.spec)
    pairs, _ = read_parquet_with_provenance(args.pairs)
    require_columns(args.pairs, pairs.column_names, PAIRS_COLUMNS, "faithful report/value pairs")
    train_all = training_examples(pairs.to_pandas(), spec, args.pairs)
    if not train_all:
        raise InputError(
            args.pairs, None, "no report states a variable faithfully: nothing to train on"
        )
    prepared, prepared_provenance = read_table(args.prepared, spec, ("split",))
    _, holdout = split_parts(prepared, args.prepared)
    tests = holdout_examples(holdout, spec, parse_rules(args.rules, spec), test_settings.seed)
    if test_settings.max_reports is not None:
        tests = tests[: test_settings.max_reports]
    # the endpoint is checked before anything is trained: a refused one costs nothing
    backend = guarded_backend(
        llm_settings.backend,
        policy,
        args.prepared,
        prepared_provenance,
        placeholders=(),
        cache_dir=args.cache_dir,
        where=SECTION,
    )
    set_threads(args.threads)
    train, validation = split_validation(
        train_all, model_settings.validation_fraction, model_settings.seed
    )
    extractor = train_extractor(
        train,
        validation,
        spec,
        model_settings,
        pick_device(args.device),
        progress=not args.no_progress,
    )
    fine_tuned: list[dict[str, str | None]] = [
        dict(found) for found in extractor.predict([t.report for t in tests])
    ]
    scored = tests
    predictions: dict[str, list[dict[str, str | None]]] = {}
    failures: dict[str, dict[str, int]] = {}
    if backend is not None:
        scored = tests[: llm_settings.max_reports] if llm_settings.max_reports else tests
        prompt = load_extraction_prompt(args.prompt)
        for shots in llm_settings.shots:
            name = f"{shots}-shot"
            log.info("LLM baseline %s on %d test reports", name, len(scored))
            answers, failed = run_llm_extraction(
                backend,
                scored,
                train_all,
                spec,
                prompt,
                shots=shots,
                seed=llm_settings.seed,
                max_tokens=llm_settings.max_tokens,
                progress=not args.no_progress,
            )
            predictions[name] = list(answers)
            failures[name] = dict(Counter(failed))
        backend.close()
    predictions = {FINE_TUNED: fine_tuned[: len(scored)], **predictions}
    scores = {
        name: score_extraction(
            scored, found, spec, resamples=test_settings.resamples, seed=test_settings.seed
        )
        for name, found in predictions.items()
    }
    everything = score_extraction(
        tests, fine_tuned, spec, resamples=test_settings.resamples, seed=test_settings.seed
    )
    summary = extraction_summary(
        scores, everything, failures, extractor.describe(), len(train_all), len(scored), len(tests)
    )
    _write_outputs(args, scores, summary, len(train_all), len(scored))
    rows = [
        {
            "record_id": t.record_id,
            "extractor": name,
            "variable": v,
            "gold": t.values[v],
            "predicted": p.get(v),
        }
        for name, found in predictions.items()
        for t, p in zip(scored, found, strict=True)
        for v in spec.names
    ]
    write_parquet_atomic(
        pa.Table.from_pylist(rows, schema=PREDICTIONS_SCHEMA),
        args.predictions,
        make_provenance("extract-tabular", {"local_only": True}, {"prepared": args.prepared}),
        metadata=LOCAL_ONLY_METADATA,
    )


def _write_outputs(
    args: argparse.Namespace,
    scores: dict[str, ExtractionScores],
    summary: dict[str, Any],
    n_train: int,
    n_scored: int,
) -> None:
    """The releasable outputs: scores (``summary``, :func:`extraction_summary`, and the
    provenance), table, figure (no report text, no row)."""
    provenance = make_provenance(
        "extract-tabular",
        {"settings": args.settings, "rules": args.rules},
        {"pairs": args.pairs, "prepared": args.prepared, "spec": args.spec, "prompt": args.prompt},
    )
    out = args.out_dir
    write_json_atomic({**summary, "provenance": provenance}, out / "extraction.json")
    markdown = extraction_markdown(scores, n_train, n_scored)
    with atomic_text(out / "extraction.md") as handle:
        handle.write(markdown)
    write_html(markdown, TITLE, out / "extraction.html")
    with atomic_text(out / "extraction.csv") as handle:
        handle.write(extraction_csv(scores))
    extraction_figure(scores, out / "extraction.png", n_reports=n_scored, title=TITLE)
    overall = scores[FINE_TUNED].accuracy
    log.info(
        "extraction: fine-tuned accuracy %s over %d test reports",
        "n/a" if overall is None else f"{overall.estimate:.3f}",
        n_scored,
    )
