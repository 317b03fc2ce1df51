"""Generate templates from masked seeds with an LLM backend (or none), validated.

Reads the mask step's masked notes and removed values (refused when the removed
values were not written with these masked notes, before anything else: the
guard would search another run's surfaces), builds one request per
seed x variant x copy from the prompt file, sends it through the guarded
backend and validates every answer. Writes the templates table (every
attempt, with its status and reason), a summary with the acceptance rate,
the guard's refusals and token counts, and, local-only, every request that
went to the backend (the audit trail of what left the step: masked text, but
text of real notes, so it stays on the machine).

``--shard K/N`` runs only the K-th of N row ranges of the planned jobs (seed x
variant x copy in plan order; one job per seed for backend ``none``), each one
row of the templates table, and writes every output as a shard artifact
(:mod:`synthdeid.shards`) for ``gather-shards`` to join: ``--out``,
``--summary`` and ``--sent-requests`` are written where given (the workflow
gives the shard paths; the default sent-requests path is the shard path of
the unsharded one). Each shard still reads every seed: the validator's
vocabulary, the guard's PHI surfaces and the stand-in placeholder mix are the
whole run's, so its rows are those one job writes for its jobs. Shard jobs may
share ``--cache-dir``: each answer is its own file, written atomically.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from synthdeid.artifacts import write_json_atomic, write_parquet_atomic
from synthdeid.cli_types import input_dir, input_file, json_object, output_file
from synthdeid.local_only import LOCAL_ONLY_METADATA, require_local_path
from synthdeid.runtime import add_runtime_arguments
from synthdeid.shards import shard_argument, shard_metadata, with_shard
from synthdeid.synthesis.template_generation import (
    TemplateInputs,
    generate_templates,
    sent_requests_path,
)
from synthdeid.synthesis.templates import records_to_table, sent_requests_table

log = logging.getLogger(__name__)


def register_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--masked", required=True, type=input_file, help="mask step's masked.parquet"
    )
    parser.add_argument(
        "--removed", required=True, type=input_file, help="mask step's removed_values.parquet"
    )
    parser.add_argument("--allowlist", required=True, type=input_file, help="placeholders.yaml")
    parser.add_argument("--prompt", required=True, type=input_file, help="prompt file (YAML)")
    parser.add_argument(
        "--settings",
        required=True,
        type=json_object,
        help="JSON: backend, variants, generation, seed, validator, guard (config synth.template)",
    )
    parser.add_argument(
        "--cache-dir", type=input_dir, default=None, help="response cache (reruns send nothing)"
    )
    parser.add_argument("--out", required=True, type=output_file, help="templates.parquet to write")
    parser.add_argument("--summary", required=True, type=output_file, help="summary.json to write")
    parser.add_argument(
        "--sent-requests",
        type=output_file,
        default=None,
        help="local-only Parquet of every request sent, in a local/ folder "
        "(default: local/ beside --out)",
    )
    add_runtime_arguments(parser, threads=False, device=False)
    parser.add_argument(
        "--shard",
        type=shard_argument,
        default=None,
        help="K/N: run only the K-th of N row ranges of the planned requests "
        "(seed x variant x copy), for gather-shards to join",
    )


def _sent_requests_path(args: argparse.Namespace) -> Path:
    """``--sent-requests``, by default :func:`sent_requests_path` of ``--out``."""
    if args.sent_requests is not None:
        return Path(args.sent_requests)
    return sent_requests_path(Path(args.out), args.shard)


def run(args: argparse.Namespace) -> None:
    if args.sent_requests is not None:
        require_local_path(args.sent_requests, "--sent-requests", "the masked text of real notes")
    inputs = TemplateInputs(args.masked, args.removed, args.allowlist, args.prompt)
    report, provenance, planned = generate_templates(
        args.settings,
        inputs,
        cache_dir=args.cache_dir,
        shard=args.shard,
        progress=not args.no_progress,
    )
    metadata = shard_metadata(args.shard, planned)
    write_parquet_atomic(records_to_table(report.records), args.out, provenance, metadata=metadata)
    sent = sent_requests_table(report.records)
    sent = sent.replace_schema_metadata({**(sent.schema.metadata or {}), **LOCAL_ONLY_METADATA})
    write_parquet_atomic(sent, _sent_requests_path(args), provenance, metadata=metadata)
    summary = report.summary()
    body = {"summary": summary, "provenance": provenance}
    write_json_atomic(with_shard(body, args.shard, planned), args.summary)
    log.info(
        "templates: %d requested, %d accepted (%.1f%%); rejections %s",
        summary["requested"],
        summary["accepted"],
        100 * (summary["acceptance_rate"] or 0.0),
        summary["rejections"] or "none",
    )
