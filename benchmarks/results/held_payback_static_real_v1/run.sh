#!/bin/bash
# Long real runs (60 s, an unreachable target) on a standing mild spread: iterations done with held_payback on
# (main) and off (the 10% bar throughout), interleaved, seeds 0-2, for batch and auto.
set -u
here=$(cd "$(dirname "$0")" && pwd)
python "$here/make_trace.py"
for seed in 0 1 2; do
  for mode in batch auto; do
    for held in true false; do
      flag=$([ $held = true ] && echo --control.batching.held_payback || echo --no-control.batching.held_payback)
      out="$here/runs/${mode}_held_${held}/seed$seed"
      mkdir -p "$(dirname "$out")"
      rm -rf "$out"
      echo "== $mode held_payback=$held seed=$seed" >&2
      star launch --task digits --workers 4 --ps 2 --mode $mode --seed $seed --trace "$here/static_s5.csv" \
        --target 0.999 --max-time-s 60 $flag --out "$out" > "$out.log" 2>&1
      python -c "import json,sys; r=json.load(open('$out/result.json')); print('$mode', '$held', $seed, r['updates'], r.get('batch_resizes'), r.get('amp_toggles'), r.get('final_metric'))"
    done
  done
done
