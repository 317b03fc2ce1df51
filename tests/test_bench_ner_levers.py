"""The lever sweep driver (bench/ner_levers.py): a plan of runs, teachers first, results in parts."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest
import torch
from safetensors.torch import load_file

from bench_helpers import bench_module
from ner_helpers import note_from_pieces, tiny_encoder_dir
from synthdeid.cli import main
from synthdeid.notes import Note, write_notes

SURNAMES = ("Welsh", "Moreno", "Okafor", "Lindqvist", "Haddad", "Petrov")


def load_driver() -> ModuleType:
    """The bench script as a module (the workers it spawns import it by name too)."""
    return bench_module("ner_levers")


def made_up(split: str, n: int, prefix: str) -> list[Note]:
    return [
        note_from_pieces(
            f"{prefix}{i}",
            f"{prefix}p{i % 4}",
            ["Seen by Dr. ", (SURNAMES[i % len(SURNAMES)], "DOCTOR"), " on ", ("3/14", "DATE")],
            split,
        )
        for i in range(n)
    ]


def plan(runs: list[dict[str, object]]) -> dict[str, object]:
    return {
        "grid": [0.5, 0.9],
        "mixtures": {"small": {"parts": ["validation", "holdout"]}},
        "models": {"tiny": "models/tiny"},
        "runs": runs,
    }


TRAINING = {"model": "tiny", "epochs": 1, "max_length": 32, "stride": 4, "threads": 1}


def test_a_plan_refuses_a_teacher_that_comes_later_or_is_not_saved(tmp_path: Path) -> None:
    driver = load_driver()
    path = tmp_path / "plan.json"
    student = {"name": "b", "mixture": "small", "training": TRAINING, "teachers": ["a"]}
    path.write_text(json.dumps(plan([student, {"name": "a", "mixture": "small"}])))
    with pytest.raises(SystemExit, match="earlier run"):
        driver.Plan.read(path)
    path.write_text(json.dumps(plan([{"name": "a", "mixture": "small"}, student])))
    with pytest.raises(SystemExit, match="save: true"):
        driver.Plan.read(path)


def test_pack_and_unpack_keep_every_weight_within_its_format(tmp_path: Path) -> None:
    driver = load_driver()
    encoder = tiny_encoder_dir(tmp_path / "encoder")
    original = load_file(str(encoder / "model.safetensors"))
    for int8 in (False, True):
        packed, back = tmp_path / f"packed-{int8}", tmp_path / f"back-{int8}"
        argv = ["pack", "--model", str(encoder), "--out", str(packed), "--shard-mb", "1"]
        assert driver.main(argv + (["--int8"] if int8 else [])) == 0
        assert len(list(packed.glob("packed-*.safetensors"))) >= 2  # sharded at 1 MB
        assert driver.main(["unpack", "--packed", str(packed), "--out", str(back)]) == 0
        restored = load_file(str(back / "model.safetensors"))
        assert restored.keys() == original.keys()
        for name, tensor in original.items():
            assert restored[name].dtype == tensor.dtype
            if tensor.is_floating_point():
                rows = tensor.reshape(tensor.shape[0], -1) if tensor.dim() >= 2 else tensor
                bound = rows.abs().max() / 127 if int8 and tensor.dim() >= 2 else 1e-3
                assert torch.allclose(restored[name], tensor, atol=float(bound), rtol=1e-3)
            else:
                assert torch.equal(restored[name], tensor)
        assert (back / "config.json").is_file() and (back / "tokenizer.json").is_file()


@pytest.mark.slow
def test_a_sweep_trains_teachers_first_and_writes_every_run_in_bounded_parts(
    tmp_path: Path,
) -> None:
    driver = load_driver()
    data = tmp_path / "data"
    tiny_encoder_dir(data / "models" / "tiny")
    notes = data / "notes.parquet"
    write_notes([*made_up("train", 16, "t"), *made_up("holdout", 4, "h")], notes)
    mixture = data / "mixtures" / "small"
    spec = '{"regime": "augmentation", "synthetic_fraction": 0.0, "seed": 1}'
    argv = ["build-mixture", "--notes", str(notes), "--spec", spec]
    argv += ["--out-train", str(mixture / "train.parquet")]
    argv += ["--out-validation", str(mixture / "validation.parquet")]
    assert main([*argv, "--summary", str(mixture / "summary.json")]) == 0
    runs = [
        {"name": "teacher-s1", "mixture": "small", "training": TRAINING, "save": True},
        {
            "name": "student-s1",
            "mixture": "small",
            "training": {**TRAINING, "checkpoint": "f1"},
            "teachers": ["teacher-s1"],
        },
    ]
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(json.dumps(plan(runs)))
    out, work = tmp_path / "out", tmp_path / "work"
    argv = ["run", "--plan", str(plan_path), "--data", str(data), "--out", str(out)]
    argv += ["--work", str(work), "--workers", "2", "--device", "cpu", "--deadline", "300"]
    assert driver.main(argv) == 0
    parts = sorted(out.glob("levers-*.tar"))
    assert parts and all(p.stat().st_size < 15e6 for p in parts)
    unpacked = driver.read_bundle(out, tmp_path / "unpacked")
    results = {json.loads(p.read_text())["name"]: json.loads(p.read_text()) for p in unpacked}
    assert set(results) == {"teacher-s1", "student-s1"}
    student = results["student-s1"]
    assert student["soft_label_notes"] > 0 and results["teacher-s1"]["soft_label_notes"] == 0
    assert student["config"]["checkpoint"] == "f1"
    holdout = student["spans"]["holdout"]
    assert set(holdout) == {"0.5", "0.9"} and set(holdout["0.5"]) == {f"h{i}" for i in range(4)}
    status = json.loads((tmp_path / "unpacked" / "status.json").read_text())
    assert {name: entry["state"] for name, entry in status["runs"].items()} == {
        "teacher-s1": "done",
        "student-s1": "done",
    }
    # a deadline already past starts nothing, and says so
    late = ["run", "--plan", str(plan_path), "--data", str(data), "--out", str(tmp_path / "late")]
    late += ["--work", str(tmp_path / "late-work"), "--device", "cpu", "--deadline", "0"]
    assert driver.main(late) == 0
    driver.read_bundle(tmp_path / "late", tmp_path / "late-unpacked")
    status = json.loads((tmp_path / "late-unpacked" / "status.json").read_text())
    assert {entry["state"] for entry in status["runs"].values()} == {"not started", "skipped"}
