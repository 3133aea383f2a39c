#!/bin/bash
# paired A/B: auto on 694ff03 (old) and HEAD (new), rotating_p20, seeds interleaved
for s in 0 1 2 3 4; do
  for v in old new; do
    d=/tmp/wt; [ $v = old ] && d=/tmp/wt_old
    cd $d && PYTHONPATH=$d timeout 600 /work/main/.venv/bin/python -m benchmarks.strategies --trace benchmarks/results/synthetic_traces/rotating_p20.csv --trace-workers 0,1,2,3 --trace-stretch 1 --strategies auto --repeats 1 --seed $s --out /tmp/em/ab_rot/${v}_s$s > /tmp/em/ab_rot/${v}_s$s.log 2>&1
  done
done
echo done > /tmp/em/ab_rot/DONE
