#!/usr/bin/env bash
# The study's pending runs on a lent GPU machine (bench/study_gpu.py has the whole recipe).
# Each call carries at most 64 MiB and the machine keeps /tmp only while warm (about 30 s
# after a call), so the parts go up back to back, then the run:
#   bench/study/run-on-gpu.sh upload N      carry .gpu/study/upN  (N = 1 .. the parts)
#   bench/study/run-on-gpu.sh run SECONDS   carry .gpu/study/run
# With 15 minutes of device time (the machine's start, each call and each idle wait count):
# the upload calls at once, one after another, then `run 420` with a timeout_s of about 560;
# a second `run` on the still-warm machine resumes (installed wheels kept, interrupted jobs
# rerun). Results under $OUT: archives.tar (finished runs' archive folders), summary.json,
# the tail of snakemake.log; then, here: python bench/study_gpu.py unpack --bundle <files_at> ...
set -euo pipefail
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
case $1 in
  upload)
    mkdir -p /tmp/study-up && cp -r .gpu/study/up"$2" /tmp/study-up/ && du -sh /tmp/study-up/*
    ;;
  run)
    nvidia-smi -L
    python3 -c 'import sys, torch; print(sys.version.split()[0], torch.__version__, torch.cuda.get_device_name(0))'
    python3 bench/study_gpu.py device --run .gpu/study/run --uploads /tmp/study-up \
      --work /tmp/study-work --out "$OUT" --deadline "${2:-480}" --cores "$(nproc)" --gpu-jobs 8
    cat "$OUT/summary.json"
    tail -n 40 "$OUT/snakemake.log"
    ;;
  *)
    echo "usage: $0 upload N | run SECONDS" >&2
    exit 2
    ;;
esac
