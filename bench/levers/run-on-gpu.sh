#!/usr/bin/env bash
# The lever sweep (bench/levers/physionet.json) on a lent GPU machine, in three calls, because
# one call carries at most 64 MiB: the 12-layer encoder travels as int8 rows in two parts
# (`bench/ner_levers.py pack --int8`), MiniLM as fp16, each widened to fp32 there.
#   call 1: bench/levers/run-on-gpu.sh upload1   (carry .gpu/up1 .gpu/site .gpu/smoke)
#   call 2: bench/levers/run-on-gpu.sh upload2   (carry .gpu/up2)
#   call 3: bench/levers/run-on-gpu.sh sweep S   (carry .gpu/minilm-packed .gpu/data .gpu/site)
# S: seconds after which no run starts (the driver stops 60 s later with what is done).
# Results: $OUT/levers-NN.tar (offsets and labels only, no note text) and $OUT/driver.log.
set -euo pipefail
# (pipefail: the driver's exit code survives the log filter)
export PYTHONPATH=$PWD/src:$PWD/.gpu/site HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
case $1 in
  upload1)
    mkdir -p /tmp/up1 && cp .gpu/up1/* /tmp/up1/
    nvidia-smi -L
    python3 -c 'import sys, torch, transformers; print(sys.version.split()[0], torch.__version__, transformers.__version__, torch.cuda.get_device_name(0))'
    # a tiny teacher and its distilled, cased student on the GPU: the code paths of the sweep
    python3 bench/ner_levers.py run --plan .gpu/smoke/plan.json --data .gpu/smoke --out /tmp/smoke-out \
      --work /tmp/smoke-work --workers 2 --device cuda --deadline 120 --grace 30
    tar xf /tmp/smoke-out/levers-00.tar -O status.json | python3 -c 'import json,sys; print({k: v["state"] for k, v in json.load(sys.stdin)["runs"].items()})'
    ;;
  upload2)
    mkdir -p /tmp/up2 && cp .gpu/up2/* /tmp/up2/ && ls /tmp/up1 /tmp/up2
    ;;
  sweep)
    python3 bench/ner_levers.py unpack --packed /tmp/up1 /tmp/up2 --out .gpu/data/models/mpnet
    python3 bench/ner_levers.py unpack --packed .gpu/minilm-packed --out .gpu/data/models/minilm
    python3 bench/ner_levers.py run --plan bench/levers/physionet.json --data .gpu/data --out "$OUT" \
      --work /tmp/levers --workers 8 --device cuda --deadline "${2:-450}" --grace 60 2>&1 |
      tee "$OUT/driver.log" | grep --line-buffered '^\[levers'
    ;;
esac
