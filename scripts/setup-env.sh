#!/usr/bin/env bash
# Build the project's virtual environment from the pinned files in envs/:
#   .venv/                          python 3.11 venv, every package from the lock
#   .venv/opt/dpgan-overlay/        opacus 0.14 for smartnoise's GAN synthesizers only
#   llama-cpp-python[server]        only if its wheel is cached (scripts/setup-llm-server.sh)
# Usage: scripts/setup-env.sh [VENV_DIR]     (default .venv; idempotent)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
venv=${1:-.venv}
python=${PYTHON:-python3.11}
command -v "$python" >/dev/null || python=python3
"$python" -c 'import sys; assert sys.version_info[:2] == (3, 11), "synthdeid needs Python 3.11"'

stamp="$venv/.synthdeid-lock.sha256"
want=$(cat envs/requirements-*.lock envs/install.sh pyproject.toml | sha256sum | cut -d' ' -f1)
if [[ -f $stamp && $(cat "$stamp") == "$want" ]]; then
  echo "[setup-env] $venv is up to date with envs/*.lock"
  exit 0
fi
[[ -x $venv/bin/python ]] || "$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip --disable-pip-version-check)
"${pip[@]}" install -q pip==24.3.1
echo "[setup-env] installing envs/requirements-cpu.lock into $venv (a few minutes the first time)"
# as-locked (--no-deps): the lock is complete; this also keeps pip from fetching a second
# torch build
envs/install.sh --python "$venv/bin/python" --prefix "$venv" --torch as-locked
# the local LLM server (synthdeid serve-llm) only when its wheel is cached: building it
# takes about 25 minutes, so that is left to scripts/setup-llm-server.sh run on its own
scripts/setup-llm-server.sh --cached-only "$venv"
"$venv/bin/python" -c 'import synthdeid, torch, snakemake, opacus; print("[setup-env] ok: synthdeid", synthdeid.__version__, "torch", torch.__version__, "opacus", opacus.__version__)'
echo "$want" > "$stamp"
