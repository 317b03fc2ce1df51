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
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from synthdeid.artifacts import (
    atomic_text,
    make_provenance,
    read_parquet_with_provenance,
    require_columns,
    write_json_atomic,
    write_parquet_atomic,
)
from synthdeid.cli_types import input_dir, input_file, output_dir
from synthdeid.errors import InputError
from synthdeid.figures import PALETTE, pyplot, save_figure
from synthdeid.llm.base import ChatFailure, ChatRequest
from synthdeid.llm.guard import REFUSED_PREFIX
from synthdeid.reporting import NOT_AVAILABLE, markdown_table, number_or_na, percent, write_html
from synthdeid.runtime import add_runtime_arguments
from synthdeid.synthesis.templates import BACKEND_FAILURE, REFUSED_BY_GUARD
from synthdeid.synthesis.validator import ACCEPTED
from synthdeid.tabular.endpoint import endpoint_policy, guarded_backend
from synthdeid.tabular.faithfulness import (
    NOT_JUDGED,
    Agreement,
    JudgeFailure,
    VariableVerdict,
    agreement,
    bucket_shares,
    check_report,
    document_accuracy,
    faithful_pairs,
    judge_request_messages,
    load_judge_prompt,
    overall_accuracy,
    parse_judge_answer,
    per_variable_accuracy,
    status_counts,
)
from synthdeid.tabular.spec import TableSpec, load_spec
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
        type=json.loads,
        default={"kind": "none"},
        help="JSON LLM backend for an LLM judge; kind none: the rule-based checker",
    )
    parser.add_argument(
        "--judge-policy",
        type=json.loads,
        default={},
        help="JSON: where the judge may send the reports (trusted_hosts, allow_wide_networks, "
        "allow_non_dp_rows; default: this machine only)",
    )
    parser.add_argument("--judge-prompt", type=input_file, help="tabular_judge.yaml (LLM judge)")
    parser.add_argument("--cache-dir", type=input_dir, help="LLM response cache")
    parser.add_argument("--out-dir", required=True, type=output_dir)
    add_runtime_arguments(parser, threads=False, device=False)


def read_reports(path: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The accepted reports, each with its row, and the table's provenance."""
    table, provenance = read_parquet_with_provenance(path)
    needed = ["record_id", "note_id", "status", "template", "values_json"]
    require_columns(path, table.column_names, needed, "a reports table")
    accepted = [r for r in table.to_pylist() if r["status"] == ACCEPTED]
    for report in accepted:
        report["row"] = json.loads(report["values_json"])
    return accepted, provenance


def judge_verdicts(
    reports: list[dict[str, Any]],
    spec: TableSpec,
    backend: Any,
    prompt_path: Path | None,
    progress: bool,
) -> tuple[list[list[VariableVerdict]], Counter[str]]:
    """The LLM judge's verdicts; an unreadable answer leaves every pair ``not_judged``."""
    if prompt_path is None:
        raise InputError("--judge-prompt", None, "an LLM judge needs its prompt file")
    prompt = load_judge_prompt(prompt_path)
    requests = []
    for report in reports:
        system, user = judge_request_messages(report["template"], report["row"], spec, prompt)
        requests.append(ChatRequest.of(system, user, temperature=0.0))
    failures: Counter[str] = Counter()
    out = []
    for report, result in zip(
        reports, backend.complete_many(requests, progress=progress), strict=True
    ):
        row = report["row"]
        if isinstance(result, ChatFailure):
            refused = result.reason.startswith(REFUSED_PREFIX)
            reason = REFUSED_BY_GUARD if refused else BACKEND_FAILURE
            parsed: JudgeFailure | list[VariableVerdict] = JudgeFailure(reason, result.reason)
        else:
            parsed = parse_judge_answer(result.text, row, spec, report["template"])
        if isinstance(parsed, JudgeFailure):
            failures[parsed.reason] += 1
            parsed = [
                VariableVerdict(name, row[name], False, NOT_JUDGED, None) for name in spec.names
            ]
        out.append(parsed)
    return out, failures


def accuracy_table(
    per_variable: dict[str, float | None], overall: float | None, buckets: dict[str, float] | None
) -> str:
    """Accuracies over the judged pairs; n/a where nothing was judged."""
    accuracies = [[name, number_or_na(value, ".3f")] for name, value in per_variable.items()]
    accuracies.append(["**Overall**", f"**{number_or_na(overall, '.3f')}**"])
    shares = (
        [["(no document with a judged variable)", NOT_AVAILABLE]]
        if buckets is None
        else [[name, percent(share)] for name, share in buckets.items()]
    )
    lines = markdown_table(["Variable", "Accuracy"], accuracies)
    lines += ["", *markdown_table(["Document accuracy bucket", "Share of documents"], shares)]
    return "\n".join(lines) + "\n"


def uniform_finding(
    per_variable: dict[str, float | None], n_reports: int, checker: str
) -> str | None:
    """A plain sentence when every accuracy is 0, 1 or undefined (bars that show no contrast).

    Such a figure is not a finding about particular variables: the title says
    what it means (e.g. that the checker found no variable stated correctly in
    any of the reports), with n. None when the accuracies differ.
    """
    judged = [value for value in per_variable.values() if value is not None]
    if not judged:
        return f"n/a: the {checker} checker judged no variable in the {n_reports} reports"
    if all(value == 0 for value in judged):
        return (
            f"The {checker} checker found no variable stated correctly in any of the "
            f"{n_reports} reports"
        )
    if all(value == 1 for value in judged):
        return (
            f"The {checker} checker found every variable stated correctly in all "
            f"{n_reports} reports"
        )
    return None


def accuracy_figure(
    per_variable: dict[str, float | None],
    buckets: dict[str, float] | None,
    path: Path,
    *,
    n_reports: int,
    checker: str,
) -> Any:
    """Per-variable accuracy (n/a written where none was judged) and the document buckets.

    Every bar carries its value, so a 0 is seen as 0, not as a missing bar;
    when every accuracy is 0, 1 or undefined the figure says so in its title
    (:func:`uniform_finding`). Returns the (closed) figure.
    """
    plt = pyplot()
    figure, axes = plt.subplots(1, 2, figsize=(11, 4.6), gridspec_kw={"width_ratios": [3, 2]})
    names = list(per_variable)
    positions = np.arange(len(names))
    values = [per_variable[n] for n in names]
    axes[0].barh(positions, [v if v is not None else 0.0 for v in values], color=PALETTE["blue"])
    for y, value in zip(positions, values, strict=True):
        text = NOT_AVAILABLE if value is None else f"{value:.2f}"
        shown = 0.0 if value is None else value
        inside = shown > 0.85
        axes[0].text(
            shown - 0.01 if inside else shown + 0.01,
            y,
            text,
            va="center",
            ha="right" if inside else "left",
            fontsize=7,
            color="white" if inside else PALETTE["black"],
        )
    axes[0].set_yticks(positions, names, fontsize=8)
    axes[0].invert_yaxis()
    axes[0].set_xlim(0, 1)
    axes[0].set_xlabel("share of judged reports stating the variable correctly (0 to 1)")
    axes[0].set_ylabel("variable")
    axes[0].set_title(f"Per-variable accuracy (n = {n_reports} reports)", fontsize=10)
    if buckets is None:
        axes[1].text(0.5, 0.5, f"{NOT_AVAILABLE}: no report judged", ha="center", va="center")
        axes[1].set_xticks([])
    else:
        bars = axes[1].bar(
            list(buckets), [100 * v for v in buckets.values()], color=PALETTE["green"]
        )
        axes[1].bar_label(bars, labels=[f"{100 * v:.0f}%" for v in buckets.values()], fontsize=7)
        axes[1].set_ylim(0, 110)
        axes[1].tick_params(axis="x", rotation=30)
    axes[1].set_xlabel("share of a report's variables stated correctly")
    axes[1].set_ylabel("% of documents")
    axes[1].set_title(f"Document-level accuracy (n = {n_reports} reports)", fontsize=10)
    finding = uniform_finding(per_variable, n_reports, checker)
    if finding is not None:
        figure.suptitle(textwrap.fill(finding, width=100, break_on_hyphens=False), fontsize=10)
    figure.tight_layout()
    save_figure(figure, path)
    return figure


def agreement_line(found: Agreement) -> str:
    """The judge's agreement with the rule checker, n/a where it is undefined."""
    observed = number_or_na(found.observed, ".3f")
    kappa = number_or_na(found.kappa, ".3f")
    return (
        f"Agreement with the rule checker over {found.pairs} judged pairs: "
        f"{observed} (Cohen's kappa {kappa})."
    )


def stage_provenance(args: argparse.Namespace, checker: str | None) -> dict[str, Any]:
    return make_provenance(
        "check-faithfulness",
        {
            "checker": checker,
            "judge_backend": args.judge_backend,
            "judge_policy": args.judge_policy,
        },
        {"reports": args.reports, "spec": args.spec},
    )


def write_nothing_to_check(args: argparse.Namespace) -> None:
    """No accepted report (a model that wrote none): every output says so, with n/a."""
    provenance = stage_provenance(args, None)
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
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(6, 2))
    axis.axis("off")
    axis.text(0.5, 0.5, message, ha="center", va="center")
    save_figure(figure, out / "faithfulness.png")
    write_parquet_atomic(PAIRS_SCHEMA.empty_table(), out / "pairs.parquet", provenance)
    log.warning("faithfulness: %s (%s)", message, args.reports)


def run(args: argparse.Namespace) -> None:
    spec = load_spec(args.spec)
    policy = endpoint_policy(args.judge_policy, SECTION)
    reports, reports_provenance = read_reports(args.reports)
    if not reports:
        write_nothing_to_check(args)
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
    provenance = stage_provenance(args, checker)
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
