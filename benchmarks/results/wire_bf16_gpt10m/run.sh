#!/bin/bash
# bf16 wire vs fp32 over gRPC (digits; gpt-1m: ../wire_bf16_gpt1m), paired seeds interleaved (run from a worktree of the commit)
set -u
TREE=$1; OUT=$2; TASK=$3; SEEDS=$4; shift 4
for seed in $(seq 0 $((SEEDS-1))); do
  for wire in float32 bfloat16; do
    d=$OUT/$wire/seed$seed
    mkdir -p $(dirname $d)
    ( cd $TREE && PYTHONPATH=$TREE /work/main/.venv/bin/python -m star.cli launch --task $TASK --mode ssgd --transport grpc --wire $wire --seed $seed --out $d "$@" > $d.log 2>&1 )
    echo "$wire seed$seed rc=$? $(python3 -c "import json;r=json.load(open('$d/result.json'));print(r['reached'], round(r['tta_s'] or -1,2), r['updates_to_target'], r['transport'], r['wire'])" 2>&1)"
  done
done
