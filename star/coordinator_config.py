"""The coordinator daemon's configuration: its own module, so that configs can be built and tested without the daemon.

What a coordinator shares with its job is declared once, in star.config.RunSettings, which both
inherit: `star coordinator` started by hand takes those settings as its own flags, and a launched
one gets them from the job (star.child_configs.coordinator_config). Declared here: only what is the
coordinator's own.
"""

from __future__ import annotations

from dataclasses import dataclass

from star.config import RunSettings


@dataclass(frozen=True)
class CoordinatorConfig(RunSettings):
    """One coordinator process (and its evaluator)."""

    ps_addresses: tuple[str, ...] = ()  # every PS, in ps_index order
    startup_timeout_s: float = 180.0  # the first update must happen within this
    port: int = 0  # 0 = an ephemeral port (written to the ready file)
    report_window: int = 20  # per-worker reports kept for statistics
    placement_file: str | None = None  # JSON of the start-up placement decision (star node writes it): logged as an event
    restore: bool = False  # restarted after a crash: plan from the PSs, policy state from OUT/coordinator_state.json, curve from OUT/curve.csv
