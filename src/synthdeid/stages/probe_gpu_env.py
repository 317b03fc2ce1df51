"""Record the compute environment a rule ran in (host, SLURM job, accelerators).

The workflow's ``probe_gpu_env`` rule asks for ``gpu=1`` and runs this, so an
HPC user can check that GPU rules land on GPU nodes (the SLURM job id and the
devices the scheduler granted) before spending hours on training.

A job the scheduler granted a GPU (``CUDA_VISIBLE_DEVICES``, ``SLURM_JOB_GPUS`` or
``SLURM_GPUS_ON_NODE`` set) whose torch sees no CUDA device fails, naming the torch
build: the pinned venv has the CPU build, and a GPU rule run with it trains on the
node's CPUs for hours without a word. GPU rules need the CUDA env (the SLURM
profile's ``software-deployment-method: conda`` with ``envs/gpu.yaml``, or a venv
built by ``envs/install.sh --torch cuda``). ``SYNTHDEID_FAKE_GPUS=1`` (a test
cluster whose GPUs are stand-ins) records without the check.
"""

from __future__ import annotations

import argparse
import logging
import os

from synthdeid.artifacts import write_json_atomic
from synthdeid.cli_types import output_file
from synthdeid.compute_env import FAKE_GPUS_VARIABLE, check_cuda, describe_environment

log = logging.getLogger(__name__)


def register_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, type=output_file, help="environment JSON to write")


def run(args: argparse.Namespace) -> None:
    env = describe_environment()
    check_cuda(env, fake_gpus=os.environ.get(FAKE_GPUS_VARIABLE) == "1")
    write_json_atomic(env, args.out)
    log.info(
        "host %s, SLURM job %s, CUDA_VISIBLE_DEVICES=%s, cuda available: %s",
        env["hostname"],
        env["scheduler"]["SLURM_JOB_ID"],
        env["scheduler"]["CUDA_VISIBLE_DEVICES"],
        env["cuda_available"],
    )
