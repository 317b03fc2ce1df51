"""Score how faithfully each report states its row (Lorenzo et al. 2026, Tables 2 and 3); keep the faithful pairs.

The checker is rule-based by default (built from the variable spec) or an
LLM judge (``--judge-backend``, any backend of :mod:`synthdeid.llm`; Lorenzo et al. 2026
use one), within the endpoint policy of :mod:`synthdeid.tabular.endpoint`
(``--judge-policy``: trusted hosts; reports of a non-DP synthesizer's rows, as
their provenance records it, stay on this machine unless ``allow_non_dp_rows``;
the request guard). Per variable: the share of reports stating the row's value;
per document: the Table 3 buckets. The row/report pairs are written with
the unfaithful variables dropped (Lorenzo et al. 2026, section 4), for information
extraction training. With an LLM judge, the rule checker runs too and the
summary gives their agreement pair by pair (Cohen's kappa). No accepted
report (a model that wrote none) gives outputs that say so, every accuracy
n/a, rather than a failed step. Writes faithfulness.json / .csv / .md, the same
table as faithfulness.html (shown inline by the Snakemake report), the figure
faithfulness.png (which says in its title when every accuracy is 0, 1 or n/a)
and pairs.parquet.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import logging
from collections import Counter
from pathlib import Path
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
from synthdeid.cli_types import input_dir, input_file, json_object, output_dir
from synthdeid.reporting import NOT_AVAILABLE, number_or_na, percent, write_html
from synthdeid.runtime import add_runtime_arguments
from synthdeid.synthesis.validator import ACCEPTED
from synthdeid.tabular.endpoint import endpoint_policy, guarded_backend
from synthdeid.tabular.faithfulness import (
    Agreement,
    agreement,
    bucket_shares,
    check_report,
    document_accuracy,
    faithful_pairs,
    overall_accuracy,
    per_variable_accuracy,
    status_counts,
)
from synthdeid.tabular.faithfulness_report import (
    accuracy_figure,
    accuracy_table,
    agreement_line,
    message_figure,
    uniform_finding,
)
from synthdeid.tabular.llm_judge import judge_verdicts
from synthdeid.tabular.spec import load_spec
from synthdeid.tabular.verbalize import REPORT_PLACEHOLDERS

log = logging.getLogger(__name__)

SECTION = "synth.tabular.faithfulness"
FAITHFULNESS_TITLE = "Faithfulness of the verbalized reports"

PAIRS_SCHEMA = pa.schema(
    [
        pa.field("record_id", pa.string(), nullable=False),
        pa.field("note_id", pa.string(), nullable=False),
        pa.field("report", pa.string(), nullable=False),
        pa.field("kept_json", pa.string(), nullable=False),
        pa.field("dropped", pa.list_(pa.string()), nullable=False),
        # None when the judge answered for none of the report's variables
        pa.field("document_accuracy", pa.float64(), nullable=True),
    ]
)


def register_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--reports", required=True, type=input_file, help="reports.parquet")
    parser.add_argument("--spec", required=True, type=input_file, help="variable spec (YAML)")
    parser.add_argument(
        "--judge-backend",
        type=json_object,
        default={"kind": "none"},
        help="JSON LLM backend for an LLM judge; kind none: the rule-based checker",
    )
    parser.add_argument(
        "--judge-policy",
        type=json_object,
        default={},
        help="JSON: where the judge may send the reports (trusted_hosts, allow_wide_networks, "
        "allow_non_dp_rows; default: this machine only)",
    )
    parser.add_argument("--judge-prompt", type=input_file, help="tabular_judge.yaml (LLM judge)")
    parser.add_argument("--cache-dir", type=input_dir, help="LLM response cache")
    parser.add_argument("--out-dir", required=True, type=output_dir)
    add_runtime_arguments(parser, threads=False, device=False)


def _read_reports(path: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The accepted reports, each with its row, and the table's provenance."""
    table, provenance = read_parquet_with_provenance(path)
    needed = ["record_id", "note_id", "status", "template", "values_json"]
    require_columns(path, table.column_names, needed, "a reports table")
    accepted = [r for r in table.to_pylist() if r["status"] == ACCEPTED]
    for report in accepted:
        report["row"] = json.loads(report["values_json"])
    return accepted, provenance


def _stage_provenance(args: argparse.Namespace, checker: str | None) -> dict[str, Any]:
    return make_provenance(
        "check-faithfulness",
        {
            "checker": checker,
            "judge_backend": args.judge_backend,
            "judge_policy": args.judge_policy,
        },
        {"reports": args.reports, "spec": args.spec},
    )


def _write_nothing_to_check(args: argparse.Namespace) -> None:
    """No accepted report (a model that wrote none): every output says so, with n/a."""
    provenance = _stage_provenance(args, None)
    out = args.out_dir
    summary = {
        "checker": None,
        "reports": 0,
        "per_variable_accuracy": None,
        "overall_accuracy": None,
        "document_buckets": None,
        "agreement_with_rules": None,
        "provenance": provenance,
    }
    write_json_atomic(summary, out / "faithfulness.json")
    message = "No accepted report to check (n = 0): every accuracy is n/a."
    with atomic_text(out / "faithfulness.md") as handle:
        handle.write(message + "\n")
    write_html(message + "\n", FAITHFULNESS_TITLE, out / "faithfulness.html")
    with atomic_text(out / "faithfulness.csv") as handle:
        handle.write("variable,accuracy\n")
    message_figure(message, out / "faithfulness.png")
    write_parquet_atomic(PAIRS_SCHEMA.empty_table(), out / "pairs.parquet", provenance)
    log.warning("faithfulness: %s (%s)", message, args.reports)


def run(args: argparse.Namespace) -> None:
    spec = load_spec(args.spec)
    policy = endpoint_policy(args.judge_policy, SECTION)
    reports, reports_provenance = _read_reports(args.reports)
    if not reports:
        _write_nothing_to_check(args)
        return
    backend = guarded_backend(
        args.judge_backend,
        policy,
        args.reports,
        reports_provenance,
        placeholders=REPORT_PLACEHOLDERS,
        cache_dir=args.cache_dir,
        where=SECTION,
        backend_key="judge",
    )
    failures: Counter[str] = Counter()
    rules = [check_report(r["template"], r["row"], spec) for r in reports]
    with_rules: Agreement | None = None
    if backend is None:
        checker = "rules"
        verdicts = rules
    else:
        checker = f"llm:{backend.describe().get('model', backend.name)}"
        verdicts, failures = judge_verdicts(
            reports, spec, backend, args.judge_prompt, not args.no_progress
        )
        backend.close()
        with_rules = agreement(verdicts, rules)
    by_report = {r["record_id"]: v for r, v in zip(reports, verdicts, strict=True)}
    per_variable = per_variable_accuracy(by_report)
    per_variable = {name: per_variable[name] for name in spec.names}
    overall = overall_accuracy(per_variable)
    buckets = bucket_shares(by_report)
    pairs = faithful_pairs(by_report)
    rows = [
        {
            "record_id": r["record_id"],
            "note_id": r["note_id"],
            "report": r["template"],
            "kept_json": json.dumps(dict(pairs[r["record_id"]].kept), sort_keys=True),
            "dropped": list(pairs[r["record_id"]].dropped),
            "document_accuracy": document_accuracy(vs),
        }
        for r, vs in zip(reports, verdicts, strict=True)
    ]
    generators = sorted({r.get("generator", "") for r in reports})
    provenance = _stage_provenance(args, checker)
    out = args.out_dir
    summary = {
        "checker": checker,
        "generators": generators,
        "reports": len(reports),
        "per_variable_accuracy": per_variable,
        "overall_accuracy": overall,
        "document_buckets": buckets,
        "statuses": status_counts(by_report),
        "judge_failures": dict(failures),
        "pairs_kept": sum(len(p.kept) for p in pairs.values()),
        "pairs_dropped": sum(len(p.dropped) for p in pairs.values()),
        # an LLM judge against the rule checker, pair by pair (None for the rules)
        "agreement_with_rules": with_rules.as_dict() if with_rules is not None else None,
        "provenance": provenance,
    }
    write_json_atomic(summary, out / "faithfulness.json")
    note = (
        " (reports by the seeded grammar: backend none, no language model)"
        if "grammar" in generators
        else ""
    )
    markdown = f"Checker: {checker}; {len(reports)} reports{note}.\n\n"
    finding = uniform_finding(per_variable, len(reports), checker)
    if finding is not None:
        markdown += f"{finding}.\n\n"
    markdown += accuracy_table(per_variable, overall, buckets)
    if with_rules is not None:
        markdown += f"\n{agreement_line(with_rules)}\n"
    with atomic_text(out / "faithfulness.md") as handle:
        handle.write(markdown)
    write_html(markdown, FAITHFULNESS_TITLE, out / "faithfulness.html")
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["variable", "accuracy"])
    writer.writerows(per_variable.items())
    with atomic_text(out / "faithfulness.csv") as handle:
        handle.write(buffer.getvalue())
    accuracy_figure(
        per_variable, buckets, out / "faithfulness.png", n_reports=len(reports), checker=checker
    )
    write_parquet_atomic(
        pa.Table.from_pylist(rows, schema=PAIRS_SCHEMA), out / "pairs.parquet", provenance
    )
    log.info(
        "faithfulness (%s): overall %s over %d reports; perfect %s",
        checker,
        number_or_na(overall, ".3f"),
        len(reports),
        NOT_AVAILABLE if buckets is None else percent(buckets["Perfect"]),
    )
