"""spikes over seeds 0-5, pooled from two tables; run from benchmarks/results."""
import csv
import statistics as st
import sys

FOLDERS = sys.argv[1:] or ["strategies_unseen_spikes_v1", "strategies_unseen_spikes_v1_seeds3to5"]
RUNS = ("clean", "ssgd", "batch", "auto", "auto-clean")


def pooled(folders):
    """{run: {seed: tta_s}} over every runs.csv of `folders`."""
    out = {}
    for folder in folders:
        with open(f"{folder}/runs.csv") as f:
            for row in csv.DictReader(f):
                out.setdefault(row["run"], {})[int(row["seed"])] = float(row["tta_s"])
    return out


tta = pooled(FOLDERS)
seeds = sorted(tta["auto"])
med = {run: st.median(tta[run].values()) for run in RUNS}
for run in RUNS:
    print(f"{run:10s} median {med[run]:6.2f} s  per seed", " ".join(f"{tta[run][s]:.2f}" for s in seeds))
for ref in ("batch", "ssgd"):
    ratios = " ".join(f"{tta['auto'][s] / tta[ref][s]:.2f}" for s in seeds)
    print(f"auto / {ref} on medians {med['auto'] / med[ref]:.3f}; per seed {ratios}")
per_seed = [(tta["ssgd"][s] - tta["auto"][s]) / (tta["ssgd"][s] - tta["clean"][s]) for s in seeds]
on_medians = (med["ssgd"] - med["auto"]) / (med["ssgd"] - med["clean"])
print(f"mitigation on medians {on_medians:.2f}; paired per seed", " ".join(f"{m:.2f}" for m in per_seed),
      f"median {st.median(per_seed):.2f}")
print(f"no-trace auto / clean on medians {med['auto-clean'] / med['clean']:.3f}")
