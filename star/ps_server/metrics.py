"""The PS's /metrics: a snapshot taken on the server's event loop, served by prometheus_client."""

from __future__ import annotations

import asyncio

from star.metrics import PsMetrics, SnapshotCollector, ps_families, serve_metrics

SNAPSHOT_TIMEOUT_S = 2.0


def ps_snapshot(servicer) -> PsMetrics:
    """Counters of one ParameterServer (call on its event loop: its state is only touched there)."""
    agg = servicer.aggregator
    counts = agg.accounting()
    dropped = {k[len("dropped_"):]: v for k, v in agg.counters.items() if k.startswith("dropped_") and v}
    return PsMetrics(
        ps=servicer.config.ps_index, version=agg.version, plan_epoch=max(agg.epoch, 0),
        accepted=counts["accepted"], applied=counts["applied"], dropped=dropped, rejected=dict(servicer.rejected),
        received_bytes=servicer.push_bytes_received, sent_bytes=servicer.pull_bytes_sent,
        pushes=servicer.pushes_received, waiting_pulls=len(agg.waiting), wait_caused_s=dict(servicer.waits.caused_s))


def start_ps_metrics(servicer, loop: asyncio.AbstractEventLoop, host: str, port: int) -> int:
    """Serve the PS's /metrics from a thread; each scrape asks the event loop for a snapshot."""

    async def snapshot() -> PsMetrics:
        return ps_snapshot(servicer)

    def take() -> PsMetrics | None:
        try:
            return asyncio.run_coroutine_threadsafe(snapshot(), loop).result(SNAPSHOT_TIMEOUT_S)
        except (TimeoutError, RuntimeError):  # the loop is busy or gone: an empty scrape, not a crash
            return None

    _server, bound = serve_metrics(SnapshotCollector(take, ps_families), host, port)
    return bound
