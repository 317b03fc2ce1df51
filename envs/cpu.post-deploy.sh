#!/usr/bin/env bash
# Snakemake runs this inside the freshly created env ($CONDA_PREFIX), from the working
# directory: the repository root. CPU build of torch.
set -euo pipefail
exec bash envs/install.sh --prefix "$CONDA_PREFIX" --torch cpu
