#!/usr/bin/env bash
# Install llama.cpp's OpenAI-compatible server, llama-cpp-python[server], into the
# project's venv (made by scripts/setup-env.sh), for `synthdeid serve-llm`:
#   1. the llama-cpp-python wheel for this Python from the wheel cache
#      ${SYNTHDEID_WHEEL_CACHE:-$HOME/.cache/synthdeid/wheels}, else built there from the sdist;
#   2. that wheel and envs/requirements-llm-server.lock, both with --no-deps (the rest of
#      the server's requirements are already pinned in envs/requirements-cpu.lock).
# Usage: scripts/setup-llm-server.sh [--cached-only] [VENV_DIR]   (default .venv; idempotent)
#   --cached-only  install only from a cached wheel, never build (scripts/setup-env.sh uses it)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
version=0.3.36
lock=envs/requirements-llm-server.lock
cached_only=false
if [[ ${1:-} == --cached-only ]]; then
  cached_only=true
  shift
fi
venv=${1:-.venv}
cache=${SYNTHDEID_WHEEL_CACHE:-$HOME/.cache/synthdeid/wheels}
python="$venv/bin/python"
say() { echo "[setup-llm-server] $*"; }
if [[ ! -x $python ]]; then
  say "no $python: build the venv with scripts/setup-env.sh first" >&2
  exit 1
fi
pip=("$python" -m pip --disable-pip-version-check)

# Installed already: llama-cpp-python at $version and every pin of the lock at its version.
if "$python" scripts/pins-installed.py "$lock" "llama-cpp-python==$version"; then
  say "llama-cpp-python[server]==$version is already installed in $venv"
  exit 0
fi

# pip picks a wheel from the cache that fits this Python and platform, if there is one.
from_cache=("${pip[@]}" install -q --no-deps --no-index --only-binary=:all: --find-links "$cache")
if ! "${from_cache[@]}" --dry-run "llama-cpp-python==$version" >/dev/null 2>&1; then
  if $cached_only; then
    say "no cached llama-cpp-python $version wheel in $cache; skipped (run scripts/setup-llm-server.sh to build it)"
    exit 0
  fi
  say "building llama-cpp-python $version from source into $cache"
  # Compiles llama.cpp: ~25 minutes on 2 busy cores, 6 when they are mostly free (needs a
  # C++ compiler, cmake and ninja).
  # GGML_NATIVE=OFF: a portable wheel (no -march=native), usable on other machines of the
  # same architecture that share the cache.
  mkdir -p "$cache"
  CMAKE_ARGS="${CMAKE_ARGS:+$CMAKE_ARGS }-DGGML_NATIVE=OFF" \
    "${pip[@]}" wheel -q --no-deps --no-binary llama-cpp-python --wheel-dir "$cache" \
    "llama-cpp-python==$version"
fi
say "installing llama-cpp-python $version from $cache and $lock into $venv"
"${from_cache[@]}" "llama-cpp-python==$version"
"${pip[@]}" install -q --no-deps -r "$lock"
"$python" -c 'import llama_cpp, llama_cpp.server.app; print("[setup-llm-server] ok: llama-cpp-python", llama_cpp.__version__)'
