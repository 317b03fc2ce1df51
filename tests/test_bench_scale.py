"""bench/scale_memory.py: its de-identification as shard jobs plus a gather, and resuming a run.

A million notes through ``predict-ner`` outlasts a working day on 2 cores, so
the benchmark records every finished job as it ends and a later run over the
same folder runs only what is missing (that shards gather into one job's bytes
is tests/test_shards.py's and the SLURM test's).
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from ner_helpers import tiny_tagger

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "bench/scale_memory.py"
DEID_TABLES = ("predictions.parquet", "deidentified.parquet")
OUTPUT_FLAGS = ("--out", "--out-deidentified", "--summary")


def bench_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("scale_memory", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["scale_memory"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def test_a_sharded_deid_is_shard_jobs_then_one_gather(tmp_path: Path) -> None:
    bench = bench_module()
    deid = bench.Deid(tmp_path / "model", "int8", 2, shards=3)
    jobs = bench.commands(100, tmp_path, "jsonl", deid)
    keys = [job.key for job in jobs]
    assert keys[-4:] == ["predict-ner 1/3", "predict-ner 2/3", "predict-ner 3/3", "gather-shards"]
    # each shard writes its own files beside the three artifacts the gather joins
    for index, job in enumerate(jobs[-4:-1], start=1):
        assert job.step == "predict-ner"
        assert job.arguments[-2:] == ["--shard", f"{index}/3"]
        written = [job.arguments[i + 1] for i, a in enumerate(job.arguments) if a in OUTPUT_FLAGS]
        assert written == [
            str(tmp_path / "deid" / name.replace(".", f".shard-{index}-of-3."))
            for name in (*DEID_TABLES, "summary.json")
        ]
    gather = jobs[-1].arguments
    assert gather[:2] == ["--count", "3"]
    assert gather[2:] == [str(tmp_path / "deid" / name) for name in (*DEID_TABLES, "summary.json")]
    unsharded = bench.commands(100, tmp_path, "jsonl", bench.Deid(tmp_path / "model", "int8", 2))
    assert [job.key for job in unsharded][-1] == "predict-ner"
    assert "--shard" not in unsharded[-1].arguments


def run_bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=600
    )


def jobs_run(stderr: str) -> list[str]:
    """The jobs a bench run ran (not those it found recorded), from its progress lines."""
    return [m[1] for m in re.finditer(r"^N=[\d,]+: (.+?) [\d.]+ s, .*\(ran\)$", stderr, re.M)]


@pytest.mark.slow
def test_a_resumed_run_runs_only_the_missing_jobs_and_gathers_the_same_bytes(
    tmp_path: Path,
) -> None:
    model = tiny_tagger(tmp_path / "tagger")
    work = tmp_path / "work"
    common = ["--sizes", "120", "--work-dir", str(work), "--deid-model", str(model)]
    # chunks of 40 notes: each of the 3 shards gets one
    common += ["--deid-precision", "fp32", "--deid-threads", "1", "--deid-chunk-notes", "40"]
    first = run_bench(*common, "--deid-shards", "3")
    assert first.returncode == 0, first.stderr[-3000:]
    assert "| 120 | predict-ner (3 shard jobs) |" in first.stdout
    assert "| 120 | gather-shards |" in first.stdout
    assert jobs_run(first.stderr)[-4:] == [
        "predict-ner 1/3",
        "predict-ner 2/3",
        "predict-ner 3/3",
        "gather-shards",
    ]
    folder = work / "n120"
    gathered = {name: (folder / "deid" / name).read_bytes() for name in DEID_TABLES}
    records = (folder / "measures.jsonl").read_text().splitlines()
    assert len(records) == 1 + 4 + 3 + 1  # the settings, 4 steps, 3 shards, the gather
    shard_rows = [
        json.loads((folder / f"deid/summary.shard-{k}-of-3.json").read_text())["shard"]["rows"]
        for k in (1, 2, 3)
    ]
    assert shard_rows == [[0, 40], [40, 80], [80, 120]]

    # as if the machine went away during the last shard: its record and the gather's are lost
    keep = [json.loads(line).get("key") for line in records].index("predict-ner 2/3") + 1
    (folder / "measures.jsonl").write_text("\n".join(records[:keep]) + "\n")
    for name in DEID_TABLES:
        (folder / "deid" / name).unlink()
    resumed = run_bench(*common, "--deid-shards", "3", "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert jobs_run(resumed.stderr) == ["predict-ner 3/3", "gather-shards"]
    assert resumed.stderr.count("(recorded ") == 6
    assert "| 120 | predict-ner (3 shard jobs) |" in resumed.stdout
    for name in DEID_TABLES:
        assert (folder / "deid" / name).read_bytes() == gathered[name], name

    # other de-identification settings: the corpus steps stay, de-identification runs again
    # (its old records are not mixed into the new figures) and gathers the same bytes
    reshard = run_bench(*common, "--deid-shards", "2", "--resume")
    assert reshard.returncode == 0, reshard.stderr[-3000:]
    assert "keeping its 4 corpus steps" in reshard.stderr
    assert jobs_run(reshard.stderr) == ["predict-ner 1/2", "predict-ner 2/2", "gather-shards"]
    assert reshard.stderr.count("(recorded ") == 4
    assert "| 120 | predict-ner (2 shard jobs) |" in reshard.stdout
    for name in DEID_TABLES:
        assert (folder / "deid" / name).read_bytes() == gathered[name], name
    assert not list((folder / "deid").glob("*-of-3.*"))
    records = [json.loads(line) for line in (folder / "measures.jsonl").read_text().splitlines()]
    assert records[0]["settings"]["deid"]["shards"] == 2
    assert [r["key"] for r in records[1:]][-3:] == [
        "predict-ner 1/2",
        "predict-ner 2/2",
        "gather-shards",
    ]
    assert len(records) == 1 + 4 + 2 + 1

    # a corpus in another format is refused, not mixed into the figures
    other = run_bench(*common, "--deid-shards", "2", "--format", "physionet", "--resume")
    assert other.returncode != 0
    assert "measured with settings" in other.stderr
    assert "| 120 |" not in other.stdout


@pytest.mark.slow
def test_only_shards_leaves_the_rest_to_later_runs_and_the_gather_waits(tmp_path: Path) -> None:
    model = tiny_tagger(tmp_path / "tagger")
    work = tmp_path / "work"
    common = ["--sizes", "120", "--work-dir", str(work), "--deid-model", str(model)]
    common += ["--deid-precision", "fp32", "--deid-threads", "1", "--deid-chunk-notes", "40"]
    # one machine's share: the corpus steps and shard 2; no gather, no total
    share = run_bench(*common, "--deid-shards", "3", "--only-shards", "2", "--resume")
    assert share.returncode == 0, share.stderr[-3000:]
    assert jobs_run(share.stderr)[-1] == "predict-ner 2/3"
    assert len(jobs_run(share.stderr)) == 5
    assert "2 of 3 shard jobs left to other runs" in share.stderr
    assert "| 120 | predict-ner (1 of 3 shard jobs: 40 notes) |" in share.stdout
    assert "gather-shards |" not in share.stdout
    assert "| total |" not in share.stdout
    assert re.search(r"^\| 2 of 3 \| 40 \| ", share.stdout, re.M)
    folder = work / "n120"
    assert not (folder / "deid" / "predictions.parquet").exists()

    # the other share: shards 1 and 3, then the gather and the total over all three
    rest = run_bench(*common, "--deid-shards", "3", "--only-shards", "1", "3", "--resume")
    assert rest.returncode == 0, rest.stderr[-3000:]
    assert jobs_run(rest.stderr) == ["predict-ner 1/3", "predict-ner 3/3", "gather-shards"]
    assert "| 120 | predict-ner (3 shard jobs) |" in rest.stdout
    assert "| 120 | gather-shards |" in rest.stdout
    assert "| 120 | total |" in rest.stdout
    shards = re.findall(r"^\| (\d) of 3 \| 40 \| ", rest.stdout, re.M)
    assert shards == ["1", "2", "3"]
    gathered = {name: (folder / "deid" / name).read_bytes() for name in DEID_TABLES}

    # the same corpus de-identified in one job: the shards of both runs wrote its bytes
    single = run_bench(*common, "--resume")
    assert single.returncode == 0, single.stderr[-3000:]
    assert jobs_run(single.stderr) == ["predict-ner"]
    for name in DEID_TABLES:
        assert (folder / "deid" / name).read_bytes() == gathered[name], name

    beyond = run_bench(*common, "--deid-shards", "3", "--only-shards", "4")
    assert beyond.returncode != 0
    assert "--only-shards 4: above --deid-shards 3" in beyond.stderr
