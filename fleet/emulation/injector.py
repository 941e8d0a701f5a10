"""Preemption injector for the local emulated fleet.

It replays spot capacity (real traces or the synthetic market) with TIME COMPRESSION
and preempts the local processes that run in a zone when that zone loses capacity:

1. the zone's capacity drops in the replayed trace (trace time, seconds);
2. the injector delivers the notice the way the emulated cloud does — a signal to
   the process group and/or the node's own metadata endpoint switching to that
   cloud's "preempted" answer (AWS IMDS ``spot/instance-action``, GCP ``preempted``,
   Azure Scheduled Events ``Preempt``) — with the cloud's grace window;
3. when the grace window ends it SIGKILLs the process group.

Time compression: ``TimeScale(wall_seconds_per_trace_hour=N)`` replays one trace hour
in N wall seconds. Grace windows are wall seconds: the cloud's window
(AWS 120 s, GCP 30 s, Azure 30 s) times ``grace_scale`` (default 1.0, i.e. real
windows), or an explicit ``grace_seconds``.

The capacity schedule is deterministic (the trace, or the synthetic market for a
seed); which wall instants the notices hit depends on when the processes run.
``preempt_now(node_id)`` preempts one node immediately (tests, chaos drills).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal, Protocol

import numpy as np

from fleet.market.traces import Trace, cut_to_common_length

Cloud = Literal["signal", "aws", "gcp", "azure"]

#: The cloud's notice window in (real) seconds.
CLOUD_GRACE_SECONDS: dict[str, float] = {"aws": 120.0, "gcp": 30.0, "azure": 30.0, "signal": 30.0}

#: How each cloud tells the VM by default: ``endpoint`` (metadata protocol) and/or
#: ``signal`` (SIGTERM to the processes, as an OS shutdown does). AWS and Azure
#: only change the metadata answer; GCP also starts an ACPI soft shutdown at
#: notice time, which the OS turns into SIGTERM.
CLOUD_DELIVERY: dict[str, tuple[str, ...]] = {
    "aws": ("endpoint",),
    "gcp": ("endpoint", "signal"),
    "azure": ("endpoint",),
    "signal": ("signal",),
}


@dataclass(frozen=True)
class TimeScale:
    """Replay speed: one trace hour lasts ``wall_seconds_per_trace_hour`` wall seconds."""

    wall_seconds_per_trace_hour: float = 10.0

    def __post_init__(self) -> None:
        if not self.wall_seconds_per_trace_hour > 0:
            raise ValueError(
                f"time scale wall_seconds_per_trace_hour={self.wall_seconds_per_trace_hour!r} "
                "must be > 0 (e.g. 10 replays one trace hour in 10 s)")

    @property
    def factor(self) -> float:
        """Trace seconds per wall second."""
        return 3600.0 / self.wall_seconds_per_trace_hour

    def to_wall(self, trace_seconds: float) -> float:
        return trace_seconds / self.factor

    def to_trace(self, wall_seconds: float) -> float:
        return wall_seconds * self.factor


#: how to keep one instance type, for both ways of starting the local fleet
INSTANCE_TYPE_FIX = ("keep one instance type: --instance-types TYPE (spotfleet local-fleet "
                     "run) or instance_types: [TYPE] in the pipeline's market: section")


def one_instance_type_per_zone(traces: Iterable[Trace], fix: str = INSTANCE_TYPE_FIX) -> None:
    """Refuse (``ValueError`` naming the zone, the types and ``fix``) traces with two
    entries in one zone.

    The local fleet runs a job on one instance type and names its nodes' places by zone:
    a folder with several instance types in one zone (the public aws-10-26-2022 has k80_1,
    k80_8, v100_1, v100_8 in each zone) must be filtered to one type, not replayed as if
    the job could move between a K80 and a V100 machine.
    """
    traces = list(traces)
    by_zone: dict[str, list[Trace]] = {}
    for tr in traces:
        by_zone.setdefault(tr.zone, []).append(tr)
    mixed = {z: ts for z, ts in by_zone.items() if len(ts) > 1}
    if not mixed:
        return
    zone, ts = next(iter(mixed.items()))
    labels = sorted({_type(t) for t in ts})
    choices = sorted({_type(t) for t in traces})
    raise ValueError(
        f"{len(mixed)} zone(s) have several traces, e.g. {zone}: instance types {labels} "
        f"(files {[t.source or t.zone for t in ts][:4]}); the local fleet replays one trace "
        f"per zone (a job runs on one instance type): {fix}; the types here: {choices}")


def _type(trace: Trace) -> str:
    return trace.instance_type or trace.accelerator


def one_instance_type(traces: Iterable[Trace], fix: str = INSTANCE_TYPE_FIX) -> None:
    """Refuse (``ValueError`` naming the type of each zone and ``fix``) traces whose zones
    carry different instance types, one per zone (e.g. k80_1 in us-east-1a, v100_1 in
    us-west-2b): the local fleet would replay them as one fleet of mixed hardware, a job
    moving between a K80 and a V100 machine. A filter that keeps one type passes."""
    traces = list(traces)
    types = sorted({_type(t) for t in traces})
    if len(types) <= 1:
        return
    per_zone = ", ".join(f"{t.zone}: {_type(t)}" for t in traces)
    raise ValueError(
        f"the zones carry {len(types)} different instance types {types} ({per_zone}); the "
        f"local fleet runs a job on one instance type, not on a fleet of mixed hardware: {fix}")


class CapacitySchedule:
    """Which zones have spot capacity at a trace time (seconds from the trace start).

    Built from ``Trace`` objects, one per zone, all of one instance type
    (``one_instance_type_per_zone``, ``one_instance_type``: a folder with several
    instance types in a zone, or a different type in different zones, is refused, naming
    the filter). Traces of
    different lengths are cut to the shortest with one warning (``cut_to_common_length``,
    the rule of ``Market``), so every zone's tick ``i`` is the same moment; the replay
    wraps around at that common length. A zone is up in a tick when at least
    ``trace.count`` instances are available.
    """

    def __init__(self, traces: Iterable[Trace], offset_seconds: float = 0.0):
        traces = list(traces)
        one_instance_type_per_zone(traces)
        one_instance_type(traces)
        self.traces: dict[str, Trace] = {
            tr.zone: tr for tr in cut_to_common_length(traces, "the local fleet's market")}
        if not self.traces:
            raise ValueError("a capacity schedule needs at least one zone trace")
        self.offset_seconds = float(offset_seconds)
        self._up = {z: tr.up() for z, tr in self.traces.items()}

    @property
    def zones(self) -> list[str]:
        return list(self.traces)

    def region_of(self, zone: str) -> str:
        return self._trace(zone).region

    def _trace(self, zone: str) -> Trace:
        try:
            return self.traces[zone]
        except KeyError:
            raise ValueError(f"zone {zone!r} is not in the capacity schedule; "
                             f"known zones: {sorted(self.traces)}") from None

    def _tick(self, zone: str, t: float) -> int:
        tr = self._trace(zone)
        return int((t + self.offset_seconds) // tr.gap_seconds) % tr.n_ticks

    def is_up(self, zone: str, t: float) -> bool:
        tick = self._tick(zone, t)
        return bool(self._up[zone][tick])

    def up_zones(self, t: float) -> list[str]:
        return [z for z in self.traces if self.is_up(z, t)]

    def spot_price(self, zone: str, t: float) -> float | None:
        """The zone's spot $/h in the tick of trace time ``t`` when its file carries
        per-tick prices (SkyNomad ``prices``, as the fleet simulator bills them), else None."""
        tr = self._trace(zone)
        if tr.spot_prices is None:
            return None
        return float(tr.spot_prices[self._tick(zone, t)])

    def next_change(self, zone: str, t: float) -> float | None:
        """Trace time of the next up/down flip of ``zone`` after ``t`` (None: never)."""
        tr = self._trace(zone)
        up = self._up[zone]
        i = self._tick(zone, t)
        rolled = np.concatenate([up[i + 1:], up[: i + 1]])
        flips = np.nonzero(rolled != up[i])[0]
        if flips.size == 0:
            return None
        tick_start = (t + self.offset_seconds) // tr.gap_seconds * tr.gap_seconds
        return tick_start - self.offset_seconds + (int(flips[0]) + 1) * tr.gap_seconds

    def past(self, zone: str, t: float, n_ticks: int) -> np.ndarray:
        """The zone's availability in the (at most) ``n_ticks`` ticks BEFORE trace time ``t``.

        Only ticks the replay has already been through (absolute tick >= 0 and < the
        tick of ``t``; a replay that wrapped has lived through the wrapped ticks): never
        the schedule's future. The live fleet policy's prior history.
        """
        tr = self._trace(zone)
        now = int((t + self.offset_seconds) // tr.gap_seconds)
        first = max(0, now - int(n_ticks))
        idx = np.arange(first, now) % tr.n_ticks
        return self._up[zone][idx].astype(bool)

    @classmethod
    def synthetic(cls, n_zones: int = 3, hours: float = 48.0, seed: int = 0) -> CapacitySchedule:
        """The embedded default: the synthetic market (fleet.market.synthetic) for a seed."""
        from fleet.market.synthetic import default_market_config, generate_market

        traces = generate_market(default_market_config(n_zones=n_zones), hours, seed)
        return cls(traces)

    @classmethod
    def rotating(cls, zones: Iterable[str], up_hours: float = 1.0, down_hours: float = 1.0,
                 accelerator: str = "L4", gap_seconds: float = 300.0) -> CapacitySchedule:
        """A deterministic drill market: zone k loses capacity during its own window.

        Zone k (0-based) goes down one tick before ``(k+1)*up_hours`` for ``down_hours``,
        in every cycle of ``len(zones) * up_hours`` hours (the last zone's window wraps to
        the cycle start), so the zones fail one after the other and a node that follows
        the rotation is preempted about once per ``up_hours``.
        """
        zones = list(zones)
        n = len(zones)
        per_hour = 3600.0 / gap_seconds
        cycle = round(n * up_hours * per_hour)
        traces = []
        for k, z in enumerate(zones):
            avail = np.ones(cycle, dtype=np.int32)
            start = round(k * up_hours * per_hour) + round(up_hours * per_hour) - 1
            for j in range(round(down_hours * per_hour)):
                avail[(start + j) % cycle] = 0
            traces.append(Trace(zone=z, accelerator=accelerator, count=1,
                                gap_seconds=gap_seconds, available=avail, source="rotating"))
        return cls(traces)


class NoticeChannel(Protocol):
    """One way a node hears about its preemption."""

    source: str  # entry for SPOTFLEET_NOTICE_SOURCES, e.g. "aws:http://127.0.0.1:4711"

    def deliver(self, deadline_unix: float) -> None: ...

    def close(self) -> None: ...


class SignalChannel:
    """SIGTERM (or another signal) to the node's process group at notice time."""

    def __init__(self, signame: str = "SIGTERM"):
        self.signum = getattr(signal, signame, None)
        if not isinstance(self.signum, signal.Signals):
            raise ValueError(f"notice signal {signame!r} is not a signal name; use e.g. SIGTERM")
        self.source = f"signal:{signame}"
        self.pgid: int | None = None

    def deliver(self, deadline_unix: float) -> None:
        if self.pgid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pgid, self.signum)

    def close(self) -> None:
        pass


class EndpointChannel:
    """The node's own metadata server (fleet.emulation.metadata_servers) for one cloud."""

    def __init__(self, cloud: str):
        from fleet.emulation import metadata_servers as ms

        classes = {"aws": "AwsImdsEmulator", "gcp": "GcpMetadataEmulator",
                   "azure": "AzureScheduledEventsEmulator"}
        if cloud not in classes:
            raise ValueError(f"no metadata endpoint for cloud {cloud!r}; use one of {sorted(classes)}")
        self.cloud = cloud
        self.server = getattr(ms, classes[cloud])()
        self.url = self.server.start()
        self.source = f"{cloud}:{self.url}"

    def deliver(self, deadline_unix: float) -> None:
        self.server.schedule_preemption(deadline_unix)

    def close(self) -> None:
        self.server.stop()


@dataclass
class InjectedNode:
    """A node the injector may preempt. Times are unix seconds (wall clock)."""

    node_id: str
    zone: str
    channels: list
    spot: bool = True
    pgid: int | None = None
    launched_at: float = field(default_factory=time.time)
    ready_at: float | None = None
    notice_at: float | None = None
    kill_at: float | None = None
    state: Literal["open", "running", "noticed", "killed", "closed"] = "open"
    loss_pending: bool = False  # the zone lost capacity while this node ran
    injected: bool = False  # its notice came from ``preempt_now`` (a fault injection), not the market

    @property
    def notice_sources(self) -> str:
        return ",".join(ch.source for ch in self.channels)


class PreemptionInjector:
    """Replays a capacity schedule against running nodes; notices, then SIGKILL.

    ``min_uptime_seconds`` (wall) keeps a node alive at least that long after it
    reported ready before a capacity loss is delivered to it, so every emulated session
    does some work (with strong time compression a relaunch can otherwise land just
    before its new zone's outage). A loss seen during that time is not forgotten: it is
    delivered as soon as the minimum uptime has passed (the cloud still wants the
    capacity back). Callbacks ``on_notice(node_id, deadline_unix)`` and
    ``on_kill(node_id)`` run on the injector thread.
    """

    def __init__(self, schedule: CapacitySchedule, time_scale: TimeScale | None = None,
                 cloud: Cloud = "aws", delivery: tuple[str, ...] | None = None,
                 grace_seconds: float | None = None, grace_scale: float = 1.0,
                 min_uptime_seconds: float = 0.0, poll_seconds: float = 0.05,
                 on_notice: Callable[[str, float], None] | None = None,
                 on_kill: Callable[[str], None] | None = None):
        if cloud not in CLOUD_DELIVERY:
            raise ValueError(f"cloud={cloud!r} unknown; use one of {sorted(CLOUD_DELIVERY)}")
        self.schedule = schedule
        self.time_scale = time_scale or TimeScale()
        self.cloud = cloud
        self.delivery = tuple(delivery) if delivery else CLOUD_DELIVERY[cloud]
        for d in self.delivery:
            if d not in ("endpoint", "signal"):
                raise ValueError(f"delivery {d!r} unknown; use 'endpoint' and/or 'signal'")
        if "endpoint" in self.delivery and cloud == "signal":
            raise ValueError("cloud='signal' has no metadata endpoint; use delivery=('signal',)")
        if grace_seconds is None:
            grace_seconds = CLOUD_GRACE_SECONDS[cloud] * grace_scale
        if grace_seconds < 0:
            raise ValueError(f"grace_seconds={grace_seconds!r} must be >= 0")
        self.grace_seconds = float(grace_seconds)
        self.min_uptime_seconds = float(min_uptime_seconds)
        self.poll_seconds = poll_seconds
        self.on_notice = on_notice
        self.on_kill = on_kill
        self.nodes: dict[str, InjectedNode] = {}
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.t0_wall: float | None = None

    # -- clock -------------------------------------------------------------------------
    def start(self, t0_wall: float | None = None) -> None:
        """Start replaying: trace time 0 is ``t0_wall`` (default: now)."""
        self.t0_wall = time.time() if t0_wall is None else t0_wall
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="preemption-injector", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self._lock:
            for node in self.nodes.values():
                self._close(node)

    def trace_time(self, wall: float | None = None) -> float:
        """Trace seconds elapsed at wall time ``wall`` (default now)."""
        if self.t0_wall is None:
            return 0.0
        return self.time_scale.to_trace((time.time() if wall is None else wall) - self.t0_wall)

    def up_zones(self, wall: float | None = None) -> list[str]:
        return self.schedule.up_zones(self.trace_time(wall))

    # -- nodes -------------------------------------------------------------------------
    def open_node(self, node_id: str, zone: str, spot: bool = True) -> InjectedNode:
        """Prepare a node's notice channels (start its metadata endpoint) before launch.

        The caller puts ``node.notice_sources`` into SPOTFLEET_NOTICE_SOURCES and then
        calls ``attach(node_id, pgid)`` once the process exists.
        """
        channels: list = []
        if spot:
            for d in self.delivery:
                channels.append(EndpointChannel(self.cloud) if d == "endpoint" else SignalChannel())
        if not channels:
            channels.append(SignalChannel())  # on-demand: only a stop signal (cancel)
        node = InjectedNode(node_id=node_id, zone=zone, channels=channels, spot=spot)
        with self._lock:
            self.nodes[node_id] = node
        return node

    def attach(self, node_id: str, pgid: int) -> None:
        with self._lock:
            node = self.nodes[node_id]
            node.pgid = pgid
            node.state = "running"
            for ch in node.channels:
                if isinstance(ch, SignalChannel):
                    ch.pgid = pgid

    def mark_ready(self, node_id: str, at: float | None = None) -> None:
        with self._lock:
            node = self.nodes.get(node_id)
            if node is not None and node.ready_at is None:
                node.ready_at = time.time() if at is None else at

    def close_node(self, node_id: str) -> None:
        """The process is gone: stop watching it and shut its endpoint down."""
        with self._lock:
            node = self.nodes.get(node_id)
            if node is not None:
                self._close(node)

    def preempt_now(self, node_id: str, grace_seconds: float | None = None) -> float:
        """Deliver a notice to ``node_id`` now; SIGKILL after the grace. Returns the deadline."""
        with self._lock:
            node = self.nodes.get(node_id)
            if node is None or node.state not in ("running",):
                raise ValueError(f"node {node_id!r} is not running under the injector")
            node.injected = True
            return self._notice(node, self.grace_seconds if grace_seconds is None else grace_seconds)

    def injected(self, node_id: str) -> bool:
        """Whether ``node_id``'s notice came from :meth:`preempt_now` (a fault injection)
        rather than from the capacity schedule (the market)."""
        with self._lock:
            node = self.nodes.get(node_id)
            return node is not None and node.injected

    # -- internals ---------------------------------------------------------------------
    def _close(self, node: InjectedNode) -> None:
        if node.state == "closed":
            return
        node.state = "closed"
        for ch in node.channels:
            with contextlib.suppress(Exception):
                ch.close()

    def _notice(self, node: InjectedNode, grace: float) -> float:
        now = time.time()
        deadline = now + grace
        node.notice_at = now
        node.kill_at = deadline
        node.state = "noticed"
        for ch in node.channels:
            ch.deliver(deadline)
        if self.on_notice is not None:
            self.on_notice(node.node_id, deadline)
        return deadline

    def _kill(self, node: InjectedNode) -> None:
        node.state = "killed"
        if node.pgid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(node.pgid, signal.SIGKILL)
        if self.on_kill is not None:
            self.on_kill(node.node_id)

    def _step(self) -> None:
        now = time.time()
        t = self.trace_time(now)
        with self._lock:
            for node in list(self.nodes.values()):
                if node.state == "running" and node.spot:
                    if node.zone in self.schedule.traces and not self.schedule.is_up(node.zone, t):
                        node.loss_pending = True
                    if node.loss_pending and (
                            self.min_uptime_seconds <= 0 or (
                                node.ready_at is not None
                                and now - node.ready_at >= self.min_uptime_seconds)):
                        self._notice(node, self.grace_seconds)
                elif node.state == "noticed" and node.kill_at is not None and now >= node.kill_at:
                    self._kill(node)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._step()
            self._stop.wait(self.poll_seconds)
