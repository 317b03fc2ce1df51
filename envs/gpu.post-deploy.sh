#!/usr/bin/env bash
# Snakemake runs this inside the freshly created env ($CONDA_PREFIX), from the working
# directory: the repository root. CUDA build of torch with its nvidia-* runtime wheels.
set -euo pipefail
exec bash envs/install.sh --prefix "$CONDA_PREFIX" --torch cuda
