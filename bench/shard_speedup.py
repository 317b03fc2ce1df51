"""Speed-up of ``predict-ner`` with 1, 2 and 4 shards as SLURM jobs, and the gather's cost.

    SYNTHDEID_SECRET=... python bench/shard_speedup.py \\
        --model results/train_ner/demo/real_only/model \\
        --notes results/split_notes/demo/notes.parquet --shards 1 2 4

Needs a running SLURM cluster (``tests/slurm/start-slurm.sh`` brings up the
single-node one on this machine; ``tests/slurm/stop-slurm.sh`` stops it).
For each shard count N, the N shard jobs ``synthdeid predict-ner --shard K/N``
are submitted at once with ``sbatch --wait`` (each asking ``--cpus-per-task``
cores, default: the node's cores / N, at least 1), then ``synthdeid
gather-shards`` joins them. Printed per N: jobs, wall time from the first
submission to the last job's end, the gather's seconds, each job's notes/s
(from its summary) and the speed-up against N = 1 measured in the same run.
The gathered predictions are compared with N = 1's, byte for byte.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

BIN = Path(sys.executable).parent


def node_cores() -> int:
    done = subprocess.run(["sinfo", "-h", "-o", "%c"], capture_output=True, text=True, check=True)
    return int(done.stdout.split()[0])


def submit(command: list[str], cpus: int, log: Path) -> tuple[float, float]:
    """Run ``command`` as one SLURM job and wait for it; returns its start and end (epoch s).

    The job stamps its own start and end, so the times do not include how
    often ``sbatch --wait`` polls for the job's end.
    """
    stamps = log.with_suffix(".times")
    wrapped = " ".join(f"'{part}'" for part in command)
    script = f"date +%s.%N > {stamps}; {wrapped}; rc=$?; date +%s.%N >> {stamps}; exit $rc"
    subprocess.run(
        ["sbatch", "--wait", "--quiet", f"--cpus-per-task={cpus}", f"--output={log}",
         f"--export=ALL,PATH={BIN}:{os.environ['PATH']}", f"--wrap={script}"],
        check=True,
    )  # fmt: skip
    start, end = (float(line) for line in stamps.read_text().split())
    return start, end


def run_shards(args: argparse.Namespace, count: int, folder: Path) -> dict[str, object]:
    out = folder / f"n{count}" / "predictions.parquet"
    out.parent.mkdir(parents=True)
    cpus = args.cpus or max(1, node_cores() // count)

    def command(k: int) -> list[str]:
        place = out if count == 1 else out.with_name(f"predictions.shard-{k}-of-{count}.parquet")
        argv = [str(BIN / "synthdeid"), "predict-ner", "--model", str(args.model)]
        argv += ["--notes", str(args.notes), "--out", str(place), "--mode", "none"]
        argv += ["--precision", args.precision, "--threads", str(cpus)]
        argv += ["--chunk-notes", str(args.chunk_notes)]
        argv += ["--summary", str(place.with_suffix(".json"))]
        return argv if count == 1 else [*argv, "--shard", f"{k}/{count}"]

    submitted = time.time()
    with ThreadPoolExecutor(count) as pool:
        spans = list(
            pool.map(
                lambda k: submit(command(k), cpus, out.parent / f"job-{k}.log"),
                range(1, count + 1),
            )
        )
    # from the submission to the last job's end, as a user waits for it
    wall = max(end for _, end in spans) - submitted
    gather = 0.0
    if count > 1:
        gather_started = time.monotonic()
        subprocess.run(
            [str(BIN / "synthdeid"), "gather-shards", "--count", str(count), str(out)], check=True
        )
        gather = time.monotonic() - gather_started
    summaries = (
        [out.with_suffix(".json")]
        if count == 1
        else [out.with_name(f"predictions.shard-{k}-of-{count}.json") for k in range(1, count + 1)]
    )
    rates = [json.loads(p.read_text())["summary"]["notes_per_second"] for p in summaries]
    notes = sum(json.loads(p.read_text())["summary"]["notes"] for p in summaries)
    return {
        "shards": count,
        "cpus_per_job": cpus,
        "notes": notes,
        "wall_s": wall,
        "job_s": [end - start for start, end in spans],
        "gather_s": gather,
        "job_notes_per_s": rates,
        "digest": hashlib.sha256(out.read_bytes()).hexdigest(),
        "predictions": out,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--notes", type=Path, required=True)
    parser.add_argument("--shards", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--precision", default="bf16", choices=["fp32", "bf16", "int8"])
    parser.add_argument("--cpus", type=int, default=None, help="cores per job (default: node / N)")
    parser.add_argument(
        "--chunk-notes",
        type=int,
        default=250,
        help="predict-ner's chunk, which shards are cut on (4,000 notes: 16 chunks)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the outputs' folder")
    args = parser.parse_args()
    if shutil.which("sbatch") is None:
        sys.exit("sbatch not found: start the cluster with tests/slurm/start-slurm.sh")
    folder = Path(tempfile.mkdtemp(prefix="shard-speedup-"))
    rows = [run_shards(args, count, folder) for count in sorted(set(args.shards))]
    base = rows[0]
    print(
        "| shards | cores per job | notes | wall s | speed-up vs 1 | job s | gather s | notes/s per job |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        rates = ", ".join(f"{r:.1f}" for r in row["job_notes_per_s"])  # type: ignore[attr-defined]
        speedup = float(base["wall_s"]) / float(row["wall_s"])  # type: ignore[arg-type]
        print(
            f"| {row['shards']} | {row['cpus_per_job']} | {row['notes']} | {row['wall_s']:.1f} | "
            f"{speedup:.2f}x | {', '.join(f'{s:.1f}' for s in row['job_s'])} | "  # type: ignore[attr-defined]
            f"{row['gather_s']:.1f} | {rates} |"
        )
    for row in rows[1:]:
        same = row["digest"] == base["digest"]
        print(f"{row['shards']} shards: gathered predictions byte-equal to one job's: {same}")
        if not same:
            print(differences(Path(str(base["predictions"])), Path(str(row["predictions"]))))
    if args.keep:
        print(f"kept {folder}")
    else:
        shutil.rmtree(folder)


def differences(one: Path, gathered: Path) -> str:
    """Where two predictions tables differ: rows, spans, metadata."""
    import pyarrow.parquet as pq

    a, b = pq.read_table(one), pq.read_table(gathered)
    rows = sum(x != y for x, y in zip(a.to_pylist(), b.to_pylist(), strict=False))
    meta = a.schema.metadata == b.schema.metadata
    return f"  rows {a.num_rows} vs {b.num_rows}, rows that differ {rows}, same metadata {meta}"


if __name__ == "__main__":
    main()
