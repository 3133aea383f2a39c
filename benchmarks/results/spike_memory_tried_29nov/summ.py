import sys, json, statistics
from collections import defaultdict
d = defaultdict(lambda: defaultdict(list))
for l in sys.stdin:
    r = json.loads(l)
    if "case" not in r: continue
    shape = r["case"].split()[0]
    for k in ("ssgd_s", "batch_s", "auto_s", "auto_over_best"):
        d[shape][k].append(r[k])
for shape, v in d.items():
    print(f"  {shape:18s}", " ".join(f"{k} {statistics.mean(x):.3f}" for k, x in v.items()), "max a/b", max(v["auto_over_best"]))
