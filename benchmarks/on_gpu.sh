#!/usr/bin/env bash
# Issue 12's GPU checks in one call, sized for a short lease on a one-GPU machine (about 8 minutes):
#   0. the PS's round update, phase by phase, on this host's CPU (benchmarks.ps_apply), 1 and $THREADS threads;
#   1. the CUDA tests (STAR workers and DDP ranks on the GPU, fp16 autocast with loss scaling);
#   2. DDP vs STAR on gpt-50m, 4 workers x 2 PSs, clean and under mid3x (1 repeat);
#   3. DDP vs STAR clean speed on gpt-120m (1 repeat).
# Usage, from the repository root: OUT=/some/dir bash benchmarks/on_gpu.sh
# DEVICE=cpu PRESET50=1m PRESET120=1m runs the same stages on a CPU host as a dry run of the script.
# Where the host lacks this project's grpcio/protobuf versions, install wheels first (see the device
# tool's README: pip download ... grpcio==1.85.1 protobuf==7.36.2 into .whl, carried, then
# pip install --target /tmp/site and PYTHONPATH=/tmp/site).
# Logs land in $OUT (env.txt, ps_apply.txt, tests.txt, gpt50m.txt, gpt120m.txt) with the runs' small files in
# $OUT/results.tgz (curves, events, results, logs; no checkpoints). Every stage has its own time limit.
set -u
OUT=${OUT:-/tmp/star_gpu}
RESULTS=${RESULTS:-/tmp/star_gpu_results}
DEVICE=${DEVICE:-cuda}
THREADS=${THREADS:-4}  # torch threads per process: 16 cores hold 4 workers, 2 PSs and the coordinator
mkdir -p "$OUT" "$RESULTS"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python3}

{
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  echo "cpus: $(nproc)"; df -h /dev/shm | tail -1
  $PY -c "import sys, torch, grpc, google.protobuf as pb; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'gpus', torch.cuda.device_count(), 'grpc', grpc.__version__, 'protobuf', pb.__version__)"
  git log --oneline -1 2>/dev/null
} 2>&1 | tee "$OUT/env.txt"

for t in 1 "$THREADS"; do  # this host's PS update at gpt-50m's shard size, phase by phase
  timeout -k 10 45 $PY -m benchmarks.ps_apply --numel 24.9M --threads "$t" --repeats 3 2>&1 | tee -a "$OUT/ps_apply.txt"
done

if [ "$DEVICE" = cuda ]; then
  timeout -k 10 100 $PY -m pytest -q -p no:cacheprovider tests/integration/test_cuda.py tests/unit/test_devices.py 2>&1 | tee "$OUT/tests.txt"
fi

timeout -k 15 250 $PY -m benchmarks.ddp_vs_star --device "$DEVICE" --task gpt --preset "${PRESET50:-50m}" --workers 4 --ps 2 \
  --trace mid3x --mid-start 5 --mid-end 40 --repeats 1 --max-time-s 40 --threads-per-process "$THREADS" \
  --rows ddp-clean,star-ssgd-clean,ddp,star-auto --out "$RESULTS/gpt50m" 2>&1 | tee "$OUT/gpt50m.txt"

timeout -k 15 110 $PY -m benchmarks.ddp_vs_star --device "$DEVICE" --task gpt --preset "${PRESET120:-120m}" --workers 4 --ps 2 \
  --rows ddp-clean,star-ssgd-clean --repeats 1 --max-time-s 35 --threads-per-process "$THREADS" \
  --out "$RESULTS/gpt120m" 2>&1 | tee "$OUT/gpt120m.txt"

tar czf "$OUT/results.tgz" --exclude='*.pt' -C "$RESULTS" . 2>&1 | tail -2
echo "done: $(date -u)"
