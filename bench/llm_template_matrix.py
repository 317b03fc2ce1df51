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
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path

PROMPTS = (
    "resources/prompts/template_rewrite.yaml",
    "resources/prompts/template_rewrite_small.yaml",
)
CONSTRAINTS = ("free", "json", "placeholders")


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of k successes in n trials."""
    if n == 0:
        return (math.nan, math.nan)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def run_one(args: argparse.Namespace, prompt: str, constrain: str) -> dict[str, object]:
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
    started = time.monotonic()
    subprocess.run(
        [
            sys.executable, "-m", "synthdeid", "generate-templates",
            "--masked", str(results / "mask_seeds" / args.corpus / "masked.parquet"),
            "--removed", str(results / "mask_seeds" / args.corpus / "local/removed_values.parquet"),
            "--allowlist", "resources/placeholders.yaml", "--prompt", prompt,
            "--settings", json.dumps(settings), "--no-progress",
            "--out", str(out / "templates.parquet"), "--summary", str(out / "summary.json"),
        ],
        check=True,
    )  # fmt: skip
    seconds = time.monotonic() - started
    summary = json.loads((out / "summary.json").read_text())["summary"]
    return {"name": name, "prompt": Path(prompt).stem, "constrain": constrain,
            "seconds": seconds, **summary}  # fmt: skip


def table(rows: list[dict[str, object]]) -> str:
    lines = [
        "| prompt | constraint | sent | accepted | share [95% CI] | rejections | out tokens / template | s / template |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        guard = row["guard"]
        sent = int(guard["sent"])  # type: ignore[index]
        accepted = int(row["accepted"])  # type: ignore[arg-type]
        low, high = wilson(accepted, sent)
        share = f"{accepted / sent:.0%} [{low:.0%}, {high:.0%}]" if sent else "n/a"
        reasons = row["rejections"]
        assert isinstance(reasons, dict)
        rejected = ", ".join(
            f"{k} {v}" for k, v in sorted(reasons.items(), key=lambda kv: -kv[1])
            if k != "refused_by_guard"
        ) or "none"  # fmt: skip
        tokens = int(row["output_tokens"]) / sent if sent else math.nan  # type: ignore[arg-type]
        per = float(row["seconds"]) / sent if sent else math.nan  # type: ignore[arg-type]
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
