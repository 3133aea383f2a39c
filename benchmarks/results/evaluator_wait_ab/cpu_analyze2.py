import json, collections, sys
procs = {}
for line in open(sys.argv[1]):
    try: d = json.loads(line)
    except Exception: continue
    for k, v in d["cpu"].items():
        procs.setdefault(k, []).append((d["t"], v))
def role(k):
    for r in ("cli ps", "cli coordinator", "cli worker", "ddp_rank", "ddp_vs_star"):
        if r in k: return r
    return k[:40]
items = sorted((s[0][0], k, s) for k, s in procs.items() if len(s) >= 15)
groups = []
for t, k, s in items:
    if role(k) == "ddp_vs_star": continue
    if groups and t - groups[-1][0] < 25: groups[-1][1].append((k, s))
    else: groups.append((t, [(k, s)]))
for t, members in groups:
    roles = collections.defaultdict(list)
    for k, s in members:
        (t0, c0), (t1, c1) = s[7], s[-2]
        roles[role(k)].append((c1 - c0) / (t1 - t0))
    total = sum(sum(v) for v in roles.values())
    print(int(t) % 100000, {r: [round(x, 3) for x in v] for r, v in roles.items()}, "total %.3f" % total)
