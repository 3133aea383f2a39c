"""Host resource sampling: CPU, memory, per-NIC bytes/s and link speed, behind one interface.

Why: STAR's finding is that stragglers on identical accelerators come from CPU and
bandwidth imbalance between hosts, so placement (star.placement) and the coordinator's
traffic guard (star.policy.traffic) need each host's headroom. Every node samples its
own host with psutil and reports a `HostSample` (wall-clock stamped, so samples of
different hosts compare) to the coordinator.

Link speed "where known": psutil's NIC speed (ethtool's figure), lowered to the rate of
a shaping qdisc (tbf/htb, read with `tc -j qdisc`) when the interface has one — a
shaped link is as slow as its shaper, and reading it is how this project's multi-host
tests emulate a slow NIC. Loopback and virtual NICs of unknown speed report None.

Busy share (`LinkBusyMeter`): a synchronous PS round pushes, then pulls, so each direction
of a link that sets the pace idles about half the time and its busier direction averages
well under its rate over a 2 s sample (measured 61-96% on a 10 Mbit/s link busy from
round to round). Counters read every few tens of ms resolve the phases: each tick's busier
direction over the link, capped at 1 and averaged, is what says "this link is the bottleneck".
"""

from __future__ import annotations

import ipaddress
import json
import shutil
import subprocess
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import psutil

MBIT_TO_BYTES = 1_000_000 / 8


@dataclass(frozen=True)
class NicSample:
    """One network interface over the last sampling interval."""

    name: str
    rx_bytes_per_s: float
    tx_bytes_per_s: float
    link_bytes_per_s: float | None  # None: unknown (loopback, a virtual NIC with no shaper)
    busy_share: float | None = None  # share of the interval the link was busy (see busy_share()); None: not measured

    @property
    def busiest_bytes_per_s(self) -> float:
        """Links are full duplex: the busier direction is what limits."""
        return max(self.rx_bytes_per_s, self.tx_bytes_per_s)


@dataclass(frozen=True)
class HostSample:
    """One host's resources over the last sampling interval."""

    host: str  # the node's label (its advertised address or host name)
    time_s: float  # wall clock (time.time()) at the end of the interval: comparable across hosts
    interval_s: float  # seconds the rates and utilisations were averaged over
    cpu_count: int
    cpu_percent: float  # whole-host utilisation, 0..100 (all cores together)
    job_cpu_percent: float  # this job's processes on the host, 0..100 of the whole host
    memory_percent: float
    memory_available_bytes: int
    nics: tuple[NicSample, ...] = ()
    job_nic: str | None = None  # the interface that carries the job's traffic

    @property
    def foreign_cpu_percent(self) -> float:
        """CPU used by processes that are not this job's: co-located jobs."""
        return max(0.0, self.cpu_percent - self.job_cpu_percent)

    def nic(self, name: str | None = None) -> NicSample | None:
        """The named interface, or the job's."""
        wanted = name or self.job_nic
        return next((n for n in self.nics if n.name == wanted), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "host": self.host, "time_s": round(self.time_s, 3), "interval_s": round(self.interval_s, 3),
            "cpu_count": self.cpu_count, "cpu_percent": round(self.cpu_percent, 1),
            "job_cpu_percent": round(self.job_cpu_percent, 1), "memory_percent": round(self.memory_percent, 1),
            "memory_available_bytes": self.memory_available_bytes, "job_nic": self.job_nic,
            "nics": [{"name": n.name, "rx_bytes_per_s": round(n.rx_bytes_per_s), "tx_bytes_per_s": round(n.tx_bytes_per_s),
                      "link_bytes_per_s": n.link_bytes_per_s,
                      **({} if n.busy_share is None else {"busy_share": round(n.busy_share, 4)})} for n in self.nics],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "HostSample":
        nics = tuple(NicSample(n["name"], float(n["rx_bytes_per_s"]), float(n["tx_bytes_per_s"]),
                               None if n.get("link_bytes_per_s") is None else float(n["link_bytes_per_s"]),
                               None if n.get("busy_share") is None else float(n["busy_share"]))
                     for n in data.get("nics", ()))
        return cls(str(data["host"]), float(data["time_s"]), float(data["interval_s"]), int(data["cpu_count"]),
                   float(data["cpu_percent"]), float(data["job_cpu_percent"]), float(data["memory_percent"]),
                   int(data["memory_available_bytes"]), nics, data.get("job_nic"))


# ---- link speeds ------------------------------------------------------------------------
def shaped_rate_bytes_per_s(qdiscs: list[dict[str, Any]]) -> float | None:
    """The lowest rate of the shaping qdiscs in `tc -j qdisc show dev X` output (tbf, htb), or None."""
    rates = []
    for qdisc in qdiscs:
        options = qdisc.get("options") or {}
        if qdisc.get("kind") in ("tbf", "htb") and isinstance(options.get("rate"), (int, float)) and options["rate"] > 0:
            rates.append(float(options["rate"]))  # iproute2's JSON gives rates in bytes/s
    return min(rates) if rates else None


def _tc_qdiscs(nic: str) -> list[dict[str, Any]]:
    tc = shutil.which("tc")
    if tc is None:
        return []
    try:
        done = subprocess.run([tc, "-j", "qdisc", "show", "dev", nic], capture_output=True, text=True, timeout=2.0)
        return json.loads(done.stdout) if done.returncode == 0 and done.stdout.strip() else []
    except (OSError, subprocess.TimeoutExpired, json.JSONDecodeError):
        return []


def link_bytes_per_s(speed_mbit: int, shaped: float | None) -> float | None:
    """min(NIC speed, shaper rate); None when neither is known (psutil says 0 for unknown)."""
    known = [s for s in (speed_mbit * MBIT_TO_BYTES if speed_mbit > 0 else None, shaped) if s is not None]
    return min(known) if known else None


def nic_for_address(host_address: str, addresses: dict[str, list[Any]]) -> str | None:
    """The interface that holds `host_address` (psutil.net_if_addrs() layout); loopback addresses map to
    the loopback interface; a name that is not an IP address maps to None."""
    try:
        wanted = ipaddress.ip_address(host_address.strip("[]"))
    except ValueError:
        return None
    for name, entries in addresses.items():
        for entry in entries:
            try:
                if ipaddress.ip_address(str(entry.address).split("%")[0]) == wanted:
                    return name
            except ValueError:
                continue
    if wanted.is_loopback:
        return next((name for name in addresses if name == "lo" or name.startswith("lo")), None)
    return None


# ---- busy share -------------------------------------------------------------------------
def busy_share(tick_bytes_per_s: Sequence[float], link_bytes_per_s: float) -> float:
    """Share of an interval a link was busy: each tick's busier-direction rate over the link, capped at 1
    (a shaper's burst and the counters' timing let one tick read above the rate), averaged over the ticks."""
    if not tick_bytes_per_s or link_bytes_per_s <= 0:
        return 0.0
    return sum(min(1.0, rate / link_bytes_per_s) for rate in tick_bytes_per_s) / len(tick_bytes_per_s)


class LinkBusyMeter:
    """Reads one NIC's byte counters every `tick_s` in a thread of its own; `take()` hands over each
    tick's busier-direction bytes/s since the previous take (at most the latest `keep_ticks`, should nobody take
    them). Cheap: one /proc/net/dev read per tick."""

    def __init__(self, nic: str, tick_s: float = 0.05,
                 counters: Callable[[], tuple[int, int] | None] | None = None,
                 clock: Callable[[], float] = time.monotonic, keep_ticks: int = 12_000) -> None:
        self.nic = nic
        self.tick_s = tick_s
        self._counters = counters or self._read  # (rx, tx) bytes since boot
        self._clock = clock
        self._ticks: deque[float] = deque(maxlen=keep_ticks)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _read(self) -> tuple[int, int] | None:
        counters = psutil.net_io_counters(pernic=True).get(self.nic)
        return None if counters is None else (counters.bytes_recv, counters.bytes_sent)

    def tick(self, previous: tuple[float, tuple[int, int]] | None) -> tuple[float, tuple[int, int]] | None:
        """Read the counters once; record the busier direction's rate since `previous`; return this reading."""
        counters = self._counters()
        if counters is None:
            return None
        now = self._clock()
        if previous is not None and now > previous[0]:
            rate = max(max(0, counters[0] - previous[1][0]), max(0, counters[1] - previous[1][1])) / (now - previous[0])
            with self._lock:
                self._ticks.append(rate)
        return now, counters

    def take(self) -> list[float]:
        with self._lock:
            ticks = list(self._ticks)
            self._ticks.clear()
        return ticks

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"busy-meter-{self.nic}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        reading = self.tick(None)
        while not self._stop.wait(self.tick_s):
            reading = self.tick(reading)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)


# ---- the sampler ------------------------------------------------------------------------
@dataclass
class _Counters:
    time_s: float
    nic_bytes: dict[str, tuple[int, int]]  # name -> (rx, tx) bytes since boot


@dataclass
class ResourceSampler:
    """Samples this host with psutil; each `sample()` averages over the time since the previous one.

    `job_pids` names the job's processes on this host (the node's children), so that CPU
    used by co-located jobs can be told apart from the job's own. With `busy_tick_s`, the
    job NIC's busy share is measured too (a thread; `close()` ends it).
    """

    host: str
    job_address: str | None = None  # an address of the job's interface (its NIC is then `job_nic`)
    job_pids: Callable[[], Iterable[int]] = lambda: ()
    tc_refresh_s: float = 10.0  # shaping qdiscs are re-read this often
    busy_tick_s: float | None = None  # measure the job NIC's busy share with ticks this long; None: not measured
    _last: _Counters | None = None
    _processes: dict[int, psutil.Process] = field(default_factory=dict)
    _shaped: dict[str, tuple[float, float | None]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.job_nic = nic_for_address(self.job_address, psutil.net_if_addrs()) if self.job_address else None
        self._busy = LinkBusyMeter(self.job_nic, self.busy_tick_s) if self.busy_tick_s and self.job_nic else None
        if self._busy is not None:
            self._busy.start()
        psutil.cpu_percent(None)  # start the host-wide interval
        self._last = self._counters()

    def _counters(self) -> _Counters:
        counters = psutil.net_io_counters(pernic=True)
        return _Counters(time.monotonic(), {n: (c.bytes_recv, c.bytes_sent) for n, c in counters.items()})

    def _job_cpu_percent(self) -> float:
        """Sum over the job's processes, as a share of the whole host (0..100)."""
        total = 0.0
        alive: dict[int, psutil.Process] = {}
        for pid in self.job_pids():
            process = self._processes.get(pid)
            try:
                if process is None:
                    process = psutil.Process(pid)
                    process.cpu_percent(None)  # first call starts its interval
                else:
                    total += process.cpu_percent(None)
                alive[pid] = process
            except psutil.Error:
                continue
        self._processes = alive
        return total / max(1, psutil.cpu_count() or 1)

    def _shaped_rate(self, nic: str) -> float | None:
        now = time.monotonic()
        cached = self._shaped.get(nic)
        if cached is None or now - cached[0] > self.tc_refresh_s:
            cached = (now, shaped_rate_bytes_per_s(_tc_qdiscs(nic)))
            self._shaped[nic] = cached
        return cached[1]

    def sample(self) -> HostSample:
        previous = self._last
        current = self._counters()
        assert previous is not None
        interval = max(1e-6, current.time_s - previous.time_s)
        stats = psutil.net_if_stats()
        ticks = self._busy.take() if self._busy is not None else []
        nics = []
        for name, (rx, tx) in sorted(current.nic_bytes.items()):
            rx0, tx0 = previous.nic_bytes.get(name, (rx, tx))
            speed = stats[name].speed if name in stats else 0
            link = link_bytes_per_s(speed, self._shaped_rate(name))
            busy = busy_share(ticks, link) if name == self.job_nic and ticks and link else None
            nics.append(NicSample(name, max(0, rx - rx0) / interval, max(0, tx - tx0) / interval, link, busy))
        self._last = current
        memory = psutil.virtual_memory()
        return HostSample(
            host=self.host,
            time_s=time.time(),
            interval_s=interval,
            cpu_count=psutil.cpu_count() or 1,
            cpu_percent=psutil.cpu_percent(None),
            job_cpu_percent=self._job_cpu_percent(),
            memory_percent=memory.percent,
            memory_available_bytes=int(memory.available),
            nics=tuple(nics),
            job_nic=self.job_nic,
        )

    def close(self) -> None:
        """End the busy-share thread, if any."""
        if self._busy is not None:
            self._busy.stop()
