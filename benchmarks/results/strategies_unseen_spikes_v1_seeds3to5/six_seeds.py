"""spikes over seeds 0-5: strategies_unseen_spikes_v1 (seeds 0-2) with this folder (seeds 3-5); run from benchmarks/results."""
import csv
import statistics as st

rows = [r for f in ("strategies_unseen_spikes_v1/runs.csv", "strategies_unseen_spikes_v1_seeds3to5/runs.csv")
        for r in csv.DictReader(open(f))]
tta = {(r["run"], int(r["seed"])): float(r["tta_s"]) for r in rows}
seeds = sorted({s for _, s in tta})
for run in ("clean", "ssgd", "batch", "auto", "auto-clean"):
    print(f"{run:10s} median {st.median(tta[run, s] for s in seeds):6.2f} s  per seed " +
          " ".join(f"{tta[run, s]:.2f}" for s in seeds))
med = {run: st.median(tta[run, s] for s in seeds) for run in ("clean", "ssgd", "batch", "auto", "auto-clean")}
for ref in ("batch", "ssgd"):
    print(f"auto / {ref} on medians {med['auto'] / med[ref]:.3f}; per seed " +
          " ".join(f"{tta['auto', s] / tta[ref, s]:.2f}" for s in seeds))
paired = [(tta["ssgd", s] - tta["auto", s]) / (tta["ssgd", s] - tta["clean", s]) for s in seeds]
print(f"mitigation on medians {(med['ssgd'] - med['auto']) / (med['ssgd'] - med['clean']):.2f}; paired per seed "
      + " ".join(f"{m:.2f}" for m in paired) + f", median {st.median(paired):.2f}")
print(f"no-trace auto / clean on medians {med['auto-clean'] / med['clean']:.3f}")
