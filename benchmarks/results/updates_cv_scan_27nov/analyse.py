"""Tabulate updates-to-target CV from updates_cv_ema.py dumps.
python analyse.py DUMP.json [--targets 0.95] [--smoothing 3,5] [--every 1,2]  (every: subsample the curve)"""
import argparse, json, math, sys
import numpy as np
sys.path.insert(0, "/work/main")
from star.tta import EvalPoint, first_reaching


def first(curve, target, smoothing, every, metric="acc"):
    col = 1 if metric == "acc" else 2
    pts = [EvalPoint(float(r[0]), r[0], r[col]) for r in curve if r[0] % every == 0]
    p = first_reaching(pts, target, metric == "acc", smoothing)
    return None if p is None else p.version


def cv(x):
    x = np.asarray(x, float)
    return x.std(ddof=1) / x.mean()


def boot_cv(x, level=0.9, n=5000, seed=0):
    x = np.asarray(x, float)
    rng = np.random.default_rng(seed)
    s = x[rng.integers(0, len(x), size=(n, len(x)))]
    c = s.std(axis=1, ddof=1) / s.mean(axis=1)
    return np.quantile(c, (1 - level) / 2), np.quantile(c, 1 - (1 - level) / 2)


def rows(dump, targets, smoothings, everys, metric="acc"):
    d = json.load(open(dump))
    a = d["args"]; curves = d["curves"]
    seeds = sorted(curves, key=int)
    out = []
    for v in curves[seeds[0]]:
        base_every = a["every"] if v == "raw" else (a.get("ema_every") or a["every"])
        for e in everys:
            if e % base_every:
                continue
            for s in smoothings:
                for t in targets:
                    ups = [first(curves[k][v], t, s, e, metric) for k in seeds]
                    ok = [u for u in ups if u is not None]
                    # earliest update the truncated curve can report: a window fully after eval_from
                    lo_bound = math.ceil(max(a.get("eval_from", 0), 1) / e) * e + (s - 1) * e
                    warn = "!" if ok and min(ok) <= lo_bound + 2 * e else ""
                    r = dict(dump=dump.split("/")[-1].removesuffix(".json"), lr=a["lr"], bs=a["batch_size"] or 64,
                             warmup=a.get("warmup", 0), variant=v, every=e, smoothing=s, target=t, updates=ups,
                             reached=f"{len(ok)}/{len(ups)}", warn=warn)
                    if len(ok) == len(ups) and len(ok) > 1:
                        lo, hi = boot_cv(ok)
                        r |= dict(median=float(np.median(ok)), min=min(ok), max=max(ok), cv=cv(ok), cv_lo=lo, cv_hi=hi)
                    out.append(r)
    return out


def fmt(r):
    head = f"{r['dump']:<22} lr={r['lr'] or 0.005:<7} bs={r['bs']:<4} wu={r['warmup']:<3} {r['variant']:<8} every={r['every']} S={r['smoothing']} t={r['target']}"
    if "cv" not in r:
        return head + f"  reached {r['reached']} {r['updates']}"
    return head + (f"  median {r['median']:5.1f} [{r['min']}-{r['max']}]  CV {100*r['cv']:5.1f}% "
                   f"(90% boot {100*r['cv_lo']:4.1f}-{100*r['cv_hi']:4.1f}) n={len(r['updates'])}{r['warn']}  {r['updates']}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("dumps", nargs="+")
    ap.add_argument("--targets", default="0.95")
    ap.add_argument("--smoothing", default="1,3,5")
    ap.add_argument("--every", default="1,2")
    ap.add_argument("--metric", default="acc")
    args = ap.parse_args()
    for dump in args.dumps:
        for r in rows(dump, [float(t) for t in args.targets.split(",")], [int(s) for s in args.smoothing.split(",")],
                      [int(e) for e in args.every.split(",")], args.metric):
            print(fmt(r))
