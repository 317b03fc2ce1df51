#!/usr/bin/env bash
# Diagnostics of an LLM template pool next to backend none's pool and the real notes.
#
#   bench/llm_pool_diagnostics.sh physionet results/measure_llm_templates/physionet
#
# Needs the workflow's split notes, masked seeds and LLM pools for CORPUS (the
# targets in config/llm-physionet-server.yaml's header). Builds backend none's pool
# from the same masked seeds (every seed its own template, filled locally, with the
# LLM pools' dedup settings), then runs diagnose-synthetic on: real train (the
# reference), both synthetic pools, each split into PII and no-PII notes, and
# real holdout. Writes OUT/none/ and OUT/diagnostics/.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
corpus=${1:?corpus name}
out=${2:?output folder}
notes=results/split_notes/$corpus/notes.parquet
masked=results/mask_seeds/$corpus/masked.parquet
removed=results/mask_seeds/$corpus/local/removed_values.parquet
llm=results/fill_templates/$corpus
none=$out/none
mkdir -p "$none"
synthdeid generate-templates --masked "$masked" --removed "$removed" \
  --allowlist resources/placeholders.yaml --prompt resources/prompts/template_rewrite.yaml \
  --settings '{"backend": {"kind": "none"}}' --no-progress \
  --out "$none/templates.parquet" --summary "$none/summary.json"
synthdeid fill-templates --templates "$none/templates.parquet" --notes "$notes" \
  --seed-parts seed --removed "$removed" --allowlist resources/placeholders.yaml \
  --settings '{"fill_seed": 0, "near_threshold": 0.95, "against_seeds": false, "encoder": null, "min_surface_chars": 3}' \
  --pii "$none/pii.parquet" --no-pii "$none/no_pii.parquet" \
  --removals "$none/removals.parquet" --summary "$none/fill.json"
synthdeid diagnose-synthetic \
  --subset "real train=$notes:train" \
  --subset "SmolLM2=$llm/pii.parquet" --subset "SmolLM2=$llm/no_pii.parquet" \
  --derive "SmolLM2 PII=SmolLM2:pii" --derive "SmolLM2 no-PII=SmolLM2:no-pii" \
  --subset "backend none=$none/pii.parquet" --subset "backend none=$none/no_pii.parquet" \
  --derive "backend none PII=backend none:pii" --derive "backend none no-PII=backend none:no-pii" \
  --subset "real holdout=$notes:holdout" \
  --reference "real train" --out-dir "$out/diagnostics"
