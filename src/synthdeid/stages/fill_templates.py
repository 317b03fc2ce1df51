"""Fill accepted templates locally and write the PII / no-PII synthetic pools.

Reads the templates table, the seed notes (the split table; their real text
is only compared with, never written) and the mask step's removed values;
fills, deduplicates, screens (see :mod:`synthdeid.synthesis.pools`) and
writes ``pii.parquet``, ``no_pii.parquet`` (canonical notes schema),
``removals.parquet`` (what was dropped at which step and why) and a summary.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

from synthdeid.artifacts import (
    make_provenance,
    read_parquet_with_provenance,
    require_columns,
)
from synthdeid.cli_types import input_file, json_object, output_file
from synthdeid.errors import InputError
from synthdeid.notes import read_notes
from synthdeid.runtime import add_runtime_arguments
from synthdeid.synthesis.placeholders import load_allowlist
from synthdeid.synthesis.pools import (
    Template,
    check_pool_settings,
    pools_from_templates,
    write_pools,
)
from synthdeid.synthesis.templates import TEMPLATES_SCHEMA
from synthdeid.synthesis.validator import ACCEPTED

log = logging.getLogger(__name__)


def register_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--templates", required=True, type=input_file, help="templates.parquet")
    parser.add_argument("--notes", required=True, type=input_file, help="split notes.parquet")
    parser.add_argument("--seed-parts", nargs="+", default=["seed"], help="parts holding seeds")
    parser.add_argument(
        "--removed", required=True, type=input_file, help="mask step's removed_values.parquet"
    )
    parser.add_argument("--allowlist", required=True, type=input_file, help="placeholders.yaml")
    parser.add_argument(
        "--settings",
        required=True,
        type=json_object,
        help="JSON: fill_seed, near_threshold, against_seeds, encoder (null = bundled MiniLM, "
        "false = no near dedup), min_surface_chars",
    )
    parser.add_argument("--pii", required=True, type=output_file, help="PII pool to write")
    parser.add_argument("--no-pii", required=True, type=output_file, help="no-PII pool to write")
    parser.add_argument(
        "--removals", required=True, type=output_file, help="removals table to write"
    )
    parser.add_argument("--summary", required=True, type=output_file, help="summary.json to write")
    add_runtime_arguments(parser, threads=False, device=False)


def _read_accepted_templates(path: Path) -> tuple[list[Template], dict[str, Any]]:
    table, provenance = read_parquet_with_provenance(path)
    require_columns(path, table.column_names, TEMPLATES_SCHEMA.names, "a templates table")
    templates = []
    for i, row in enumerate(table.to_pylist()):
        if row["status"] != ACCEPTED:
            continue
        if not row["template"]:
            raise InputError(path, f"row {i} ({row['template_id']})", "accepted without a template")
        templates.append(
            Template(
                row["template_id"],
                row["seed_note_id"],
                row["patient_id"],
                row["variant"],
                row["template"],
            )
        )
    return templates, provenance


def run(args: argparse.Namespace) -> None:
    settings = args.settings
    check_pool_settings(settings)
    allowlist = load_allowlist(args.allowlist)
    templates, template_provenance = _read_accepted_templates(args.templates)
    seeds = [n for n in read_notes(args.notes) if n.split in set(args.seed_parts)]
    backend = template_provenance.get("params", {}).get("settings", {}).get("backend", {})
    source = f"synthetic:template:{backend.get('kind', 'none')}"
    result, filler = pools_from_templates(
        templates,
        seeds,
        allowlist=allowlist,
        removed=args.removed,
        settings=settings,
        source=source,
        progress=not args.no_progress,
    )
    provenance = make_provenance(
        "fill-templates",
        {
            "settings": settings,
            "seed_parts": args.seed_parts,
            "source": source,
            "fill": filler.provenance(),
            "templates": template_provenance.get("params", {}),
        },
        {
            "templates": args.templates,
            "notes": args.notes,
            "removed": args.removed,
            "allowlist": args.allowlist,
        },
    )
    write_pools(
        result,
        provenance,
        pii=args.pii,
        no_pii=args.no_pii,
        removals=args.removals,
        summary=args.summary,
        extra_counts={"seeds_compared": len(seeds)},
    )
