"""OUT/tensorboard/: a run as TensorBoard scalars (torch.utils.tensorboard).

- `metric/<name>` and `train/loss_worker<i>`: the held-out metric against the update
  (parameter version), and each worker's training loss against its iteration; TensorBoard's
  "Relative" / "Wall" axis shows the same against time.
- `iteration_s/worker<i>`: each worker's seconds per iteration (compute + push + pull).
- `decisions/...`: the mode in force (a code, see MODE_CODES; the exact plan as text), AMP on/off
  and batch size per worker, the straggler flag per worker, and the workers excluded from the
  synchronous group; each against the update at which it was decided.
"""

from __future__ import annotations

from pathlib import Path

MODE_CODES = {"ssgd": 0, "kofn": 1, "grouped": 2, "exclude": 3, "ssp": 4, "asgd": 5}  # decisions/mode


class TensorBoardLog:
    def __init__(self, logdir: str | Path):
        from torch.utils.tensorboard import SummaryWriter  # imported here: tensorboard is slow to import

        self.writer = SummaryWriter(str(logdir), max_queue=10_000, flush_secs=2)  # a deep queue: adding never waits on the disk
        self.version = 0  # latest update seen: the step decisions are drawn at

    def metric(self, name: str, value: float, version: int) -> None:
        self.version = max(self.version, version)
        self.writer.add_scalar(f"metric/{name}", value, version)

    def iteration(self, worker: int, iteration: int, compute_s: float, push_s: float, pull_s: float, loss: float) -> None:
        self.writer.add_scalar(f"iteration_s/worker{worker}", compute_s + push_s + pull_s, iteration)
        if loss == loss:  # NaN losses (a diverged worker) are left out of the plot, not hidden elsewhere
            self.writer.add_scalar(f"train/loss_worker{worker}", loss, iteration)

    def decision(self, event: dict) -> None:
        kind, worker, step = event.get("kind"), event.get("worker"), self.version
        if kind == "plan":
            self.writer.add_scalar("decisions/mode", MODE_CODES.get(str(event.get("mode")), -1), step)
            self.writer.add_text("decisions/plan", str(event.get("plan", "")), step)
            groups = str(event.get("plan", "")).split("groups=[", 1)[-1].split("]", 1)[0].split(";")
            self.writer.add_scalar("decisions/excluded_workers", sum(1 for g in groups if g and "," not in g)
                                   if event.get("mode") == "exclude" else 0, step)
        elif kind == "amp" and worker is not None:
            self.writer.add_scalar(f"decisions/amp/worker{worker}", float(bool(event.get("amp"))), step)
        elif kind == "batch_sizes":
            for key, size in (event.get("sizes") or {}).items():
                self.writer.add_scalar(f"decisions/batch_size/worker{key}", float(size), step)
        elif kind in ("straggler_detected", "straggler_recovered") and worker is not None:
            self.writer.add_scalar(f"decisions/straggler/worker{worker}", float(kind == "straggler_detected"), step)

    def close(self) -> None:
        self.writer.close()
