"""Every 2 s: cumulative CPU seconds of every python process of a STAR/DDP job, by role (printed as JSON lines)."""
import json, time, psutil, sys
def role(cmd):
    c = " ".join(cmd)
    for key in ("star.coordinator", "star.ps_server", "star.worker", "ddp_rank", "node_agent", "star.launch", "benchmarks.ddp_vs_star"):
        if key in c:
            return key
    if "star" in c and "python" in c:
        return "other:" + c[:80]
    return None
while True:
    out = {}
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            r = role(p.info["cmdline"] or [])
            if r is None: continue
            t = p.cpu_times()
            out[f"{r}#{p.pid}"] = round(t.user + t.system, 3)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    print(json.dumps({"t": round(time.time(), 2), "cpu": out}), flush=True)
    time.sleep(2)
