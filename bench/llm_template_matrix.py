"""Template acceptance by prompt version and decoding constraint, on one model.

    synthdeid serve-llm start --model bundled:smollm2 --port 8765 --state-dir .llm-server
    python bench/llm_template_matrix.py --corpus physionet --size 30 \
        --base-url http://127.0.0.1:8765/v1 --out results/measure_llm_templates/physionet

Runs ``generate-templates`` on the same random ``--size`` masked seeds
(``seed_sample``) once per prompt file x constraint (``free``, ``json``,
``placeholders``; variant ``standard``, one rewrite each) against an
OpenAI-compatible server that takes GBNF grammars (llama.cpp), and prints a
Markdown table: accepted share with a Wilson 95% interval, the rejection
reasons, output tokens, and seconds per template. Every run keeps its
templates table and summary under ``--out`` (releasable: masked text and
validated templates) and its sent requests under ``--out/.../local/``.
``bench/llm_tasks.py`` runs the step and reads its outcomes with the same
functions (:func:`generate`, :func:`outcomes`).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from synthdeid.cli import run_stage
from synthdeid.stats import wilson_interval
from synthdeid.synthesis.templates import REFUSED_BY_GUARD
from synthdeid.synthesis.validator import ACCEPTED

PROMPTS = (
    "resources/prompts/template_rewrite.yaml",
    "resources/prompts/template_rewrite_small.yaml",
)
CONSTRAINTS = ("free", "json", "placeholders")
ALLOWLIST = "resources/placeholders.yaml"


def generate(
    masked: Path,
    removed: Path,
    prompt: str | Path,
    settings: Mapping[str, Any],
    out: Path,
    allowlist: str | Path = ALLOWLIST,
) -> float:
    """``generate-templates`` into ``out`` (templates.parquet, summary.json; the sent
    requests in ``out/local/``), in this process; the seconds it took."""
    started = time.monotonic()
    run_stage(
        "generate-templates", "--masked", str(masked), "--removed", str(removed),
        "--allowlist", str(allowlist), "--prompt", str(prompt),
        "--settings", json.dumps(settings), "--no-progress",
        "--out", str(out / "templates.parquet"), "--summary", str(out / "summary.json"),
    )  # fmt: skip
    return time.monotonic() - started


def outcomes(templates: Path) -> dict[str, Any]:
    """What became of a templates table's requests, from its status and reason columns.

    ``requested``, ``refused`` (by the guard: never sent), ``sent``,
    ``accepted``, ``share`` (accepted of sent) with its Wilson 95% interval
    ``ci`` (both None when nothing was sent), ``rejections`` (reason -> count,
    refusals apart, most frequent first) and the ``output_tokens`` recorded (None
    when no answer recorded any).
    """
    table = pq.read_table(templates, columns=["status", "reason", "output_tokens"])
    statuses = table.column("status").to_pylist()
    reasons = table.column("reason").to_pylist()
    refused = sum(reason == REFUSED_BY_GUARD for reason in reasons)
    accepted = sum(status == ACCEPTED for status in statuses)
    sent = len(statuses) - refused
    rejected = Counter(
        reason
        for status, reason in zip(statuses, reasons, strict=True)
        if status != ACCEPTED and reason != REFUSED_BY_GUARD
    )
    tokens = [t for t in table.column("output_tokens").to_pylist() if t is not None]
    interval = wilson_interval(accepted, sent) if sent else None
    return {
        "requested": len(statuses),
        "refused": refused,
        "sent": sent,
        "accepted": accepted,
        "share": interval.estimate if interval else None,
        "ci": [interval.lo, interval.hi] if interval else None,
        "rejections": dict(sorted(rejected.items(), key=lambda kv: (-kv[1], str(kv[0])))),
        "output_tokens": sum(tokens) if tokens else None,
    }


def run_one(args: argparse.Namespace, prompt: str, constrain: str) -> dict[str, Any]:
    name = f"{Path(prompt).stem}-{constrain}"
    out = args.out / name
    out.mkdir(parents=True, exist_ok=True)
    settings = {
        "backend": {
            "kind": "openai", "base_url": args.base_url, "model": "bundled:smollm2",
            "grammar": True, "concurrency": 1, "timeout_s": 900,
        },
        "variants": {"standard": 1},
        "seed_sample": {"size": args.size, "seed": args.sample_seed},
        "generation": {
            "temperature": args.temperature, "top_p": 0.95, "max_tokens": 1024,
            "constrain": constrain,
        },
    }  # fmt: skip
    results = Path("results")
    seconds = generate(
        results / "mask_seeds" / args.corpus / "masked.parquet",
        results / "mask_seeds" / args.corpus / "local/removed_values.parquet",
        prompt,
        settings,
        out,
    )
    return {"name": name, "prompt": Path(prompt).stem, "constrain": constrain,
            "seconds": seconds, **outcomes(out / "templates.parquet")}  # fmt: skip


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| prompt | constraint | sent | accepted | share [95% CI] | rejections | out tokens / template | s / template |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        sent, accepted = int(row["sent"]), int(row["accepted"])
        share = f"{row['share']:.0%} [{row['ci'][0]:.0%}, {row['ci'][1]:.0%}]" if sent else "n/a"
        rejected = ", ".join(f"{k} {v}" for k, v in row["rejections"].items()) or "none"
        recorded = row["output_tokens"] is not None
        tokens = int(row["output_tokens"]) / sent if sent and recorded else math.nan
        per = float(row["seconds"]) / sent if sent else math.nan
        lines.append(
            f"| {row['prompt']} | {row['constrain']} | {sent} | {accepted} | {share} | "
            f"{rejected} | {tokens:.0f} | {per:.1f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", default="physionet")
    parser.add_argument("--size", type=int, default=30)
    parser.add_argument("--sample-seed", type=int, default=1)
    parser.add_argument("--temperature", type=float, default=0.6)
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--prompts", nargs="+", default=list(PROMPTS), help="prompt files")
    parser.add_argument("--constraints", nargs="+", default=list(CONSTRAINTS))
    args = parser.parse_args()
    rows = [
        run_one(args, prompt, constrain)
        for prompt in args.prompts
        for constrain in args.constraints
    ]
    matrix = args.out / f"matrix-{'-'.join(Path(p).stem for p in args.prompts)}.json"
    matrix.write_text(json.dumps(rows, indent=2, default=str))
    print(table(rows))


if __name__ == "__main__":
    main()
