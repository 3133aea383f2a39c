"""Per worker and run: iteration k's per-sample compute / the worker's steady median (iterations 6-end)."""
import csv, glob, statistics as st, sys
ratios = {k: [] for k in range(1, 7)}
spreads = {k: [] for k in range(1, 7)}
for f in sorted(glob.glob(sys.argv[1] + "/clean_ssgd_seed*_iterations.csv")):
    by = {}
    for r in csv.DictReader(open(f)):
        by.setdefault(int(r["worker"]), {})[int(r["iteration"])] = float(r["compute_s"]) / int(r["batch_size"])
    steady_all = st.median([s for w in by.values() for i, s in w.items() if i >= 6])
    for k in range(1, 7):
        rk = [by[w][k] / st.median([s for i, s in by[w].items() if i >= 6]) for w in by if k in by[w]]
        ratios[k] += rk
        spreads[k].append(max(rk) / min(rk))
    print(f.split("/")[-1].split("_")[2], " ".join("%.2f" % (by[w][1] / steady_all) for w in sorted(by)), "| it2", " ".join("%.2f" % (by[w][2] / steady_all) for w in sorted(by)))
for k in range(1, 7):
    v = ratios[k]
    print(f"iteration {k}: ratio to own steady median: median {st.median(v):.2f}, q10 {sorted(v)[len(v)//10]:.2f}, q90 {sorted(v)[9*len(v)//10]:.2f}; "
          f"max/min across workers per run: median {st.median(spreads[k]):.2f}, max {max(spreads[k]):.2f}")
