"""Measure one language model on each of the pipeline's LLM tasks, on development data only.

    python bench/llm_tasks.py --model-name smollm2 \
        --backend '{"kind": "transformers", "model": "bundled:smollm2"}' \
        --notes results/split_notes/physionet/notes.parquet \
        --masked results/mask_seeds/physionet/masked.parquet \
        --removed results/mask_seeds/physionet/local/removed_values.parquet \
        --rows results/prepare_tabular/breast_cancer/prepared.parquet \
        --teacher-size 20 --template-size 20 --verbalize-size 20 --seed 0 \
        --out results/measure_llm_tasks/physionet/smollm2 --table docs/results/llm-tasks.md

``--backend`` is any backend the config accepts (``transformers``, or
``openai`` with the ``base_url`` of a llama.cpp or hospital server, whose host
must be on ``--trusted-hosts``). Each task runs the pipeline's own stages, in
this process, as the rules call them, on a seeded random subset of its size
(``--seed``; a size of 0 skips the task), with no answer cache, so every
request is generated and timed:

teacher
    ``label-teacher`` (kind ``llm``, the default extraction prompt) on
    ``--teacher-size`` notes of the *seed* part of ``--notes`` (never the
    holdout), chosen as ``generate-templates`` chooses seeds; ``evaluate-ner``
    scores its labels against the notes' gold (span overlap with the label,
    per label and over all labels, 95% bootstrap intervals). The invalid-JSON
    rate is the share of notes whose status in the teacher's
    ``metadata.parquet`` is ``invalid_json`` (an answer that is not a JSON
    object). The sampled notes and the teacher's labels hold real notes'
    PHI: they stay under ``<out>/local/``.
templates
    ``generate-templates`` on ``--template-size`` masked seeds (variant
    ``standard``, one rewrite each), once with ``constrain: placeholders``
    and once with ``constrain: free``, the same seeds: the accepted share of
    the requests sent (the guard's refusals are never sent) with its Wilson
    95% interval and the rejections by reason, from the templates table's
    status and reason columns (:func:`llm_template_matrix.outcomes`). The
    accepted templates are filled (``fill-templates``: deduplicated against
    the seeds, screened for seed PHI, no near-duplicate encoder) and the
    pool (each template with placeholders filled ``--fills`` times, as
    ``pools.fills_per_template``) is compared with the real train part by
    ``diagnose-synthetic``
    without embeddings (unigram JSD, words per note; the Frechet distance
    needs the encoder and is left out); n/a when nothing was accepted.
verbalizer
    ``verbalize-tabular`` on ``--verbalize-size`` rows of ``--rows`` (a
    prepared table's train rows, or a synthesizer's samples), then
    ``check-faithfulness`` with the rule checker (``{"kind": "none"}``): per
    variable and overall, the share of the accepted reports stating the
    row's value (the step's accuracy), and of the values a report states at
    all, the share stated correctly.
judge
    ``check-faithfulness`` with the model as judge on the same reports:
    Cohen's kappa of its verdicts against the rule checker's (the step's
    ``agreement_with_rules``), over its usable verdicts: the pairs it
    answered for (an answer that is not JSON, or that leaves a variable out,
    judges none; a verdict other than yes or no counts as no, as the step
    scores it), and their share of all pairs.
speed
    Output tokens per second of the steps that record tokens (teacher,
    templates, verbalizer; the judge's are not recorded), and seconds per
    request sent for every task (the stage's whole run: a local model is
    loaded by each stage); the CPU (``/proc/cpuinfo``) and the threads.

Writes ``<out>/tasks.json`` (every figure with its n, the backend and its
``describe()``, the date, the commit, the command line) and, with
``--table``, adds or replaces the model's row of that Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from llm_teacher_sample import label_sample, score_sample, write_sample
from llm_template_matrix import ALLOWLIST, generate, outcomes

from synthdeid.artifacts import make_provenance, write_json_atomic
from synthdeid.cli import run_stage
from synthdeid.cli_types import non_negative_int, positive_int
from synthdeid.llm.factory import build_backend
from synthdeid.llm.trusted_hosts import LOOPBACK
from synthdeid.local_only import LOCAL_DIR
from synthdeid.notes import read_notes
from synthdeid.reporting import NOT_AVAILABLE, markdown_row, markdown_table, number_or_na, percent
from synthdeid.runtime import set_threads
from synthdeid.synthesis.template_generation import sample_ids
from synthdeid.synthesis.templates import REFUSED_BY_GUARD
from synthdeid.synthesis.validator import ACCEPTED
from synthdeid.tabular.faithfulness import CORRECT, NOT_JUDGED, NOT_MENTIONED, STATUSES, WRONG
from synthdeid.tabular.spec import load_spec
from synthdeid.tabular.synthesizers import rows_synthesizer
from synthdeid.tabular.tables import HOLDOUT, read_table, write_table
from synthdeid.teacher.outputs import METADATA
from synthdeid.teacher.teachers import INVALID_JSON

REPO = Path(__file__).resolve().parents[1]
SEED_PART = "seed"
TRAIN_PART = "train"
CONSTRAINTS = ("placeholders", "free")
TEACHER = "llm"
SPEC = "resources/tabular/breast_cancer.yaml"
TEMPLATE_PROMPT = "resources/prompts/template_rewrite.yaml"
REPORT_PROMPT = "resources/prompts/tabular_report.yaml"
JUDGE_PROMPT = "resources/prompts/tabular_judge.yaml"
MODEL_NAME = re.compile(r"[\w.+-]+")

TITLE = "# Each language model on every LLM task"
COLUMNS = (
    "model",
    "teacher recall / precision [n]",
    "invalid JSON",
    "templates accepted placeholders / free [n, 95% CI]",
    "PII pool notes placeholders / free [fills]",
    "verbalizer faithful share [n]",
    "judge kappa [n usable]",
    "tokens/s",
    "s per item",
)
PARAGRAPH = """\
Written by `bench/llm_tasks.py` (docs/stages/llm.md, "Measuring a model on
every task"): one row per model, replaced when the model is measured again.
Everything is on development data, never on the holdout. The teacher labels
a seeded random subset of the *seed* part of the split notes (never the
holdout) and is scored against their gold spans by `evaluate-ner` (span
overlap with the same label, all labels). Templates are rewritten from masked
seed notes (variant `standard`, once each, with `constrain: placeholders`
and with `constrain: free` on the same seeds); n is the requests sent, the
interval Wilson's 95%; the PII pool counts the distinct notes with PHI after
each accepted template is filled (the fills per template in brackets), deduplicated
and screened for seed PHI. The verbalizer writes reports from rows of the table
given (its train rows, or synthetic samples); their faithful share is the
rule checker's overall accuracy over n accepted reports. The judge's kappa is
Cohen's, against the rule checker, over the n pairs it answered for. Tokens/s
counts the output tokens of the teacher, templates and verbalizer; s per
item is seconds per request sent (teacher, templates placeholders / free,
verbalizer, judge). n/a: undefined (an empty denominator, or a task not
run), never 0. Every figure with its n and interval is in the model's
`tasks.json`.

Subset sizes (each a seeded random subset):
"""


# ---------------------------------------------------------------- helpers


def timed(*argv: str) -> float:
    """Seconds a stage took, run in this process (:func:`synthdeid.cli.run_stage`)."""
    started = time.monotonic()
    run_stage(*argv)
    return time.monotonic() - started


def per(value: float | None, count: int) -> float | None:
    """``value / count``; None when either is undefined or the count is 0."""
    return value / count if value is not None and count else None


def rate(tokens: int | None, seconds: float) -> float | None:
    """Output tokens per second; None when no token was recorded."""
    return tokens / seconds if tokens is not None and seconds > 0 else None


def tokens_sum(values: Sequence[int | None]) -> int | None:
    """The recorded output tokens; None when no request recorded any."""
    recorded = [v for v in values if v is not None]
    return sum(recorded) if recorded else None


def skipped() -> dict[str, Any]:
    """A task of size 0: not run, every figure undefined."""
    return {"run": False, "n": 0, "seconds": None, "seconds_per_item": None}


def need(path: Path | None, flag: str, task: str) -> Path:
    if path is None:
        raise SystemExit(f"{flag} is needed for the {task} task (or give it size 0)")
    return path


# ---------------------------------------------------------------- tasks


def teacher_task(args: argparse.Namespace) -> dict[str, Any]:
    """label-teacher on seed-part notes, scored by evaluate-ner (see the module docstring)."""
    if args.teacher_size == 0:
        return skipped()
    local = args.out / LOCAL_DIR / "teacher"
    notes = local / "notes.parquet"
    n, part_notes = write_sample(
        need(args.notes, "--notes", "teacher"), SEED_PART, args.teacher_size, args.seed, notes
    )
    settings: dict[str, Any] = {
        "kind": "llm",
        "backend": args.backend,
        "trusted_hosts": args.trusted_hosts,
    }
    if args.teacher_max_tokens is not None:
        settings["generation"] = {"max_tokens": args.teacher_max_tokens}
    if args.teacher_prompt is not None:
        settings["prompt"] = str(args.teacher_prompt)
    started = time.monotonic()
    labels = label_sample(
        notes, SEED_PART, TEACHER, settings, local / "labels", threads=args.threads
    )
    seconds = time.monotonic() - started
    run = f"teacher:{args.model_name}"
    metrics_path = score_sample(notes, labels, SEED_PART, run, args.out / "teacher" / "evaluation")
    metrics = json.loads(metrics_path.read_text())
    metadata = pq.read_table(local / "labels" / METADATA, columns=["status", "output_tokens"])
    statuses = Counter(metadata.column("status").to_pylist())
    output_tokens = tokens_sum(metadata.column("output_tokens").to_pylist())
    headline = metrics["headline"]
    return {
        "run": True,
        "n": n,
        "part": SEED_PART,
        "part_notes": part_notes,
        "recall": headline["span_overlap_recall"],
        "precision": headline["span_overlap_precision"],
        "per_label": {
            label: {
                "recall": entry["overlap_recall"]["estimate"],
                "precision": entry["overlap_precision"]["estimate"],
                "support": entry["support"],
                "predicted": entry["n_predicted"],
            }
            for label, entry in metrics["per_label"].items()
        },
        "gold_spans": metrics["counts"]["n_gold_spans"],
        "predicted_spans": metrics["counts"]["n_predicted_spans"],
        "invalid_json": {"count": statuses[INVALID_JSON], "share": statuses[INVALID_JSON] / n},
        "notes_by_status": dict(sorted(statuses.items())),
        "output_tokens": output_tokens,
        "seconds": seconds,
        "seconds_per_item": seconds / n,
        "tokens_per_second": rate(output_tokens, seconds),
        "metrics": str(metrics_path),
    }


def pool_diagnostics(args: argparse.Namespace, templates: Path, out: Path) -> dict[str, Any]:
    """fill-templates on the accepted templates, then diagnose-synthetic (no embeddings)
    of the pool against the real train notes."""
    pools = out / "pools"
    notes = need(args.notes, "--notes", "templates")
    settings = {
        "fill_seed": args.seed,
        "encoder": False,
        "against_seeds": True,
        "fills_per_template": args.fills,
    }
    run_stage(
        "fill-templates", "--templates", str(templates), "--notes", str(notes),
        "--seed-parts", SEED_PART, "--removed", str(args.removed),
        "--allowlist", str(args.allowlist), "--settings", json.dumps(settings),
        "--pii", str(pools / "pii.parquet"), "--no-pii", str(pools / "no_pii.parquet"),
        "--removals", str(pools / "removals.parquet"), "--summary", str(pools / "summary.json"),
        "--no-progress",
    )  # fmt: skip
    counts = json.loads((pools / "summary.json").read_text())["summary"]
    found: dict[str, Any] = {
        "fills_per_template": args.fills,
        "pii_notes": counts["pii_notes"],
        "no_pii_notes": counts["no_pii_notes"],
        "removed": counts["removed"],
        "diagnostics": None,
    }
    has_train = any(note.split == TRAIN_PART for note in read_notes(notes))
    if not counts["pii_notes"] + counts["no_pii_notes"] or not has_train:
        found["diagnostics_not_run"] = "an empty pool" if has_train else "no real train notes"
        return found
    run_stage(
        "diagnose-synthetic", "--subset", f"real train={notes}:{TRAIN_PART}",
        "--subset", f"synthetic={pools / 'pii.parquet'}",
        "--subset", f"synthetic={pools / 'no_pii.parquet'}",
        "--reference", "real train", "--no-embeddings", "--out-dir", str(pools / "diagnostics"),
    )  # fmt: skip
    diagnostics = json.loads((pools / "diagnostics" / "diagnostics.json").read_text())
    found["diagnostics"] = {
        "reference": "real train",
        "unigram_jsd": diagnostics["divergences"]["synthetic"]["unigram_jsd"],
        "words_median": diagnostics["statistics"]["synthetic"]["words"]["median"],
        "reference_words_median": diagnostics["statistics"]["real train"]["words"]["median"],
        "frechet_distance": None,
    }
    return found


def templates_task(args: argparse.Namespace, constrain: str) -> dict[str, Any]:
    """generate-templates with one decoding constraint, then the pool of what it accepted."""
    if args.template_size == 0:
        return skipped()
    out = args.out / "templates" / constrain
    settings = {
        "backend": args.backend,
        "variants": {"standard": 1},
        "seed_sample": {"size": args.template_size, "seed": args.seed},
        "seed": args.seed,
        "generation": {"constrain": constrain},
    }
    seconds = generate(
        need(args.masked, "--masked", "templates"),
        need(args.removed, "--removed", "templates"),
        args.template_prompt,
        settings,
        out,
        args.allowlist,
    )
    found = outcomes(out / "templates.parquet")
    found |= {
        "run": True,
        "n": found["sent"],
        "seeds": found["requested"],
        "seconds": seconds,
        "seconds_per_item": per(seconds, found["sent"]),
        "tokens_per_second": rate(found["output_tokens"], seconds),
        "pool": (
            pool_diagnostics(args, out / "templates.parquet", out) if found["accepted"] else None
        ),
    }
    return found


def rows_subset(args: argparse.Namespace, path: Path) -> int:
    """A random ``--verbalize-size`` of the rows (none of a prepared table's holdout),
    written as a subsample the verbalizer reads; their number."""
    rows = need(args.rows, "--rows", "verbalizer")
    spec = load_spec(args.spec)
    frame, provenance = read_table(rows, spec)
    if "split" in frame.columns:
        frame = frame[frame["split"] != HOLDOUT]
    if "sample" not in frame.columns:
        frame = frame.assign(sample=0)
    chosen = sample_ids(frame["record_id"].astype(str), args.verbalize_size, args.seed)
    frame = frame[frame["record_id"].isin(chosen)].reset_index(drop=True)
    synthesizer = rows_synthesizer(provenance)
    params = {
        "size": args.verbalize_size,
        "seed": args.seed,
        "synthesizer": synthesizer.name if synthesizer is not None else None,
    }
    write_table(
        frame,
        spec,
        path,
        make_provenance("llm-tasks-rows", params, {"rows": rows}),
        {"sample": pa.int32()},
    )
    return len(frame)


def faithfulness(reports: Path, spec: Path, out: Path, *judge: str) -> tuple[float, dict[str, Any]]:
    """check-faithfulness of the reports (the rule checker unless ``judge`` flags say
    otherwise); its seconds and its faithfulness.json."""
    seconds = timed(
        "check-faithfulness", "--reports", str(reports), "--spec", str(spec),
        *judge, "--out-dir", str(out), "--no-progress",
    )  # fmt: skip
    return seconds, json.loads((out / "faithfulness.json").read_text())


def verbalizer_task(args: argparse.Namespace) -> dict[str, Any]:
    """verbalize-tabular on a subset of rows, its reports scored by the rule checker."""
    if args.verbalize_size == 0:
        return skipped()
    out = args.out / "verbalizer"
    subset = out / "rows.parquet"
    rows = rows_subset(args, subset)
    settings = {"backend": args.backend, "trusted_hosts": args.trusted_hosts, "seed": args.seed}
    seconds = timed(
        "verbalize-tabular", "--subsample", str(subset), "--spec", str(args.spec),
        "--allowlist", str(args.allowlist), "--prompt", str(args.report_prompt),
        "--settings", json.dumps(settings), "--reports", str(out / "reports.parquet"),
        "--pii", str(out / "pii.parquet"), "--no-pii", str(out / "no_pii.parquet"),
        "--removals", str(out / "removals.parquet"), "--summary", str(out / "summary.json"),
        "--no-progress",
    )  # fmt: skip
    table = pq.read_table(out / "reports.parquet", columns=["status", "reason", "output_tokens"])
    statuses = table.column("status").to_pylist()
    reasons = table.column("reason").to_pylist()
    sent = rows - sum(reason == REFUSED_BY_GUARD for reason in reasons)
    accepted = sum(status == ACCEPTED for status in statuses)
    tokens = tokens_sum(table.column("output_tokens").to_pylist())
    _, rules = faithfulness(
        out / "reports.parquet", args.spec, out / "rules", "--judge-backend", '{"kind": "none"}'
    )
    counts = rules.get("statuses") or {}
    stated = counts.get(CORRECT, 0) + counts.get(WRONG, 0)
    return {
        "run": True,
        "n": rules["reports"],
        "rows": rows,
        "sent": sent,
        "accepted": accepted,
        "rejections": dict(
            Counter(r for s, r in zip(statuses, reasons, strict=True) if s != ACCEPTED)
        ),
        "faithful_share": rules["overall_accuracy"],
        "per_variable": rules["per_variable_accuracy"],
        "pairs": {status: counts.get(status, 0) for status in (CORRECT, WRONG, NOT_MENTIONED)},
        "faithful_of_stated": per(counts.get(CORRECT, 0), stated),
        "output_tokens": tokens,
        "seconds": seconds,
        "seconds_per_item": per(seconds, sent),
        "tokens_per_second": rate(tokens, seconds),
        "reports": str(out / "reports.parquet"),
    }


def judge_task(args: argparse.Namespace, verbalizer: Mapping[str, Any]) -> dict[str, Any]:
    """check-faithfulness with the model as judge, against the rule checker."""
    if not verbalizer["run"]:
        return skipped()
    policy = {"trusted_hosts": args.trusted_hosts}
    seconds, judged = faithfulness(
        Path(verbalizer["reports"]), args.spec, args.out / "judge",
        "--judge-backend", json.dumps(args.backend), "--judge-policy", json.dumps(policy),
        "--judge-prompt", str(args.judge_prompt),
    )  # fmt: skip
    counts = judged.get("statuses") or {}
    pairs = sum(counts.get(status, 0) for status in STATUSES)
    usable = pairs - counts.get(NOT_JUDGED, 0)
    failures = judged.get("judge_failures") or {}
    sent = judged["reports"] - failures.get(REFUSED_BY_GUARD, 0)
    agreement = judged["agreement_with_rules"] or {"pairs": 0, "observed": None, "kappa": None}
    return {
        "run": True,
        "n": usable,
        "reports": judged["reports"],
        "pairs": pairs,
        "usable": usable,
        "usable_share": per(usable, pairs),
        "kappa": agreement["kappa"],
        "kappa_pairs": agreement["pairs"],
        "observed_agreement": agreement["observed"],
        "failures": failures,
        "statuses": {status: counts.get(status, 0) for status in STATUSES},
        "seconds": seconds,
        "seconds_per_item": per(seconds, sent),
    }


# ---------------------------------------------------------------- provenance


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (else what the platform says)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git(*argv: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *argv], cwd=REPO, capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


def machine(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    return {
        "cpu": cpu_model(),
        "logical_cpus": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "note": (
            "threads of this process; a server's own threads are set where it runs"
            if args.backend.get("kind") == "openai"
            else "threads of this process, where the model runs"
        ),
    }


def speed(tasks: Mapping[str, Any]) -> dict[str, Any]:
    """Output tokens per second over the steps that record tokens."""
    timed_steps = [
        tasks["teacher"],
        *tasks["templates"].values(),
        tasks["verbalizer"],
    ]
    counted = [t for t in timed_steps if t["run"] and t.get("output_tokens") is not None]
    tokens = sum(t["output_tokens"] for t in counted)
    seconds = sum(t["seconds"] for t in counted)
    return {
        "output_tokens": tokens if counted else None,
        "seconds": seconds if counted else None,
        "tokens_per_second": tokens / seconds if counted and seconds else None,
        "steps": "teacher, templates, verbalizer (the judge's tokens are not recorded)",
    }


# ---------------------------------------------------------------- the table


def share_cell(share: float | None, n: int, ci: Sequence[float] | None) -> str:
    interval = f", {ci[0]:.0%}-{ci[1]:.0%}" if ci is not None else ""
    return f"{percent(share, 0)} [{n}{interval}]"


def pii_pool_cell(task: Mapping[str, Any]) -> str:
    """The PII pool's notes; 0 when nothing was accepted, n/a when the task did not run."""
    if not task["run"]:
        return NOT_AVAILABLE
    return str(task["pool"]["pii_notes"]) if task["pool"] else "0"


def row_cells(model: str, result: Mapping[str, Any]) -> list[str]:
    """The model's row of the table (n/a where a figure is undefined)."""
    tasks = result["tasks"]
    teacher, verbalizer, judge = tasks["teacher"], tasks["verbalizer"], tasks["judge"]
    templates = [tasks["templates"][c] for c in CONSTRAINTS]
    if teacher["run"]:
        recall = number_or_na(teacher["recall"]["estimate"], ".2f")
        precision = number_or_na(teacher["precision"]["estimate"], ".2f")
        invalid = teacher["invalid_json"]
        teacher_cell = f"{recall} / {precision} [{teacher['n']}]"
        invalid_cell = f"{percent(invalid['share'], 0)} ({invalid['count']} of {teacher['n']})"
    else:
        teacher_cell = invalid_cell = NOT_AVAILABLE
    templates_cell = " / ".join(
        share_cell(t["share"], t["n"], t["ci"]) if t["run"] else NOT_AVAILABLE for t in templates
    )
    fills = result["sizes"].get("fills_per_template", 1)
    pool_cell = " / ".join(pii_pool_cell(t) for t in templates) + f" [{fills}]"
    verbalizer_cell = (
        f"{number_or_na(verbalizer['faithful_share'], '.3f')} [{verbalizer['n']}]"
        if verbalizer["run"]
        else NOT_AVAILABLE
    )
    judge_cell = (
        f"{number_or_na(judge['kappa'], '.2f')} [{judge['n']}]" if judge["run"] else NOT_AVAILABLE
    )
    template_seconds = " / ".join(number_or_na(t["seconds_per_item"], ".1f") for t in templates)
    seconds = (
        f"teacher {number_or_na(teacher['seconds_per_item'], '.1f')}, "
        f"templates {template_seconds}, "
        f"verbalizer {number_or_na(verbalizer['seconds_per_item'], '.1f')}, "
        f"judge {number_or_na(judge['seconds_per_item'], '.1f')}"
    )
    return [
        model,
        teacher_cell,
        invalid_cell,
        templates_cell,
        pool_cell,
        verbalizer_cell,
        judge_cell,
        number_or_na(result["tasks"]["speed"]["tokens_per_second"], ".1f"),
        seconds,
    ]


def sizes_line(model: str, result: Mapping[str, Any]) -> str:
    sizes = result["sizes"]
    return (
        f"- `{model}`: teacher {sizes['teacher']} seed notes, templates {sizes['templates']} "
        f"masked seeds, verbalizer {sizes['verbalizer']} rows; seed {result['seed']}; "
        f"{result['date'][:10]}, commit `{result['commit']}`."
    )


def update_table(path: Path, model: str, result: Mapping[str, Any]) -> None:
    """Add or replace ``model``'s row and sizes line; header and paragraph rewritten."""
    rows: dict[str, str] = {}
    sizes: dict[str, str] = {}
    if path.exists():
        lines = path.read_text().splitlines()
        table = [line for line in lines if line.startswith("|")][2:]
        for line in table:
            rows[line.split("|")[1].strip()] = line
        for line in lines:
            found = re.match(r"- `([^`]+)`:", line)
            if found:
                sizes[found.group(1)] = line
    rows[model] = markdown_row(row_cells(model, result))
    sizes[model] = sizes_line(model, result)
    header = markdown_table(COLUMNS, [])
    text = "\n".join([TITLE, "", PARAGRAPH, *sizes.values(), "", *header, *rows.values()])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


# ---------------------------------------------------------------- main


def backend_json(value: str) -> dict[str, Any]:
    backend = json.loads(value)
    if not isinstance(backend, dict) or backend.get("kind") in (None, "none"):
        raise argparse.ArgumentTypeError(
            "the backend must be a JSON object of kind openai or transformers"
        )
    return backend


def model_name(value: str) -> str:
    if not MODEL_NAME.fullmatch(value):
        raise argparse.ArgumentTypeError(f"letters, digits and . + - _ only, not {value!r}")
    return value


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-name", required=True, type=model_name, help="the table's row")
    parser.add_argument("--backend", required=True, type=backend_json, help="backend JSON")
    parser.add_argument("--notes", type=Path, help="split_notes notes.parquet (teacher, pools)")
    parser.add_argument("--masked", type=Path, help="mask_seeds masked.parquet (templates)")
    parser.add_argument("--removed", type=Path, help="mask_seeds local/removed_values.parquet")
    parser.add_argument("--rows", type=Path, help="prepared.parquet or samples.parquet")
    parser.add_argument("--spec", type=Path, default=Path(SPEC), help="the rows' variable spec")
    parser.add_argument("--allowlist", type=Path, default=Path(ALLOWLIST))
    parser.add_argument(
        "--teacher-prompt", type=Path, default=None, help="default: the teacher's own"
    )
    parser.add_argument(
        "--teacher-max-tokens",
        type=positive_int,
        default=None,
        help="the teacher's answer length cap (default: the teacher's own)",
    )
    parser.add_argument("--template-prompt", type=Path, default=Path(TEMPLATE_PROMPT))
    parser.add_argument("--report-prompt", type=Path, default=Path(REPORT_PROMPT))
    parser.add_argument("--judge-prompt", type=Path, default=Path(JUDGE_PROMPT))
    parser.add_argument(
        "--trusted-hosts",
        nargs="+",
        default=list(LOOPBACK),
        help="hosts an openai backend may be on (default: this machine)",
    )
    for task, what in (("teacher", "notes"), ("template", "seeds"), ("verbalize", "rows")):
        parser.add_argument(
            f"--{task}-size", type=non_negative_int, default=20, help=f"{what}; 0 skips the task"
        )
    parser.add_argument(
        "--fills", type=positive_int, default=1, help="fills per accepted template in the pool"
    )
    parser.add_argument("--seed", type=int, default=0, help="the subsets' and requests' seed")
    parser.add_argument("--threads", type=positive_int, default=None, help="torch CPU threads")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--table", type=Path, default=None, help="Markdown table to update")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(arguments)
    set_threads(args.threads)
    backend = build_backend(args.backend, where="--backend")
    assert backend is not None  # kind none is refused by the parser
    description = backend.describe()
    backend.close()
    tasks: dict[str, Any] = {"teacher": teacher_task(args)}
    tasks["templates"] = {c: templates_task(args, c) for c in CONSTRAINTS}
    tasks["verbalizer"] = verbalizer_task(args)
    tasks["judge"] = judge_task(args, tasks["verbalizer"])
    tasks["speed"] = speed(tasks)
    result = {
        "model": args.model_name,
        "backend": args.backend,
        "backend_description": description,
        "sizes": {
            "teacher": args.teacher_size,
            "templates": args.template_size,
            "verbalizer": args.verbalize_size,
            "fills_per_template": args.fills,
        },
        "seed": args.seed,
        "machine": machine(args),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "commit": git("rev-parse", "--short", "HEAD"),
        "uncommitted_changes": bool(git("status", "--porcelain", "--untracked-files=no")),
        "command": shlex.join(["python", "bench/llm_tasks.py", *arguments]),
        "tasks": tasks,
    }
    write_json_atomic(result, args.out / "tasks.json")
    if args.table is not None:
        update_table(args.table, args.model_name, result)
    print(args.out / "tasks.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
