#!/usr/bin/env bash
# Regenerate docs/rulegraph.dot (checked by the tests) and docs/rulegraph.png (needs graphviz's dot).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
command -v dot >/dev/null || { echo "render-rulegraph: needs graphviz's dot (apt install graphviz)" >&2; exit 1; }
snakemake all probe_gpu_env --rulegraph 2>/dev/null > docs/rulegraph.dot.tmp
mv docs/rulegraph.dot.tmp docs/rulegraph.dot
dot -Tpng -Gdpi=110 docs/rulegraph.dot -o docs/rulegraph.png.tmp
mv docs/rulegraph.png.tmp docs/rulegraph.png
echo "wrote docs/rulegraph.dot docs/rulegraph.png"
