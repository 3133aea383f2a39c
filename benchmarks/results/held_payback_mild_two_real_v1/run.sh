#!/bin/bash
# Two workers, one 1.15x slower for good (balancing cuts a round by ~7%: under the 10% bar, over min_gain 5%), one PS,
# 60 s each with an unreachable target; held_payback on and off interleaved, seeds 0-2, mode batch. Figure: updates in 60 s.
set -u
here=$(cd "$(dirname "$0")" && pwd)
for seed in 0 1 2; do
  for held in true false; do
    flag=$([ $held = true ] && echo --control.batching.held_payback || echo --no-control.batching.held_payback)
    out="$here/runs/batch_held_${held}/seed$seed"
    mkdir -p "$(dirname "$out")"; rm -rf "$out"
    echo "== batch held_payback=$held seed=$seed" >&2
    star launch --task digits --workers 2 --ps 1 --mode batch --seed $seed --trace "$here/mild_two.csv" \
      --target 0.999 --max-time-s 60 $flag --out "$out" > "$out.log" 2>&1
    python - "$out" "$held" "$seed" <<'PY'
import json, sys
out, held, seed = sys.argv[1:]
r = json.load(open(f"{out}/result.json"))
events = [json.loads(line) for line in open(f"{out}/events.jsonl")]
sized = [e for e in events if e["kind"] == "batch_sizes"]
low = [(round(e["t"], 1), e.get("required_gain"), e["sizes"]) for e in sized if e.get("required_gain") is not None and 0 < e["required_gain"] < 0.1]
print("batch", held, seed, r["updates"], len(sized), "under the 10% bar:", low)
PY
  done
done
