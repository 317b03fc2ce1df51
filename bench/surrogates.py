"""Benchmark surrogate replacement: notes/s and peak memory at two input sizes.

    python bench/surrogates.py [--sizes 20000 100000]

The input is the PhysioNet corpus ($PHYSIONET_DEID_DIR) or, without it, the
synthetic demo corpus, repeated (with fresh note and patient ids) to each size
and written as Parquet in row groups. Each measurement runs in its own process
pinned to one core: the surrogate step as the workflow runs it, and as the
baseline the same streaming read/write with every label kept (operator
``keep``), so the ratio isolates the cost of making surrogates. Peak memory is
the process's maximum resident set size; flat memory shows as equal peaks at
both sizes.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from synthdeid.labels import CANONICAL_LABELS

REPO = Path(__file__).resolve().parents[1]
KEEP_ALL = {label: {"operator": "keep"} for label in CANONICAL_LABELS}


def source_notes() -> tuple[str, pa.Table]:
    from synthdeid.ingest import IngestSettings, ingest_corpus
    from synthdeid.labels import LabelMap
    from synthdeid.notes import notes_to_table

    corpus = os.environ.get("PHYSIONET_DEID_DIR")
    if corpus:
        import yaml

        config = yaml.safe_load((REPO / "config" / "physionet.yaml").read_text())
        settings = IngestSettings(
            "physionet",
            LabelMap(config["labels"]["mapping"]),
            "physionet-deid",
            overlaps="merge_same_label",
        )
        return "physionet-deid", notes_to_table(ingest_corpus(Path(corpus), settings).notes)
    settings = IngestSettings("jsonl", LabelMap.identity(), "demo")
    notes = ingest_corpus(REPO / "resources" / "demo" / "notes.jsonl", settings).notes
    return "demo (synthetic)", notes_to_table(notes)


def repeated(table: pa.Table, size: int, path: Path) -> None:
    """Write ``size`` notes: copies of ``table`` with new note and patient ids."""
    with pq.ParquetWriter(path, table.schema) as writer:
        written, copy = 0, 0
        while written < size:
            part = table.slice(0, min(table.num_rows, size - written))
            ids = [f"{n}#{copy}" for n in part["note_id"].to_pylist()]
            patients = [f"{p}#{copy}" for p in part["patient_id"].to_pylist()]
            part = part.set_column(0, table.schema.field(0), pa.array(ids)).set_column(
                1, table.schema.field(1), pa.array(patients)
            )
            writer.write_table(part, row_group_size=2048)
            written += part.num_rows
            copy += 1


def measure(input_path: Path, policies: dict | None) -> dict[str, float]:
    """Run the surrogate step in a child process on one core; time and peak RSS."""
    out = input_path.with_name(f"out-{time.monotonic_ns()}.parquet")
    command = [sys.executable, __file__, "--child", str(input_path), str(out)]
    if policies is not None:
        command += ["--policies", json.dumps(policies)]
    env = {**os.environ, "SYNTHDEID_SECRET": secrets.token_hex(32), "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if result.returncode != 0:
        raise SystemExit(f"benchmark child failed:\n{result.stderr[-2000:]}")
    out.unlink(missing_ok=True)
    out.with_suffix(".offsets.parquet").unlink(missing_ok=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def child(input_path: str, output_path: str, policies: str | None) -> None:
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    from synthdeid.artifacts import make_provenance
    from synthdeid.surrogate.keying import load_key
    from synthdeid.surrogate.replace import SurrogateReplacer
    from synthdeid.surrogate.replace_table import replace_file

    replacer = SurrogateReplacer(load_key(), json.loads(policies) if policies else None)
    started = time.perf_counter()
    output = Path(output_path)
    offsets = output.with_suffix(".offsets.parquet")
    stats = replace_file(Path(input_path), output, offsets, replacer, make_provenance("bench", {}))
    seconds = time.perf_counter() - started
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"notes": stats.notes, "seconds": seconds, "peak_mb": peak_mb}))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[20_000, 100_000])
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--policies", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child, args.policies)
        return
    name, table = source_notes()
    print(f"surrogate replacement benchmark: {name}, {table.num_rows} distinct notes, one core")
    print(f"{'notes':>8} {'run':>10} {'seconds':>8} {'notes/s':>9} {'peak MB':>8} {'vs keep':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes:
            path = Path(tmp) / f"notes-{size}.parquet"
            repeated(table, size, path)
            baseline = measure(path, KEEP_ALL)
            surrogate = measure(path, None)
            for label, run in (("keep", baseline), ("surrogate", surrogate)):
                rate = run["notes"] / run["seconds"]
                ratio = run["seconds"] / baseline["seconds"]
                print(
                    f"{size:>8} {label:>10} {run['seconds']:>8.2f} {rate:>9.0f} "
                    f"{run['peak_mb']:>8.0f} {ratio:>7.2f}x"
                )


if __name__ == "__main__":
    main()
