"""I/O around the simulator: load the trace, run, write result.json, curve.csv, events.jsonl."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from star.config import to_toml
from star.sim.config import SimConfig
from star.sim.engine import SimResult, simulate


def run_and_write(config: SimConfig) -> SimResult:
    result = simulate(config)
    if config.out:
        out = Path(config.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.toml").write_text(to_toml(config))
        (out / "result.json").write_text(json.dumps(result.result, indent=2))
        with open(out / "curve.csv", "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["time_s", "version", "metric"])
            writer.writerows((f"{t:.4f}", v, f"{m:.6f}") for t, v, m in result.curve)
        with open(out / "events.jsonl", "w") as handle:
            for event in result.events:
                handle.write(json.dumps(event) + "\n")
    return result
