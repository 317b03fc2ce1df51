"""Benchmark how long a ``synthdeid`` call takes to start: help, and a small surrogate run.

    python bench/cli_startup.py --repeats 5

Every command runs in a fresh process, ``--repeats`` times; the median wall
time is printed with the fastest and slowest run. Two baselines are measured
in the same run:

- ``import all stages``: importing every stage module, which is what each
  call cost when the command built every stage's parser up front;
- ``import synthdeid.cli``: the interpreter plus the command module, the floor
  no call can go under.

The measured commands are ``synthdeid --help`` and ``synthdeid replace-surrogates`` on
10 demo notes (ingested from resources/demo/notes.jsonl into a temporary
folder first, with a random strong secret). Ratios are against the first
baseline.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "resources" / "demo" / "notes.jsonl"
N_NOTES = 10
IMPORT_ALL = (
    "import importlib\n"
    "from synthdeid.cli import STAGES\n"
    "for stage in STAGES.values():\n"
    "    importlib.import_module(stage.module)\n"
)


def timed(command: list[str], env: dict[str, str], repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        subprocess.run(command, env=env, check=True, capture_output=True)
        times.append(time.perf_counter() - started)
    return times


def demo_notes(folder: Path, env: dict[str, str]) -> Path:
    """The first demo notes as a notes table, made with ``synthdeid ingest-corpus``."""
    from synthdeid.labels import CANONICAL_LABELS

    corpus = folder / "notes.jsonl"
    with DEMO.open(encoding="utf-8") as source:
        corpus.write_text("".join(source.readline() for _ in range(N_NOTES)), encoding="utf-8")
    notes = folder / "notes.parquet"
    label_map = json.dumps({label: label for label in CANONICAL_LABELS})
    ingest = [sys.executable, "-m", "synthdeid", "ingest-corpus", "--corpus", str(corpus)]
    ingest += ["--format", "jsonl", "--label-map", label_map, "--source", "demo"]
    ingest += ["--out", str(notes), "--summary", str(folder / "ingest.json")]
    subprocess.run(ingest, env=env, check=True, capture_output=True)
    return notes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="runs per command (median)")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    env = {**os.environ, "SYNTHDEID_SECRET": secrets.token_hex(32), "OMP_NUM_THREADS": "1"}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        notes = demo_notes(folder, env)
        synthdeid = [sys.executable, "-m", "synthdeid"]
        commands = {
            "import all stages (baseline)": [sys.executable, "-c", IMPORT_ALL],
            "import synthdeid.cli (floor)": [sys.executable, "-c", "import synthdeid.cli"],
            "synthdeid --help": [*synthdeid, "--help"],
            f"synthdeid replace-surrogates ({N_NOTES} notes)": [
                *synthdeid,
                "replace-surrogates",
                str(notes),
                str(folder / "out" / "notes.parquet"),
            ],
        }
        results = {name: timed(command, env, args.repeats) for name, command in commands.items()}
    baseline = statistics.median(next(iter(results.values())))
    print(f"{'command':<42} {'median s':>9} {'min-max s':>13} {'x baseline':>10}")
    for name, times in results.items():
        median = statistics.median(times)
        spread = f"{min(times):.3f}-{max(times):.3f}"
        print(f"{name:<42} {median:>9.3f} {spread:>13} {median / baseline:>10.2f}")
    print(f"repeats: {args.repeats}; python {sys.version.split()[0]}; {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
