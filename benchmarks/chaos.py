"""Chaos: kill -9 random STAR processes during a job and check it still reaches its target.

    python -m benchmarks.chaos --task digits --kills 10 --every-s 8 --roles worker,ps,coordinator --seed 0 --out runs/chaos

Runs the job twice with the same seed: once clean, once with a process of a random role
(among --roles) killed with SIGKILL every --every-s seconds of training, --kills in all;
once (half way, when both roles are given) the coordinator and a random PS are killed
together. The launcher restarts what was killed (within faults.max_restarts, set to
--kills here); PSs come back from their checkpoints, the coordinator from the PSs.

Reports reached, TTA against the clean run, updates lost (exact: the PSs' versions before
and after each restore), kills and restarts per role, seconds without a coordinator, and
whether the goals hold (TTA <= 1.5x clean; updates lost <= checkpoint interval per PS
kill). Writes OUT/chaos.json and OUT/kills.csv; the last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import signal
import sys
import threading
import time
from pathlib import Path

import psutil

from star.config import JobConfig, from_dict
from star.launch import launch

ROLES = ("worker", "ps", "coordinator")


def _role_processes(role: str) -> list[psutil.Process]:
    """This process's live `star <role>` children (python -m star.cli <role> ...)."""
    found = []
    for child in psutil.Process(os.getpid()).children(recursive=True):
        try:
            if child.cmdline()[3:4] == [role] and child.status() != psutil.STATUS_ZOMBIE:
                found.append(child)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def _version(out: Path) -> int:
    try:
        lines = (out / "curve.csv").read_text().splitlines()
    except FileNotFoundError:
        return 0
    try:
        return int(lines[-1].split(",")[1]) if len(lines) > 1 else 0
    except (IndexError, ValueError):
        return 0


def _kill(role: str, rng: random.Random, t0: float, log: list[dict]) -> None:
    candidates = _role_processes(role)
    if not candidates:
        return
    victim = rng.choice(sorted(candidates, key=lambda p: p.pid))
    name = " ".join(victim.cmdline()[3:6])
    try:
        victim.send_signal(signal.SIGKILL)
    except psutil.NoSuchProcess:
        return
    log.append({"t_s": round(time.monotonic() - t0, 2), "role": role, "pid": victim.pid, "process": name})
    print(f"  [{log[-1]['t_s']:6.1f}s] kill -9 {role} (pid {victim.pid}: {name})", flush=True)


def chaos_schedule(kills: int, roles: tuple[str, ...], seed: int) -> list[tuple[str, ...]]:
    """Which roles die at each kill time: one random role, once (half way) coordinator and PS together."""
    rng = random.Random(seed)
    schedule: list[tuple[str, ...]] = []
    together = "coordinator" in roles and "ps" in roles and kills >= 2
    while sum(len(s) for s in schedule) < kills:
        if together and len(schedule) == kills // 2 - 1:
            schedule.append(("coordinator", "ps"))
            together = False
        else:
            schedule.append((rng.choice(roles),))
    return schedule


def _job(args: argparse.Namespace, out: Path, max_restarts: int) -> JobConfig:
    data = {"task": args.task, "workers": args.workers, "ps": args.ps, "seed": args.seed, "out": str(out),
            "max_time_s": args.max_time_s, "faults": {"checkpoint_every_updates": args.checkpoint_every_updates,
                                                      "checkpoint_every_s": 0.0, "max_restarts": max_restarts}}
    if args.target is not None:
        data["target"] = args.target
    return from_dict(JobConfig, data)


def run(args: argparse.Namespace) -> dict:
    roles = tuple(r.strip() for r in args.roles.split(",") if r.strip())
    unknown = [r for r in roles if r not in ROLES]
    if unknown or not roles:
        raise SystemExit(f"chaos: --roles={args.roles!r}: each must be one of {', '.join(ROLES)}")
    out = Path(args.out)
    print(f"clean run (seed {args.seed})", flush=True)
    clean = launch(_job(args, out / "clean", 0))
    print(f"  reached={clean['reached']} tta_s={clean['tta_s']}", flush=True)

    schedule = chaos_schedule(args.kills, roles, args.seed)
    rng = random.Random(args.seed + 1)
    outcome: dict = {}
    chaos_out = out / "chaos"

    def job() -> None:
        try:
            outcome["result"] = launch(_job(args, chaos_out, args.kills))
        except Exception as exc:  # noqa: BLE001 - reported below
            outcome["error"] = exc

    thread = threading.Thread(target=job, daemon=True)
    thread.start()
    print(f"chaos run: {args.kills} kills of {','.join(roles)} every {args.every_s} s", flush=True)
    while thread.is_alive() and _version(chaos_out) < 1:  # kills start with training
        time.sleep(0.2)
    t0, log = time.monotonic(), []
    for roles_now in schedule:
        thread.join(args.every_s)
        if not thread.is_alive():
            break
        for role in roles_now:
            _kill(role, rng, t0, log)
    thread.join()
    if "error" in outcome:
        raise SystemExit(f"chaos: the job failed: {outcome['error']}")
    result = outcome["result"]
    return summarise(args, clean, result, log, out)


def summarise(args: argparse.Namespace, clean: dict, result: dict, log: list[dict], out: Path) -> dict:
    kills = {role: sum(1 for k in log if k["role"] == role) for role in ROLES}
    restarts = {role: sum(n for name, n in result.get("restarts", {}).items() if name.startswith(role)) for role in ROLES}
    faults = result.get("faults", {})
    tta, clean_tta = result.get("tta_s"), clean.get("tta_s")
    ratio = round(tta / clean_tta, 3) if tta and clean_tta else None
    lost_budget = args.checkpoint_every_updates * kills["ps"]
    summary = {
        "reached": bool(result.get("reached")), "tta_s": tta, "clean_tta_s": clean_tta, "tta_ratio": ratio,
        "updates_lost": faults.get("updates_lost"), "updates_lost_budget": lost_budget,
        "kills": sum(kills.values()), "kills_per_role": kills, "restarts_per_role": restarts,
        "coordinator_down_s": faults.get("coordinator_down_s"), "ps_restored": faults.get("ps_restored"),
        "updates": result.get("updates"), "clean_updates": clean.get("updates"),
        "goals": {"reached": bool(result.get("reached")), "tta_le_1.5x_clean": ratio is not None and ratio <= 1.5,
                  "updates_lost_le_interval_per_ps_kill": (faults.get("updates_lost") or 0) <= lost_budget},
        "seed": args.seed, "every_s": args.every_s,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "chaos.json").write_text(json.dumps(summary, indent=2))
    with open(out / "kills.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["t_s", "role", "pid", "process"])
        writer.writeheader()
        writer.writerows(log)
    return summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.chaos", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="digits")
    p.add_argument("--kills", type=int, default=10, help="processes killed in all")
    p.add_argument("--every-s", type=float, default=8.0, help="seconds of training between kills")
    p.add_argument("--roles", default="worker,ps,coordinator", help="comma-separated: " + ", ".join(ROLES))
    p.add_argument("--seed", type=int, default=0, help="the job's seed and the victims' choice")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--ps", type=int, default=2)
    p.add_argument("--target", type=float, default=None, help="default the task's")
    p.add_argument("--max-time-s", type=float, default=300.0)
    p.add_argument("--checkpoint-every-updates", type=int, default=5, help="each PS's checkpoint interval")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    if args.kills < 0 or args.every_s <= 0:
        print(f"chaos: --kills={args.kills} must be >= 0 and --every-s={args.every_s} > 0", file=sys.stderr)
        return 2
    summary = run(args)
    print(json.dumps(summary))
    return 0 if all(summary["goals"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
