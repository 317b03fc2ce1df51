"""Record the compute environment a rule ran in (host, SLURM job, accelerators).

The workflow's ``probe_gpu_env`` rule asks for ``gpu=1`` and runs this, so an
HPC user can check that GPU rules land on GPU nodes (the SLURM job id and the
devices the scheduler granted) before spending hours on training.
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import socket
from typing import Any

from synthdeid.artifacts import code_version, write_json_atomic
from synthdeid.cli_types import output_file

log = logging.getLogger(__name__)

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
    import torch  # imported here: only this stage needs it

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


def register_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, type=output_file, help="environment JSON to write")


def run(args: argparse.Namespace) -> None:
    env = describe_environment()
    write_json_atomic(env, args.out)
    log.info(
        "host %s, SLURM job %s, CUDA_VISIBLE_DEVICES=%s, cuda available: %s",
        env["hostname"],
        env["scheduler"]["SLURM_JOB_ID"],
        env["scheduler"]["CUDA_VISIBLE_DEVICES"],
        env["cuda_available"],
    )
