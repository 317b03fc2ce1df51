#!/usr/bin/env bash
# Regenerate docs/rulegraph.dot (checked by the tests) and docs/rulegraph.png (needs graphviz's dot).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
snakemake all probe_gpu_env --rulegraph 2>/dev/null > docs/rulegraph.dot
dot -Tpng -Gdpi=110 docs/rulegraph.dot > docs/rulegraph.png
echo "wrote docs/rulegraph.dot docs/rulegraph.png"
