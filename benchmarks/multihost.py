"""Run one STAR job across the hosts of a `NetNamespaces` network, the way a cluster would:
torchrun on every host (c10d rendezvous at host 0), each starting `star node`.

Used by the multi-host integration test and by benchmarks/placement.py and benchmarks/tree.py.
"""

from __future__ import annotations

import csv
import json
import os
import secrets
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

from benchmarks.netns import NetNamespaces, unavailable
from star.config import JobConfig, to_toml

RDZV_PORT = 29400
# Namespaces share this machine's /dev/shm, so under transport "auto" a worker maps the mailbox of a PS on
# another "host" and its payloads never cross the shaped veth links: benchmarks that stand in for hosts move
# payloads over the PSs' socket channels unless told otherwise.
HOST_TRANSPORTS = ("socket", "grpc", "auto")


def add_job_flags(parser, cap_mbit: float, max_time_s: float, repeats: int, out: str) -> None:
    """The flags every benchmark on namespace hosts shares: the link cap, the task, seeds, time limit, repeats,
    output folder and `--transport` (default socket: see HOST_TRANSPORTS)."""
    parser.add_argument("--cap-mbit", type=float, default=cap_mbit)
    parser.add_argument("--cap-delay-ms", type=float, default=5.0, help="added delay, where the kernel has netem")
    parser.add_argument("--task", default="digits")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-time-s", type=float, default=max_time_s)
    parser.add_argument("--repeats", type=int, default=repeats)
    parser.add_argument("--out", default=out)
    parser.add_argument("--transport", default="socket", choices=HOST_TRANSPORTS,
                        help="payloads between hosts; auto would take shared memory across namespaces, "
                             "bypassing the links (default: socket)")


def run_job(net: NetNamespaces, config: JobConfig, out: Path, timeout_s: float = 240.0,
            extra: Sequence[str] = ()) -> dict:
    """Run `config` with one torchrun per host; returns node 0's result.json (raises with logs on failure)."""
    out.mkdir(parents=True, exist_ok=True)
    job = out / "job.toml"
    job.write_text(to_toml(config))
    env = dict(os.environ, STAR_JOB_TOKEN=secrets.token_hex(32), PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    run_id = f"star{secrets.token_hex(4)}"
    processes = []
    for rank in range(net.nodes):
        argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(net.nodes), "--nproc-per-node", "1",
                "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{net.address(0)}:{RDZV_PORT}", "--rdzv-id", run_id,
                "--rdzv-conf", f"is_host={'true' if rank == 0 else 'false'}", "--local-addr", net.address(rank),
                "--max-restarts", "0", "-m", "star.node", "--config", str(job), "--quiet",
                "--overwrite", *extra]  # the benchmark's own run folder: a rerun replaces it
        processes.append(net.popen(rank, argv, out / f"torchrun{rank}.log", env=env))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(p.poll() is None for p in processes):
        if any(p.poll() not in (None, 0) for p in processes):
            break
        time.sleep(0.5)
    codes = [p.poll() for p in processes]
    if codes != [0] * net.nodes:
        logs = "\n".join(f"--- torchrun{r}.log ---\n" + _tail(out / f"torchrun{r}.log") for r in range(net.nodes))
        raise RuntimeError(f"multi-host job failed (torchrun exit codes {codes}, None = still running after {timeout_s} s):\n{logs}")
    return json.loads((Path(config.out) / "result.json").read_text())


def _tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def run_and_report(name: str, args, run: Callable[[object], list[dict]], summary: Callable[[list[dict], object], str]) -> int:
    """A multi-host benchmark's main: exit 2 naming why when hosts cannot be built here, else run it
    and write OUT/NAME.md and OUT/NAME.csv."""
    if (reason := unavailable()) is not None:
        print(f"benchmarks.{name}: cannot build hosts: {reason}", file=sys.stderr)
        return 2
    rows = run(args)
    write_report(Path(args.out), name, rows, summary(rows, args))
    return 0


def write_report(out: Path, name: str, rows: list[dict], text: str) -> None:
    """OUT/NAME.md (the summary text) and OUT/NAME.csv (one row per run), and the text on stdout."""
    (out / f"{name}.md").write_text(text)
    with open(out / f"{name}.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(text)
