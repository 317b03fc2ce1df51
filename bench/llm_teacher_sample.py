"""Score an LLM teacher on a random sample of a split part, against gold.

    python bench/llm_teacher_sample.py --notes results/split_notes/physionet/notes.parquet \
        --configfile config/llm-physionet-server.yaml --teacher llm --size 100 \
        --out results/measure_llm_teacher/physionet

The workflow's teacher branch labels a whole part (the PhysioNet seed part is
354 notes, about an hour with SmolLM2 on two CPU cores); this labels a random
``--size`` of the part's notes (the same sample for the same ``--seed``,
chosen as ``generate-templates`` chooses seeds) with the teacher's settings
from the config file, then scores the silver labels against gold with
``evaluate-ner`` (per label precision, recall, F1 with bootstrap intervals),
exactly as the ``label_teacher`` and ``evaluate_teacher`` rules do. The
sampled notes and the cached answers hold real notes' PHI: they are written
under ``<out>/local/``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import yaml

from synthdeid.artifacts import write_parquet_atomic
from synthdeid.local_only import LOCAL_DIR, LOCAL_ONLY_METADATA
from synthdeid.notes import read_notes
from synthdeid.stages.generate_templates import sample_seeds

WORKFLOW_TEACHER_KEYS = ("name", "student")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--notes", type=Path, required=True, help="split_notes notes.parquet")
    parser.add_argument("--configfile", type=Path, required=True, help="config with the teacher")
    parser.add_argument("--teacher", required=True, help="the teacher's name in teacher.teachers")
    parser.add_argument("--part", default="seed")
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    config = yaml.safe_load(args.configfile.read_text())
    [entry] = [t for t in config["teacher"]["teachers"] if t["name"] == args.teacher]
    settings = {k: v for k, v in entry.items() if k not in WORKFLOW_TEACHER_KEYS}

    part = [n for n in read_notes(args.notes) if n.split == args.part]
    sample = {n.note_id for n in sample_seeds(part, args.size, args.seed)}
    table = pq.read_table(args.notes)
    rows = [i for i, note_id in enumerate(table.column("note_id").to_pylist()) if note_id in sample]
    subset = table.take(rows)
    subset = subset.replace_schema_metadata(
        {**(subset.schema.metadata or {}), **LOCAL_ONLY_METADATA}
    )
    notes = args.out / LOCAL_DIR / "sample_notes.parquet"
    write_parquet_atomic(subset, notes)
    print(f"{len(sample)} of {len(part)} {args.part} notes -> {notes}", file=sys.stderr)

    labels_dir = args.out / "labels"
    synthdeid = [sys.executable, "-m", "synthdeid"]
    subprocess.run(
        [
            *synthdeid, "label-teacher", "--notes", str(notes), "--parts", args.part,
            "--teacher", args.teacher, "--settings", json.dumps(settings),
            "--out-dir", str(labels_dir), "--threads", "1",
            "--cache-dir", str(args.out / LOCAL_DIR / "llm_cache"),
        ],
        check=True,
    )  # fmt: skip
    subprocess.run(
        [
            *synthdeid, "evaluate-ner", "--gold", str(notes),
            "--predictions", str(labels_dir / "labels.parquet"),
            "--run", f"teacher:{args.teacher}:sample{args.size}", "--parts", args.part,
            "--skip-unpredicted", "--out-dir", str(args.out / "evaluation"),
        ],
        check=True,
    )  # fmt: skip


if __name__ == "__main__":
    main()
