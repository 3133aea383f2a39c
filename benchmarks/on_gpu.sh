#!/usr/bin/env bash
# Issue 12's GPU checks in one call, sized for a short lease on a one-GPU machine (about 8 minutes):
#   0. the PS's round update, phase by phase, on this host's CPU (benchmarks.ps_apply);
#   1. the CUDA tests (STAR workers and DDP ranks on the GPU, fp16 autocast with loss scaling);
#   2. DDP vs STAR on gpt-50m, 4 workers x 2 PSs, clean and under mid3x (1 repeat);
#   3. DDP vs STAR clean speed on gpt-120m (1 repeat).
# Usage, from the repository root: OUT=/some/dir bash benchmarks/on_gpu.sh
# Where the host lacks this project's grpcio/protobuf versions, install wheels first (see the device
# tool's README: pip download ... grpcio==1.85.1 protobuf==7.36.2 into .whl, carried, then
# pip install --target /tmp/site and PYTHONPATH=/tmp/site).
# Logs land in $OUT (env.txt, ps_apply.txt, tests.txt, gpt50m.txt, gpt120m.txt) with the runs' small files in
# $OUT/results.tgz (curves, events, results, logs; no checkpoints). Every stage has its own time limit.
set -u
OUT=${OUT:-/tmp/star_gpu}
RESULTS=${RESULTS:-/tmp/star_gpu_results}
mkdir -p "$OUT" "$RESULTS"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python3}

{
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  echo "cpus: $(nproc)"; df -h /dev/shm | tail -1
  $PY -c "import sys, torch, grpc, google.protobuf as pb; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'gpus', torch.cuda.device_count(), 'grpc', grpc.__version__, 'protobuf', pb.__version__)"
} 2>&1 | tee "$OUT/env.txt"

timeout -k 10 60 $PY -m benchmarks.ps_apply --numel 24.9M 2>&1 | tee "$OUT/ps_apply.txt"  # this host's PS update, phase by phase

timeout -k 10 100 $PY -m pytest -q -p no:cacheprovider tests/integration/test_cuda.py tests/unit/test_devices.py 2>&1 | tee "$OUT/tests.txt"

timeout -k 15 240 $PY -m benchmarks.ddp_vs_star --device cuda --task gpt --preset 50m --workers 4 --ps 2 --trace mid3x \
  --mid-start 5 --mid-end 40 --repeats 1 --max-time-s 30 --out "$RESULTS/gpt50m" 2>&1 | tee "$OUT/gpt50m.txt"

timeout -k 15 100 $PY -m benchmarks.ddp_vs_star --device cuda --task gpt --preset 120m --workers 4 --ps 2 \
  --rows ddp-clean,star-ssgd-clean --repeats 1 --max-time-s 25 --out "$RESULTS/gpt120m" 2>&1 | tee "$OUT/gpt120m.txt"

tar czf "$OUT/results.tgz" --exclude='*.pt' -C "$RESULTS" . 2>&1 | tail -2
echo "done: $(date -u)"
