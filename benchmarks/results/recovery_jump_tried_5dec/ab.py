"""Paired A/B of one strategy on one trace: old tree vs new tree, seeds interleaved (order alternates per seed)."""
import json, os, subprocess, sys
trees = {"old": "/work/main", "new": "/tmp/wt"}  # new: a git worktree of main with a recovery_jump*.diff applied (/tmp/wt2 for the window variant)
trace, strategy, seeds, out, extra = sys.argv[1], sys.argv[2], [int(s) for s in sys.argv[3].split(",")], sys.argv[4], sys.argv[5:]
rows = []
for i, seed in enumerate(seeds):
    order = ["old", "new"] if i % 2 == 0 else ["new", "old"]
    for arm in order:
        d = f"{out}/{arm}_s{seed}"
        code = ("import sys, json, argparse; from benchmarks.strategies import run_one; "
                "a = argparse.Namespace(task='digits', workers=int(sys.argv[4]), ps=2, max_time_s=150, trace_stretch=float(sys.argv[5]), trace_workers=sys.argv[6] or None); "
                "r = run_one(a, sys.argv[1], sys.argv[2], __import__('pathlib').Path(sys.argv[3]), int(sys.argv[7])); print('RESULT', json.dumps(r))")
        workers, stretch, tw = (extra + ["4", "1.0", ""])[:3] if extra else ("4", "1.0", "")
        env = dict(os.environ, PYTHONPATH=trees[arm])
        p = subprocess.run([sys.executable, "-c", code, strategy, trace, d, workers, stretch, tw, str(seed)], cwd=trees[arm], env=env, capture_output=True, text=True, timeout=600)
        line = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
        r = json.loads(line[-1][7:]) if line else {}
        rows.append({"arm": arm, "seed": seed, "tta_s": r.get("tta_s"), "reached": r.get("reached"), "updates_to_target": r.get("updates_to_target"), "batch_resizes": r.get("batch_resizes"), "amp_toggles": r.get("amp_toggles")})
        print(json.dumps(rows[-1]), flush=True)
        if not line: print(p.stderr[-2000:], flush=True)
json.dump(rows, open(f"{out}/rows.json", "w"), indent=1)
