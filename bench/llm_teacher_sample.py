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
sampled notes, the teacher's labels and the cached answers hold real notes'
PHI: they are written under ``<out>/local/``. ``bench/llm_tasks.py`` uses the
same three steps (:func:`write_sample`, :func:`label_sample`,
:func:`score_sample`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import yaml

from synthdeid.artifacts import write_parquet_atomic
from synthdeid.cli import run_stage
from synthdeid.local_only import LOCAL_DIR, LOCAL_ONLY_METADATA
from synthdeid.notes import read_notes
from synthdeid.synthesis.template_generation import sample_ids
from synthdeid.teacher.outputs import LABELS

WORKFLOW_TEACHER_KEYS = ("name", "student")


def write_sample(notes: Path, part: str, size: int, seed: int, path: Path) -> tuple[int, int]:
    """A random ``size`` of the notes of split ``part`` (:func:`sample_ids` of their ids),
    with their gold spans, written local-only to ``path``; (notes sampled, notes in the part)."""
    part_ids = [note.note_id for note in read_notes(notes) if note.split == part]
    if not part_ids:
        raise SystemExit(f"{notes}: no notes in split part {part!r}")
    sample = sample_ids(part_ids, size, seed)
    table = pq.read_table(notes)
    rows = [i for i, note_id in enumerate(table.column("note_id").to_pylist()) if note_id in sample]
    subset = table.take(rows)
    subset = subset.replace_schema_metadata(
        {**(subset.schema.metadata or {}), **LOCAL_ONLY_METADATA}
    )
    write_parquet_atomic(subset, path)
    return len(sample), len(part_ids)


def label_sample(
    notes: Path,
    part: str,
    teacher: str,
    settings: Mapping[str, Any],
    out_dir: Path,
    *,
    cache_dir: Path | None = None,
    threads: int = 1,
) -> Path:
    """``label-teacher`` on the sampled notes (its folder belongs under a local/ folder:
    the labels hold the notes); returns the labels table."""
    run_stage(
        "label-teacher", "--notes", str(notes), "--parts", part,
        "--teacher", teacher, "--settings", json.dumps(settings),
        "--out-dir", str(out_dir), "--threads", str(threads),
        *(["--cache-dir", str(cache_dir)] if cache_dir is not None else []),
    )  # fmt: skip
    return out_dir / LABELS


def score_sample(notes: Path, labels: Path, part: str, run: str, out_dir: Path) -> Path:
    """``evaluate-ner`` of the labels against the sampled notes' gold (counts and figures
    only, no text); returns its metrics.json."""
    run_stage(
        "evaluate-ner", "--gold", str(notes), "--predictions", str(labels),
        "--run", run, "--parts", part, "--out-dir", str(out_dir),
    )  # fmt: skip
    return out_dir / "metrics.json"


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

    local = args.out / LOCAL_DIR
    notes = local / "sample_notes.parquet"
    sampled, total = write_sample(args.notes, args.part, args.size, args.seed, notes)
    print(f"{sampled} of {total} {args.part} notes -> {notes}", file=sys.stderr)
    labels = label_sample(
        notes,
        args.part,
        args.teacher,
        settings,
        local / "labels",
        cache_dir=local / "llm_cache",
    )
    score_sample(
        notes,
        labels,
        args.part,
        f"teacher:{args.teacher}:sample{args.size}",
        args.out / "evaluation",
    )


if __name__ == "__main__":
    main()
