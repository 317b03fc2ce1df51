"""Verbalize synthetic rows into reports with PHI placeholders, filled locally into a pool.

Each row of the subsample goes through the expert rules, then to the LLM
backend (the template regime's clients: OpenAI-compatible HTTP or local
transformers) with the versioned prompt, within the endpoint policy of
:mod:`synthdeid.tabular.endpoint` (trusted hosts; a non-DP synthesizer's rows
stay on this machine unless ``allow_non_dp_rows``; the request guard), or, for backend ``none``, to the
seeded grammar of :mod:`synthdeid.tabular.verbalize` (logged, recorded as
``generator = grammar`` and in the pool's source). Answers pass the template
validator's JSON, placeholder and identifier checks; accepted reports are
filled with local surrogates at exact offsets and written as a notes pool
that the de-identification mixtures can draw from.

Writes reports.parquet (one row per record: the values after the rules, the
numbers drawn, status, template; its provenance carries the rows'
synthesizer on to the judge), the pool (pii / no_pii / removals) and a
summary.
"""

from __future__ import annotations

import argparse
import json
import logging

import pyarrow as pa

from synthdeid.artifacts import make_provenance, write_parquet_atomic
from synthdeid.cli_types import input_dir, input_file, json_object, output_file
from synthdeid.identifiers import IdentifierScanner
from synthdeid.llm.base import ChatResponse
from synthdeid.mentions import SurfaceIndex
from synthdeid.runtime import add_runtime_arguments
from synthdeid.settings import settings_from_mapping
from synthdeid.synthesis.fill import TemplateFiller
from synthdeid.synthesis.placeholders import load_allowlist
from synthdeid.synthesis.pools import DedupSettings, Template, build_pools, write_pools
from synthdeid.synthesis.templates import REFUSED_BY_GUARD
from synthdeid.synthesis.validator import ACCEPTED, REJECTED, TemplateValidator, Verdict
from synthdeid.tabular.endpoint import guarded_backend, split_policy
from synthdeid.tabular.expert_rules import RuledRow, apply_rules, parse_rules
from synthdeid.tabular.report_generation import VerbalizeSettings, llm_verdicts
from synthdeid.tabular.spec import load_spec
from synthdeid.tabular.synthesizers import rows_synthesizer
from synthdeid.tabular.tables import read_table
from synthdeid.tabular.verbalize import (
    GRAMMAR,
    REPORT_VARIANT,
    grammar_reports,
    load_report_prompt,
    record_rng,
)

log = logging.getLogger(__name__)


REPORTS_SCHEMA = pa.schema(
    [
        pa.field("record_id", pa.string(), nullable=False),
        pa.field("note_id", pa.string(), nullable=False),
        pa.field("generator", pa.string(), nullable=False),
        pa.field("status", pa.string(), nullable=False),
        pa.field("reason", pa.string()),
        pa.field("detail", pa.string()),
        pa.field("values_json", pa.string(), nullable=False),
        pa.field("drawn_json", pa.string(), nullable=False),
        pa.field("rules_applied", pa.list_(pa.string()), nullable=False),
        pa.field("template", pa.string()),
        pa.field("input_tokens", pa.int64()),
        pa.field("output_tokens", pa.int64()),
    ]
)
SECTION = "synth.tabular.verbalize"


def register_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--subsample", required=True, type=input_file, help="subsample.parquet")
    parser.add_argument("--spec", required=True, type=input_file, help="variable spec (YAML)")
    parser.add_argument("--allowlist", required=True, type=input_file, help="placeholders.yaml")
    parser.add_argument("--prompt", required=True, type=input_file, help="tabular_report.yaml")
    parser.add_argument("--settings", type=json_object, default={}, help="JSON settings")
    parser.add_argument("--cache-dir", type=input_dir, help="LLM response cache")
    parser.add_argument(
        "--reports", required=True, type=output_file, help="reports.parquet to write"
    )
    parser.add_argument("--pii", required=True, type=output_file)
    parser.add_argument("--no-pii", required=True, type=output_file)
    parser.add_argument("--removals", required=True, type=output_file)
    parser.add_argument("--summary", required=True, type=output_file)
    add_runtime_arguments(parser, threads=False, device=False)


def run(args: argparse.Namespace) -> None:
    policy, rest = split_policy(args.settings, SECTION)
    settings = settings_from_mapping(VerbalizeSettings, rest, SECTION)
    spec = load_spec(args.spec)
    allowlist = load_allowlist(args.allowlist)
    rules = parse_rules(settings.rules, spec)
    prompt = load_report_prompt(args.prompt)
    subsample, rows_provenance = read_table(args.subsample, spec, ("sample",))
    synthesizer = rows_synthesizer(rows_provenance)
    rows: list[tuple[str, RuledRow]] = []
    for record in subsample.to_dict("records"):
        rng = record_rng(settings.seed, record["record_id"])
        rows.append((record["record_id"], apply_rules(record, rules, spec, rng)))
    validator = TemplateValidator(allowlist, IdentifierScanner())
    backend = guarded_backend(
        settings.backend,
        policy,
        args.subsample,
        rows_provenance,
        placeholders=allowlist.names,
        cache_dir=args.cache_dir,
        where=SECTION,
    )
    if backend is None:
        log.warning(
            "backend none: %d reports rendered by the seeded grammar, not by a language model",
            len(rows),
        )
        generator = GRAMMAR
        # the grammar draws from its own stream, apart from the rules' draws
        results: list[tuple[Verdict, ChatResponse | None]] = [
            (validator.check_placeholders(text, REPORT_VARIANT) or Verdict(text), None)
            for text in grammar_reports(rows, spec, settings.seed + 1)
        ]
    else:
        generator = f"llm:{backend.describe().get('model', backend.name)}"
        results = llm_verdicts(
            rows, spec, backend, prompt, validator, settings, not args.no_progress
        )
    table_rows = []
    templates = []
    for (record_id, row), (verdict, response) in zip(rows, results, strict=True):
        note_id = f"tabular-{record_id}"
        table_rows.append(
            {
                "record_id": record_id,
                "note_id": note_id,
                "generator": generator,
                "status": ACCEPTED if verdict.accepted else REJECTED,
                "reason": verdict.reason,
                "detail": verdict.detail or None,
                "values_json": json.dumps(row.values, sort_keys=True),
                "drawn_json": json.dumps(row.drawn, sort_keys=True),
                "rules_applied": list(row.applied),
                "template": verdict.template,
                "input_tokens": response.input_tokens if response else None,
                "output_tokens": response.output_tokens if response else None,
            }
        )
        if verdict.accepted and verdict.template is not None:
            templates.append(
                Template(note_id, record_id, record_id, REPORT_VARIANT.name, verdict.template)
            )
    source = f"synthetic:tabular:{generator}"
    filler = TemplateFiller(allowlist, seed=settings.fill_seed, forbidden=[])
    result = build_pools(
        templates,
        [],
        filler=filler,
        surfaces=SurfaceIndex([], min_chars=3),
        encoder=None,
        dedup=DedupSettings(against_seeds=False),
        source=source,
        progress=not args.no_progress,
    )
    params = {
        "settings": args.settings,
        "generator": generator,
        "synthesizer": synthesizer.name if synthesizer is not None else None,
        "source": source,
        "fill": filler.provenance(),
        "prompt": prompt.provenance(),
    }
    provenance = make_provenance(
        "verbalize-tabular",
        params,
        {"subsample": args.subsample, "spec": args.spec, "allowlist": args.allowlist},
    )
    write_parquet_atomic(
        pa.Table.from_pylist(table_rows, schema=REPORTS_SCHEMA), args.reports, provenance
    )
    accepted = sum(r["status"] == ACCEPTED for r in table_rows)
    write_pools(
        result,
        provenance,
        pii=args.pii,
        no_pii=args.no_pii,
        removals=args.removals,
        summary=args.summary,
        extra_counts={
            "rows": len(rows),
            "accepted": accepted,
            "rejected": len(rows) - accepted,
            "refused_by_guard": sum(r["reason"] == REFUSED_BY_GUARD for r in table_rows),
            "generator": generator,
            "language_model": backend is not None,
        },
    )
    if backend is not None:
        backend.close()
