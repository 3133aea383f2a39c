"""Scan: does an lr schedule lower digits' updates-to-target CV? (experiment, not project code)"""
import sys, json, math, statistics, torch
sys.path.insert(0, '.')
from star.tasks.registry import get_task
from star.tasks.calibrate import make_optimizer, BatchStream
from star.tta import EvalPoint, first_reaching
torch.set_num_threads(1)
task = get_task('digits')
sched, lr0, horizon, seeds = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
targets=[0.94,0.95,0.96]
def lr_at(step):
    f = step / horizon
    if sched == 'const': return lr0
    if sched == 'linear': return lr0 * max(0.05, 1 - f)
    if sched == 'cosine': return lr0 * max(0.02, 0.5 * (1 + math.cos(math.pi * min(f, 1))))
    if sched == 'inv': return lr0 / (1 + f * 9)   # to lr0/10 at horizon
    if sched == 'step': return lr0 if f < 0.5 else lr0 * 0.2
res = {t: [] for t in targets}
for seed in range(seeds):
    model = task.build_model(seed)
    opt = make_optimizer(task, model.parameters(), lr0)
    streams = [BatchStream(task.train, w, 4, seed) for w in range(4)]
    hist = []
    for step in range(1, 161):
        for g in opt.param_groups: g['lr'] = lr_at(step - 1)
        opt.zero_grad()
        for s in streams:
            x, y = s.next_batch(task.default_batch_size)
            (task.loss_fn(model(x), y) / 4).backward()
        opt.step()
        if step % 2 == 0:
            hist.append(EvalPoint(float(step), step, task.evaluate(model)))
            if hist[-1].metric >= max(targets) + 0.01 and len(hist) > 3: break
    for t in targets:
        p = first_reaching(hist, t, True, 3); res[t].append(None if p is None else p.version)
out = {}
for t, u in res.items():
    r = [x for x in u if x is not None]
    cv = statistics.stdev(r) / statistics.mean(r) if len(r) > 1 else None
    out[t] = (u, round(statistics.median(r), 1) if r else None, round(cv * 100, 1) if cv else None)
print(sched, lr0, horizon, json.dumps(out))
