#!/bin/bash
# A/B: the evaluator streaming each evaluated version over gRPC (050a6b4, a worktree at /tmp/wt_old) against
# reading it off the pull board (this commit); DDP clean beside both. gpt 10M, 4 workers x 2 PSs, clean,
# seeds 0-2, the order rotated per seed. Run from the repository root with the venv active.
set -u
OUT=benchmarks/results/evaluator_board_ab
ARGS="--task gpt --preset 10m --workers 4 --ps 2 --target 3.1 --repeats 1 --max-time-s 90"
old() { (cd /tmp/wt_old && PYTHONPATH=/tmp/wt_old python -m benchmarks.ddp_vs_star $ARGS --seed $1 --rows star-ssgd-clean --out /work/main/$OUT/old_s$1 > /work/main/$OUT/old_s$1.log 2>&1); }
new() { python -m benchmarks.ddp_vs_star $ARGS --seed $1 --rows star-ssgd-clean --out $OUT/new_s$1 > $OUT/new_s$1.log 2>&1; }
ddp() { python -m benchmarks.ddp_vs_star $ARGS --seed $1 --rows ddp-clean --out $OUT/ddp_s$1 > $OUT/ddp_s$1.log 2>&1; }
old 0; new 0; ddp 0
new 1; ddp 1; old 1
ddp 2; old 2; new 2
echo DONE
