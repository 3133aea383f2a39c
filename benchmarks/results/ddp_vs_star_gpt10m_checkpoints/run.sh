#!/bin/bash
# Clean gpt 10M, 4 workers x 2 PSs: STAR SSGD with its default PS checkpoints (every 10 s), STAR SSGD with
# periodic checkpoints off (--checkpoint-every-s 0; DDP writes none), and DDP, seeds 0-2, order rotated per seed.
set -u
OUT=benchmarks/results/ddp_vs_star_gpt10m_checkpoints
ARGS="--task gpt --preset 10m --workers 4 --ps 2 --target 3.1 --repeats 1 --max-time-s 90"
ckpt() { python -m benchmarks.ddp_vs_star $ARGS --seed $1 --rows star-ssgd-clean --out $OUT/ckpt10_s$1 > $OUT/ckpt10_s$1.log 2>&1; }
none() { python -m benchmarks.ddp_vs_star $ARGS --seed $1 --rows star-ssgd-clean --checkpoint-every-s 0 --out $OUT/ckpt0_s$1 > $OUT/ckpt0_s$1.log 2>&1; }
ddp() { python -m benchmarks.ddp_vs_star $ARGS --seed $1 --rows ddp-clean --out $OUT/ddp_s$1 > $OUT/ddp_s$1.log 2>&1; }
ckpt 0; none 0; ddp 0
none 1; ddp 1; ckpt 1
ddp 2; ckpt 2; none 2
echo DONE
