#!/usr/bin/env bash
# The GPU check: runs tests/test_gpu.py (pytest marker `gpu`), the package's CUDA code paths
# on tiny models built from a config (NER training under bf16/fp16 autocast, NER inference,
# Opacus DP-SGD, TAPT, transformers generation). Without a CUDA device every test skips.
# Run it on a GPU machine and record what it prints in docs/results/gpu.md.
# Extra arguments go to pytest (e.g. -x, -k tapt). The exit code is pytest's.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [[ -f .venv/bin/activate ]]; then
    # shellcheck disable=SC1091
    . .venv/bin/activate
fi
if command -v nvidia-smi >/dev/null; then
    nvidia-smi -L || true
else
    echo "no nvidia-smi"
fi
python -c '
import torch
print("torch", torch.__version__, "| CUDA build", torch.version.cuda)
available = torch.cuda.is_available()
print("cuda available:", available)
if available:
    print("device:", torch.cuda.get_device_name(0), "| bf16:", torch.cuda.is_bf16_supported())
'
exec python -m pytest -m gpu tests/test_gpu.py -v -rs -p no:cacheprovider "$@"
