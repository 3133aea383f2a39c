#!/bin/bash
# A/B: the evaluator polling each PS every 50 ms for the next version (5a220be, a worktree at /tmp/wt_old) against
# each PS holding its call until the version is applied (5b9b6f3). Clean gpt 10M, 4 workers x 2 PSs, STAR SSGD,
# seeds 0-2, order rotated. Run from the repository root with the venv active, with
# ../ddp_vs_star_gpt10m_checkpoints/cpu_sampler.py beside it (cpu_samples.jsonl here; read with cpu_analyze2.py there).
set -u
OUT=benchmarks/results/evaluator_wait_ab
ARGS="--task gpt --preset 10m --workers 4 --ps 2 --target 3.1 --repeats 1 --max-time-s 90 --rows star-ssgd-clean"
old() { (cd /tmp/wt_old && PYTHONPATH=/tmp/wt_old python -m benchmarks.ddp_vs_star $ARGS --seed $1 --out /work/main/$OUT/old_s$1 > /work/main/$OUT/old_s$1.log 2>&1); }
new() { python -m benchmarks.ddp_vs_star $ARGS --seed $1 --out $OUT/new_s$1 > $OUT/new_s$1.log 2>&1; }
old 0; new 0
new 1; old 1
old 2; new 2
echo DONE
