"""The compute environment a job runs in, and whether its torch can use the GPU it was granted.

:func:`describe_environment` records the host, the Python, synthdeid and
torch versions, the CUDA devices torch sees and the scheduler's variables;
:func:`describe_machine` records what a trained model's figures depend on (the
code, the CPU and the vector instructions torch uses on it, the device), with no
host name, so a run's record can leave its machine;
:func:`check_cuda` fails a job the scheduler granted a GPU (by
``CUDA_VISIBLE_DEVICES``, ``SLURM_JOB_GPUS`` or ``SLURM_GPUS_ON_NODE``)
whose torch sees no CUDA device, naming the torch build, unless
``SYNTHDEID_FAKE_GPUS=1`` says the GPUs are stand-ins. Torch is imported only
when the environment is described.
"""

from __future__ import annotations

import os
import platform
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

from synthdeid.artifacts import code_version
from synthdeid.code_identity import running_code_digest
from synthdeid.errors import StepError
from synthdeid.runtime import native_cpu_bf16

if TYPE_CHECKING:
    import torch

CPUINFO = Path("/proc/cpuinfo")

SCHEDULER_VARIABLES = (
    "SLURM_JOB_ID",
    "SLURM_JOB_NAME",
    "SLURM_JOB_PARTITION",
    "SLURM_JOB_GPUS",
    "SLURM_GPUS_ON_NODE",
    "SLURM_CPUS_PER_TASK",
    "SLURM_MEM_PER_NODE",
    "CUDA_VISIBLE_DEVICES",
)


def describe_environment() -> dict[str, Any]:
    import torch  # imported here: only describing the environment needs it

    cuda = torch.cuda.is_available()
    return {
        "hostname": socket.gethostname(),
        "python": platform.python_version(),
        "synthdeid": code_version(),
        "torch": torch.__version__,
        "torch_cuda_build": torch.version.cuda,
        "cuda_available": cuda,
        "cuda_devices": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        if cuda
        else [],
        "cpu_count": os.cpu_count(),
        "scheduler": {name: os.environ.get(name) for name in SCHEDULER_VARIABLES},
    }


def cpu_identity(cpuinfo: str | None = None) -> str | None:
    """The CPU as Linux names it: its model name, family and model (``AMD EPYC (family 25,
    model 17)``: a virtual machine's model name alone may not tell two CPU generations
    apart); None where ``/proc/cpuinfo`` says nothing (another OS).

    ``cpuinfo``: the text of ``/proc/cpuinfo`` (read when None); its first processor counts.
    """
    if cpuinfo is None:
        try:
            cpuinfo = CPUINFO.read_text(errors="replace")
        except OSError:
            return platform.processor() or None
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        if not line.strip():
            if fields:
                break  # the end of the first processor's block
            continue
        name, _, value = line.partition(":")
        fields.setdefault(name.strip(), value.strip())
    model_name = fields.get("model name")
    if not model_name:
        return platform.processor() or None
    family, model = fields.get("cpu family"), fields.get("model")
    return f"{model_name} (family {family}, model {model})" if family and model else model_name


def describe_machine(device: torch.device) -> dict[str, Any]:
    """What a model trained with: the code, the CPU, the vector instructions torch uses on it,
    native bf16, threads and the device (``device_name``: the GPU's name on CUDA).

    ``code_version`` is the package version and git commit of the source tree;
    ``code_digest`` the digest of the running stage's code (None outside a stage). No
    host name: training histories and archived run records carry this off the machine.
    """
    import torch  # imported here: only describing the machine needs it

    return {
        "code_version": code_version(),
        "code_digest": running_code_digest(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpu": cpu_identity(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_native_bf16": native_cpu_bf16(),
        "cpu_count": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
    }


FAKE_GPUS_VARIABLE = "SYNTHDEID_FAKE_GPUS"
# CUDA_VISIBLE_DEVICES values that grant no device
NO_DEVICE = frozenset({"", "-1", "NoDevFiles"})


def granted_gpus(scheduler: dict[str, str | None]) -> str | None:
    """The GPUs the scheduler granted this job, as it names them (None: none granted)."""
    for name in ("CUDA_VISIBLE_DEVICES", "SLURM_JOB_GPUS", "SLURM_GPUS_ON_NODE"):
        value = (scheduler.get(name) or "").strip()
        if value in NO_DEVICE or (name == "SLURM_GPUS_ON_NODE" and value == "0"):
            continue  # a count of 0 GPUs on the node grants none
        return f"{name}={value}"
    return None


def check_cuda(env: dict[str, Any], fake_gpus: bool = False) -> None:
    """StepError when the job was granted a GPU that torch cannot use (module docstring)."""
    granted = granted_gpus(env["scheduler"])
    if granted is None or env["cuda_available"] or fake_gpus:
        return
    build = env["torch_cuda_build"] or "none: the CPU build"
    raise StepError(
        f"this job was granted a GPU ({granted}) but torch {env['torch']} (CUDA build "
        f"{build}) sees no CUDA device, so a GPU rule would train on the CPU: run GPU rules "
        "in the CUDA env (--sdm conda with envs/gpu.yaml, as profiles/slurm sets, or a venv "
        f"built by envs/install.sh --torch cuda); {FAKE_GPUS_VARIABLE}=1 only on a test "
        "cluster whose GPUs are stand-ins"
    )
