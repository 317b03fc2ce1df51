"""probe-gpu-env: a job granted a GPU that its torch cannot use fails, naming the build."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from synthdeid.cli import main
from synthdeid.compute_env import check_cuda, granted_gpus
from synthdeid.errors import StepError


def environment(cuda: bool, **scheduler: str) -> dict[str, object]:
    return {
        "torch": "2.13.0+cpu",
        "torch_cuda_build": "12.8" if cuda else None,
        "cuda_available": cuda,
        "scheduler": scheduler,
    }


@pytest.mark.parametrize(
    ("scheduler", "granted"),
    [
        ({}, None),
        ({"CUDA_VISIBLE_DEVICES": ""}, None),
        ({"CUDA_VISIBLE_DEVICES": "-1"}, None),
        ({"CUDA_VISIBLE_DEVICES": "NoDevFiles"}, None),
        ({"SLURM_GPUS_ON_NODE": "0"}, None),
        ({"CUDA_VISIBLE_DEVICES": "0"}, "CUDA_VISIBLE_DEVICES=0"),
        ({"SLURM_JOB_GPUS": "1"}, "SLURM_JOB_GPUS=1"),
        ({"SLURM_GPUS_ON_NODE": "2"}, "SLURM_GPUS_ON_NODE=2"),
    ],
)
def test_granted_gpus(scheduler: dict[str, str], granted: str | None) -> None:
    assert granted_gpus(scheduler) == granted


def test_a_granted_gpu_torch_cannot_see_fails_unless_the_gpus_are_stand_ins() -> None:
    with pytest.raises(StepError, match=r"granted a GPU \(CUDA_VISIBLE_DEVICES=1\).*CPU build"):
        check_cuda(environment(False, CUDA_VISIBLE_DEVICES="1"))
    check_cuda(environment(False, CUDA_VISIBLE_DEVICES="1"), fake_gpus=True)
    check_cuda(environment(True, CUDA_VISIBLE_DEVICES="1"))
    check_cuda(environment(False))  # no GPU asked of this machine: a record only


def test_the_stage_refuses_a_gpu_job_on_cpu_torch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine's torch sees a GPU")
    out = tmp_path / "environment.json"
    for name in ("CUDA_VISIBLE_DEVICES", "SLURM_JOB_GPUS", "SLURM_GPUS_ON_NODE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("SYNTHDEID_FAKE_GPUS", raising=False)
    assert main(["probe-gpu-env", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["cuda_available"] is False
    out.unlink()
    monkeypatch.setenv("SLURM_JOB_GPUS", "0")
    assert main(["probe-gpu-env", "--out", str(out)]) == 2
    assert not out.exists()
    monkeypatch.setenv("SYNTHDEID_FAKE_GPUS", "1")
    assert main(["probe-gpu-env", "--out", str(out)]) == 0
