#!/usr/bin/env bash
# Diagnostics of an LLM template pool next to backend none's pool and the real notes.
#
#   bench/llm_pool_diagnostics.sh physionet results/generate_templates/physionet/templates.parquet \
#     results/measure_llm_templates/physionet
#
# Needs the workflow's split notes and masked seeds for CORPUS and an LLM templates
# table (generate-templates). Fills the LLM templates (deduplicated against the seeds
# too, as config/llm-*.yaml do) and builds backend none's pool from the same masked
# seeds (every seed its own template), then runs diagnose-synthetic on: real train
# (the reference), both synthetic pools, each split into PII and no-PII notes, and
# real holdout. Writes OUT/llm/, OUT/none/ and OUT/diagnostics/.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
corpus=${1:?corpus name}
templates=${2:?LLM templates.parquet}
out=${3:?output folder}
notes=results/split_notes/$corpus/notes.parquet
masked=results/mask_seeds/$corpus/masked.parquet
removed=results/mask_seeds/$corpus/local/removed_values.parquet
fill() {  # fill TEMPLATES DIR AGAINST_SEEDS
  synthdeid fill-templates --templates "$1" --notes "$notes" --seed-parts seed \
    --removed "$removed" --allowlist resources/placeholders.yaml \
    --settings "{\"fill_seed\": 0, \"near_threshold\": 0.95, \"against_seeds\": $3, \"encoder\": null, \"min_surface_chars\": 3}" \
    --pii "$2/pii.parquet" --no-pii "$2/no_pii.parquet" \
    --removals "$2/removals.parquet" --summary "$2/fill.json"
}
mkdir -p "$out/llm" "$out/none"
fill "$templates" "$out/llm" true
synthdeid generate-templates --masked "$masked" --removed "$removed" \
  --allowlist resources/placeholders.yaml --prompt resources/prompts/template_rewrite.yaml \
  --settings '{"backend": {"kind": "none"}}' --no-progress \
  --out "$out/none/templates.parquet" --summary "$out/none/summary.json"
fill "$out/none/templates.parquet" "$out/none" false
synthdeid diagnose-synthetic \
  --subset "real train=$notes:train" \
  --subset "SmolLM2=$out/llm/pii.parquet" --subset "SmolLM2=$out/llm/no_pii.parquet" \
  --derive "SmolLM2 PII=SmolLM2:pii" --derive "SmolLM2 no-PII=SmolLM2:no-pii" \
  --subset "backend none=$out/none/pii.parquet" --subset "backend none=$out/none/no_pii.parquet" \
  --derive "backend none PII=backend none:pii" \
  --subset "real holdout=$notes:holdout" \
  --reference "real train" --out-dir "$out/diagnostics"
