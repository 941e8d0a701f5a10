"""The ``local`` fleet provider: real local processes in emulated spot zones.

Each node of a stage is a real process (``spec.command``, its own process group) in
an emulated zone. A ``PreemptionInjector`` replays the capacity of each zone with
time compression; when the node's zone loses capacity the node gets the cloud's notice
(signal and/or its own metadata endpoint) and is SIGKILLed after the grace window.
The provider then relaunches the node group in another zone with capacity (the lost
Where the node group runs (which zone, spot or on-demand, or waiting) is decided by the
stage's fleet policy (``StageSpec.policy``, from fleet/policies/registry.py) through
:class:`fleet.providers.decisions.PolicyDriver` -- the same object ``fleet-sim``
evaluates -- at every launch and, while a group runs, whenever the policy asked to be
asked again; a voluntary move sends the group a notice (emergency save) and relaunches
it at the new place. Every training event (tailed from the node's JSONL events file)
and every provider event goes to ``on_event``.

The policy sees only what this controller observed: the market's past before the
attempt (prior history), then the capacity of every candidate zone probed at each poll
(the emulator lets the local controller try every zone each poll, which is what
``fleet-sim`` assumes too), never the replay schedule's future. Its restart time R
(``JobSpec.restart_hours``) is the priors' refined by this attempt's measured launch ->
ready times (``restart_estimate``: emulated allocation + preparation + the process'
start, all billed), the same R the training process is told.

Compressed time stays inside this provider: ``StageSpec`` durations and priors, the
``NodeSession`` times and the events it reports are MARKET (emulated) seconds
(:class:`fleet.providers.local.clock.MarketClock`, anchored at
``LocalFleetConfig.market_clock_start_unix``); the processes, the injector and the poll
loop run on the wall clock, one wall second standing for ``time_scale.factor`` emulated
seconds.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from checkpointing import runtime_env as rt
from checkpointing.events import Event
from fleet.contract import (
    session_cost_usd,
    training_env,
    training_stats,
)
from fleet.emulation.injector import CapacitySchedule, PreemptionInjector, TimeScale
from fleet.market.prices import PriceBook
from fleet.providers.attempt import AttemptRecord
from fleet.providers.base import (
    AttemptFailed,
    FleetProvider,
    NodeSession,
    StageResult,
    StageSpec,
    attempt_budget_error,
)
from fleet.providers.decisions import (
    FALLBACK_PRICE_ACCELERATOR,
    Decision,
    Launch,
    PolicyDriver,
    Progress,
    missing_price_error,
)
from fleet.providers.events import EventTail, provider_event
from fleet.providers.local.clock import MarketClock
from fleet.providers.local.node_process import NodeProcess
from fleet.providers.stall import ProgressWatch, check_stall_startup, check_stall_timeout
from fleet.providers.terminate import check_terminate_grace, stop_summary, terminate_grace_seconds


@dataclass
class LocalFleetConfig:
    """How the emulated fleet behaves. Durations are WALL seconds unless stated."""

    schedule: CapacitySchedule | None = None  # None: synthetic market (n_zones, seed)
    n_zones: int = 3
    seed: int = 0
    market_hours: float = 48.0  # synthetic market length (trace hours; replay wraps)
    time_scale: TimeScale = field(default_factory=TimeScale)
    # unix time the run's market clock started (the Dagster run's start): reported times
    # are anchor + (wall - anchor) x time_scale.factor; None: each attempt's own start
    market_clock_start_unix: float | None = None
    cloud: str = "aws"  # notice protocol: aws | gcp | azure | signal
    delivery: tuple[str, ...] | None = None  # default: the cloud's (see injector)
    grace_seconds: float | None = None  # default: cloud window x grace_scale
    grace_scale: float = 0.05  # AWS 120 s -> 6 s, GCP/Azure 30 s -> 1.5 s
    min_uptime_seconds: float = 0.0  # see PreemptionInjector
    notice_poll_seconds: float | None = 0.2  # SPOTFLEET_NOTICE_POLL_SECONDS for endpoint pollers
    allocation_seconds: float = 0.2  # emulated VM allocation before the process starts
    preparation_seconds: float = 0.3  # emulated setup (image, data) before the process
    policy: str | None = None  # registry name overriding StageSpec.policy (None: the spec's)
    prior_history_hours: float = 24.0 * 30  # market past the policy starts from (emulated h)
    prices: PriceBook = field(default_factory=PriceBook.default)  # spot per zone, OD per region
    instance_type: str = "p3.2xlarge"  # used when StageSpec.instance_type is None
    workdir: Path | None = None  # logs, events, stats; default: a temporary directory
    max_capacity_wait_seconds: float = 120.0  # no capacity anywhere this long -> AttemptFailed
    max_failures: int = 0  # non-preemption crashes tolerated per attempt
    #: where on-demand runs; None: where the simulator runs it (the checkpoint's region once
    #: something is saved, else the cheapest on-demand region of ``prices``); a stage with
    #: use_spot=False runs in the first candidate zone
    on_demand_zone: str | None = None
    poll_seconds: float = 0.05
    extra_env: dict[str, str] = field(default_factory=dict)

    def price_per_hour(self, instance_type: str, zone: str, region: str, spot: bool,
                       trace_seconds: float | None = None) -> float:
        """What a node launched now is billed, $/h: spot = the zone's per-tick price at
        trace time ``trace_seconds`` when the schedule's file carries one (SkyNomad
        ``prices``, what ``fleet-sim`` bills), else ``prices``; on-demand from ``prices``
        (the files' ``price_info`` once ``with_file_prices`` added them). A session keeps
        the price of the tick it was launched in."""
        if spot and trace_seconds is not None and self.schedule is not None \
                and zone in self.schedule.traces:
            p = self.schedule.spot_price(zone, trace_seconds)
            if p is not None:
                return p
        return (self.prices.spot_price(instance_type, zone) if spot
                else self.prices.on_demand_price(instance_type, region))

    def with_file_prices(self) -> LocalFleetConfig:
        """When the schedule's trace files carry prices (SkyNomad ``price_info``): ``prices``
        plus theirs (``PriceBook.with_traces``) and ``instance_type`` = the files' machine
        type (``trace_instance_type``, e.g. a3-highgpu-8g), so the fleet bills what the
        files say instead of the V100 fallback. Unchanged otherwise."""
        from fleet.stats.preemption import priced_instance_type

        if self.schedule is None:
            return self
        traces = list(self.schedule.traces.values())
        itype = priced_instance_type(traces)
        if itype is None:
            return self
        return replace(self, prices=self.prices.with_traces(traces), instance_type=itype)


@dataclass(kw_only=True)
class _Node(NodeProcess):
    """A node of a single-process node group (``rank`` within the group)."""

    rank: int
    state_sha256: str | None = None
    # the progress watchdog (fleet/providers/stall.py): its events' times and progress rate
    watch: ProgressWatch = field(default_factory=ProgressWatch)
    emergency_saving: bool = False  # an emergency save started and not yet ended
    stall: str | None = None  # why the watchdog killed it
    # an operator's Terminate (fleet/providers/terminate.py)
    emergency_step: int | None = None  # step of its latest committed emergency save
    save_failed: str | None = None  # why its latest emergency save was not made
    stop_killed: bool = False  # killed by the Terminate (not stopped by itself)


def notice_window_seconds(market: Any = None) -> float:
    """The preemption-notice window (wall s) the local fleet of ``market`` (a MarketConfig
    or its dict; None: the defaults) gives a node: ``grace_seconds``, else the cloud's window
    x ``LocalFleetConfig.grace_scale`` (what ``local_provider_from_options`` builds)."""
    from fleet.emulation.injector import CLOUD_GRACE_SECONDS
    from fleet.market.config import MarketConfig

    m = market if isinstance(market, MarketConfig) else MarketConfig.model_validate(market or {})
    if m.grace_seconds is not None:
        return float(m.grace_seconds)
    return CLOUD_GRACE_SECONDS.get(m.cloud, 120.0) * LocalFleetConfig.grace_scale


def local_provider_from_options(options: dict[str, Any]) -> LocalFleetProvider:
    """The local provider from the JSON-able options the ``train_<stage>`` asset sends
    (``market``: a MarketConfig dict, ``workdir``, ``extra_env``,
    ``market_clock_start_unix``, ``market_cache_dir``: where the run's synthetic market is
    kept, see ``MarketConfig.traces``; see fleet/providers/registry.py)."""
    from fleet.market.config import MarketConfig

    m = MarketConfig.model_validate(options.get("market") or {})
    # replay the market's future from where the history ends, advanced by the wall time
    # since the Dagster run started (a retry or a later stage sees a later market); the
    # same anchor makes the reported session/event times one market timeline
    start = float(options.get("market_clock_start_unix") or time.time())
    scale = TimeScale(wall_seconds_per_trace_hour=m.wall_seconds_per_market_hour)
    offset = m.history_seconds + max(0.0, time.time() - start) * scale.factor
    cfg = LocalFleetConfig(
        schedule=CapacitySchedule(m.traces("all", cache_dir=options.get("market_cache_dir")),
                                  offset_seconds=offset),
        time_scale=scale, market_clock_start_unix=start,
        cloud=m.cloud, grace_seconds=m.grace_seconds, prices=m.price_book(),
        workdir=Path(options["workdir"]) if options.get("workdir") else None,
        extra_env=dict(options.get("extra_env") or {}))
    return LocalFleetProvider(cfg.with_file_prices())


class LocalFleetProvider(FleetProvider):
    """Run stages as local processes in emulated zones, surviving injected preemptions."""

    name = "local"

    def __init__(self, config: LocalFleetConfig | None = None):
        self.config = config or LocalFleetConfig()
        self._sessions: list[NodeSession] = []
        self._runs: dict[str, _StageRun] = {}
        self._lock = threading.Lock()

    def schedule(self) -> CapacitySchedule:
        cfg = self.config
        if cfg.schedule is None:
            cfg.schedule = CapacitySchedule.synthetic(cfg.n_zones, cfg.market_hours, cfg.seed)
        return cfg.schedule

    def run_stage(self, spec: StageSpec, attempt: int = 1,
                  on_event: Callable[[Event], None] | None = None) -> StageResult:
        if spec.num_nodes > 1:  # elastic data-parallel stage (docs/elastic.md)
            from fleet.providers.local.multinode import ElasticStageRun

            run = ElasticStageRun(self, spec, attempt, on_event)
        else:
            run = _StageRun(self, spec, attempt, on_event)
        with self._lock:
            self._runs[spec.name] = run
        try:
            return run.execute()
        finally:
            with self._lock:
                self._sessions.extend(run.sessions)
                self._runs.pop(spec.name, None)

    def cancel(self, stage: str) -> None:
        with self._lock:
            run = self._runs.get(stage)
        if run is not None:
            run.cancel()

    def terminate(self, stage: str) -> None:
        """An operator's Terminate: each running node of the stage gets a preemption notice
        now (``PreemptionInjector.preempt_now``: the same signal / metadata endpoint a
        preemption uses), makes its emergency save and exits; one still running after the
        stage's ``terminate_grace_seconds`` is SIGKILLed. No relaunch; the sessions are
        recorded ``cancelled`` and ``run_stage`` raises ``AttemptFailed`` saying what each
        node saved. Multi-node (elastic) stages stop the same way as a group: every node gets
        the notice, the group leaves at one agreed step and rank 0 writes the emergency
        checkpoint (``ElasticStageRun.request_stop``)."""
        with self._lock:
            run = self._runs.get(stage)
        if run is None:
            return
        stop = getattr(run, "request_stop", None)
        if stop is None:
            run.cancel()
        else:
            stop()

    def preempt_now(self, stage: str, node_id: str, grace_seconds: float | None = None) -> bool:
        """Fault injection: deliver a preemption notice to one node of a running stage now.

        The node is SIGKILLed after ``grace_seconds`` (default: the cloud's grace, seconds)
        exactly as for a preemption replayed from the trace, and the stage relaunches.
        Returns False (and does nothing) when the stage is not running or the node is not
        a running node of it. To lose the whole attempt instead, call ``cancel(stage)``.
        """
        with self._lock:
            run = self._runs.get(stage)
        injector = getattr(run, "injector", None)
        if injector is None:
            return False
        try:
            injector.preempt_now(node_id, grace_seconds)
        except ValueError:  # the node already ended or was never under this stage's injector
            return False
        return True

    def sessions(self) -> Iterator[NodeSession]:
        with self._lock:
            return iter(list(self._sessions))


class _StageRun(AttemptRecord):
    """One attempt of one stage on the local fleet."""

    def __init__(self, provider: LocalFleetProvider, spec: StageSpec, attempt: int,
                 on_event: Callable[[Event], None] | None):
        super().__init__(spec, attempt, on_event)
        self.provider = provider
        self.cfg = provider.config
        self._cancelled = threading.Event()
        #: set by cancel() and request_stop(): launch nothing more, end the waits
        self._halt = threading.Event()
        self._stop_at: float | None = None  # when a graceful stop (Terminate) was asked, wall s
        self._stop_deadline: float | None = None  # when its grace ends for the running group
        self._stop_grace: float | None = None
        self._stop_lines: list[str] = []  # what each node saved (the AttemptFailed message)
        self._injector_msgs: queue.Queue[tuple[str, str, float | None]] = queue.Queue()
        self._nodes: list[_Node] = []
        self._progress: dict[str, Any] = {}
        #: stalls (market s) of this attempt's committed periodic / insurance saves
        self._stalls: list[float] = []
        self._tmp: str | None = None
        self.injector: PreemptionInjector | None = None  # set by execute()
        self.driver: PolicyDriver | None = None  # set by execute() (None: on-demand only)
        self._started = 0.0
        self._decision: Decision | None = None
        self._last_decision_key: object = ()
        self._last_stats: object = None
        self._moving = False
        self._move_to: Launch | None = None
        self.clock = MarketClock.starting(self.cfg.market_clock_start_unix, self.cfg.time_scale.factor)

    def _emit(self, event: Event) -> None:
        """Events leave the provider in market time (``MarketClock.event``)."""
        super()._emit(self.clock.event(event))

    def cancel(self) -> None:
        self._cancelled.set()
        self._halt.set()

    def request_stop(self) -> None:
        """A graceful stop (an operator's Terminate); idempotent. A grace of 0 cancels."""
        if self._stop_at is not None:
            return
        if self.spec.terminate_grace_seconds == 0:
            self.cancel()
            return
        self._stop_at = time.time()
        self._halt.set()

    def _cancelled_error(self) -> AttemptFailed:
        how = (f" (Terminate: each node was asked to save, grace {self._stop_grace:g} s)"
               if self._stop_grace is not None else "")
        lines = "; ".join(self._stop_lines)
        return AttemptFailed(f"stage {self.spec.name!r} was cancelled{how}" + (f": {lines}" if lines else ""))

    # -- setup ----------------------------------------------------------------------------
    def _workdir(self) -> Path:
        base = self.cfg.workdir
        if base is None:
            self._tmp = tempfile.mkdtemp(prefix="spotfleet-local-")
            base = Path(self._tmp)
        d = Path(base) / self.spec.name / f"attempt-{self.attempt}"
        (d / "events").mkdir(parents=True, exist_ok=True)
        (d / "logs").mkdir(parents=True, exist_ok=True)
        return d

    def _candidate_zones(self, schedule: CapacitySchedule) -> list[str]:
        if not self.spec.zones:
            return schedule.zones
        unknown = [z for z in self.spec.zones if z not in schedule.traces]
        if unknown:
            raise ValueError(f"StageSpec.zones has {unknown} which the emulated market does not "
                             f"have; use a subset of {schedule.zones} or leave zones empty")
        return list(self.spec.zones)

    def _validate(self) -> None:
        if not self.spec.command:
            raise ValueError("StageSpec.command is empty; give the training argv, "
                             "e.g. ['python', 'examples/train_example.py', '--steps', '200']")
        if self.spec.num_nodes < 1:
            raise ValueError(f"StageSpec.num_nodes={self.spec.num_nodes} must be >= 1")
        exe = self.spec.command[0]
        if shutil.which(exe) is None and not Path(exe).exists():
            raise ValueError(f"StageSpec.command[0]={exe!r} is not an executable on PATH")
        check_stall_timeout(self.spec.stall_timeout_seconds, "StageSpec.stall_timeout_seconds")
        check_stall_startup(self.spec.stall_startup_seconds, "StageSpec.stall_startup_seconds")
        check_terminate_grace(self.spec.terminate_grace_seconds, "StageSpec.terminate_grace_seconds")

    # -- statistics for the training process (market seconds; fleet/contract.py) -----------
    def _market(self, wall_seconds: float) -> float:
        """Wall seconds -> market (emulated) seconds."""
        return self.cfg.time_scale.to_trace(wall_seconds)

    def running_starts(self) -> list[float]:
        """launch -> ready (market s) of the running group's nodes, for ``restart_estimate``
        (``AttemptRecord``'s, shared with the SkyPilot provider): a node that started is
        measured at once, so the policy's next re-ask, where a move is decided, knows it."""
        recorded = {s.node_id for s in self.sessions}
        return [self._market(max(0.0, n.ready_at - n.launched_at)) for n in self._nodes
                if n.node_id not in recorded and n.ready_at is not None]

    def _write_stats(self, path: Path, zone: str | None, spot: bool = True) -> None:
        mttp, restart = self.mttp_estimate(zone, spot), self.restart_estimate()
        interval = self._decision.interval_seconds if self._decision is not None else None
        interval = interval or self.spec.priors.interval_seconds
        stats = training_stats(mttp, restart, interval, 1.0 / self.cfg.time_scale.factor)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(stats), encoding="utf-8")
        os.replace(tmp, path)
        key = (mttp, restart, interval)
        if key != self._last_stats:
            self._last_stats = key
            self._emit(provider_event("stats", zone=zone, mttp_seconds=mttp, restart_seconds=restart,
                                      interval_seconds=interval))

    def _progress_now(self) -> Progress:
        p = self._progress
        steps = [n.last_checkpoint_step for n in self._nodes if n.last_checkpoint_step is not None]
        try:
            total = int(p["total_steps"])
        except (KeyError, TypeError, ValueError):
            total = None
        try:
            step_s = self._market(float(p["mean_step_seconds"]))
        except (KeyError, TypeError, ValueError):
            step_s = None
        step = int(p.get("step") or 0) if isinstance(p.get("step"), (int, float)) else 0
        committed = max(steps) if steps else 0
        return Progress(total_steps=total, step=max(step, committed), committed_step=committed,
                        step_seconds=step_s or None)

    # -- the fleet policy -------------------------------------------------------------------
    def _driver(self, schedule: CapacitySchedule, zones: list[str]) -> PolicyDriver:
        """The policy driver; on-demand runs in ``cfg.on_demand_zone`` when set, else where
        the simulator runs it (``PolicyDriver.on_demand_zone_now``), priced per region by
        ``cfg.prices`` as the sessions are billed."""
        gaps = sorted({schedule.traces[z].gap_seconds for z in zones})
        gap = gaps[0]
        n = max(1, int(self.cfg.prior_history_hours * 3600.0 / gap))
        prior = np.stack([schedule.past(z, 0.0, n) for z in zones])
        regions = [schedule.region_of(z) for z in zones]
        itype = self.spec.instance_type or self.cfg.instance_type
        od_prices: dict[str, float] = {}
        for z, r in zip(zones, regions, strict=True):
            try:
                od_prices[z] = self.cfg.prices.on_demand_price(itype, r)
            except KeyError:  # not priced here: the priors' flat price (the driver's default)
                continue
        return PolicyDriver(self.cfg.policy or self.spec.policy, zones, priors=self.spec.priors,
                            deadline_seconds=self.spec.deadline_seconds, gap_seconds=gap,
                            prior_history=prior if prior.shape[1] else None,
                            on_demand_zone=self.cfg.on_demand_zone, regions=regions,
                            on_demand_prices=od_prices or None, accelerator=self.spec.accelerator,
                            on_demand_allowed=self.spec.on_demand_allowed)

    def _decide(self, driver: PolicyDriver, location: str | None) -> Launch | None:
        """Ask the policy now and try its launches in order (each spot zone is a probe of
        the emulated market NOW; a failed one costs the policy's probe time)."""
        now = time.time()
        t = self._market(now - self._started)
        # R as this fleet charges it: the priors refined by every launch -> ready measured
        # so far (market s, billed), the same R the training process is told
        driver.restart_seconds = self.restart_estimate()
        d = driver.decide(t, self._progress_now(), location)
        self._decision = d
        up = set(self.injector.up_zones(now))
        tgt, failed = driver.try_launch(t, d, lambda z: z in up, location)
        if failed:
            probe_s = driver.job_spec(self._progress_now()).probe_seconds
            self._halt.wait(self.cfg.time_scale.to_wall(failed * probe_s))
        key = (None if tgt is None else (tgt.zone, tgt.spot), location)
        if key == self._last_decision_key:
            return tgt  # unchanged: no event
        self._last_decision_key = key
        self._emit(provider_event(
            "decision", policy=driver.name, policy_class=type(driver.policy).__qualname__,
            target=("idle" if tgt is None else tgt.zone if tgt.spot else "on-demand"),
            spot=None if tgt is None else tgt.spot, market_seconds=round(t, 3), tick=d.tick,
            interval_seconds=d.interval_seconds, location=location, failed_probes=failed,
            restart_seconds=round(driver.restart_now(), 3),
            replay_seconds=round(self.provider.schedule().offset_seconds + t, 3),
            tries=[("idle" if x is None else x.zone if x.spot else "on-demand") for x in d.tries]))
        return tgt

    # -- main loop ------------------------------------------------------------------------
    def execute(self) -> StageResult:
        self._validate()
        schedule = self.provider.schedule()
        zones = self._candidate_zones(schedule)
        od_zone = self.cfg.on_demand_zone or zones[0]
        workdir = self._workdir()
        stats_path = workdir / "stats.json"
        injector = PreemptionInjector(
            schedule, self.cfg.time_scale, cloud=self.cfg.cloud, delivery=self.cfg.delivery,
            grace_seconds=self.cfg.grace_seconds, grace_scale=self.cfg.grace_scale,
            min_uptime_seconds=self.cfg.min_uptime_seconds, poll_seconds=self.cfg.poll_seconds,
            on_notice=lambda nid, dl: self._injector_msgs.put(("notice", nid, dl)),
            on_kill=lambda nid: self._injector_msgs.put(("kill", nid, None)))
        self.injector = injector
        started = time.time()
        self._started = started
        injector.start(started)
        driver = self._driver(schedule, zones) if self.spec.use_spot else None
        self.driver = driver
        prev_zone: str | None = None
        relaunches = failures = 0
        waiting_since: float | None = None
        group_index = 0
        try:
            while True:
                if self._halt.is_set():
                    self._emit(provider_event("cancelled", stage=self.spec.name))
                    raise self._cancelled_error()
                now = time.time()
                if driver is None:
                    launch = Launch(od_zone, spot=False, reason="StageSpec.use_spot is False")
                elif self._move_to is not None:  # the policy already said where to go
                    launch, self._move_to = self._move_to, None
                else:
                    launch = self._decide(driver, None)
                if launch is None:
                    if waiting_since is None:
                        waiting_since = now
                        self._emit(provider_event("waiting", up=injector.up_zones(now), blocked=[]))
                    elif now - waiting_since > self.cfg.max_capacity_wait_seconds:
                        raise AttemptFailed(
                            f"stage {self.spec.name!r}: the fleet policy found no place to run in "
                            f"{zones} for {now - waiting_since:.0f} wall s (limit "
                            f"max_capacity_wait_seconds={self.cfg.max_capacity_wait_seconds:g}); "
                            "retry later or allow on-demand fallback")
                    time.sleep(self.cfg.poll_seconds)
                    continue
                waiting_since = None
                if prev_zone is not None and self.spec.budget_left_usd is not None:
                    self._check_budget(launch, schedule)
                if prev_zone is not None:
                    self._emit(provider_event("relaunch", from_zone=prev_zone, to_zone=launch.zone,
                                              spot=launch.spot, reason=launch.reason,
                                              relaunch=relaunches))
                self._write_stats(stats_path, launch.zone, launch.spot)
                self._moving = False
                outcome = self._run_group(launch, group_index, relaunches, schedule, workdir,
                                          stats_path)
                group_index += 1
                if outcome == "completed":
                    return self._result(True)
                if outcome == "cancelled":
                    self._emit(provider_event("cancelled", stage=self.spec.name,
                                              grace_seconds=self._stop_grace, nodes=self._stop_lines))
                    raise self._cancelled_error()
                if outcome == "preempted":
                    relaunches += 1
                    if driver is not None:
                        driver.preempted(self._market(time.time() - started), launch.zone)
                    if relaunches > self.spec.max_relaunches:
                        raise AttemptFailed(
                            f"stage {self.spec.name!r}: {relaunches} preemptions exceed "
                            f"StageSpec.max_relaunches={self.spec.max_relaunches}; the attempt "
                            "resumes from its latest checkpoint when retried")
                elif outcome == "stalled":  # killed by the watchdog: relaunched like a preemption
                    relaunches += 1
                    if relaunches > self.spec.max_relaunches:
                        raise AttemptFailed(
                            f"stage {self.spec.name!r}: {relaunches} relaunches (the last after a "
                            f"stalled node) exceed StageSpec.max_relaunches={self.spec.max_relaunches}; "
                            "the attempt resumes from its latest checkpoint when retried")
                elif outcome != "moved":
                    failures += 1
                    if failures > self.cfg.max_failures or self.spec.num_nodes > 1:
                        raise AttemptFailed(self._failure_message())
                prev_zone = launch.zone
        finally:
            self._kill_all()
            injector.stop()

    def _check_budget(self, launch: Launch, schedule: CapacitySchedule) -> None:
        """Raise AttemptFailed when relaunching would spend past ``spec.budget_left_usd``."""
        region = schedule.region_of(launch.zone) if launch.zone in schedule.traces else launch.zone
        itype = self.spec.instance_type or self.cfg.instance_type
        price = self.cfg.price_per_hour(itype, launch.zone, region, launch.spot,
                                        self.injector.trace_time())
        msg = attempt_budget_error(self.spec, self.sessions, price, restart_seconds=self.restart_estimate())
        if msg is not None:
            raise AttemptFailed(msg)

    def _failure_message(self) -> str:
        node = next((n for n in reversed(self._nodes) if n.exit_code not in (0, None)), None)
        if node is None:
            return f"stage {self.spec.name!r}: node group lost"
        tail = ""
        with contextlib.suppress(OSError):
            tail = node.log_path.read_text(encoding="utf-8", errors="replace")[-1500:]
        return (f"stage {self.spec.name!r}: node {node.node_id} in {node.zone} exited with code "
                f"{node.exit_code} without a preemption notice; log {node.log_path}:\n{tail}")

    def _result(self, completed: bool) -> StageResult:
        final = None
        sha = None
        for n in self._nodes:
            if n.exit_event is not None and n.exit_event.data.get("reason") == "completed":
                final = n.exit_event.data.get("step", n.last_step)
                sha = n.exit_event.data.get("state_sha256", sha)
        factor = self.cfg.time_scale.factor
        cost = sum(session_cost_usd(s.price_per_hour, s.launched_at, s.ended_at) for s in self.sessions)
        preemptions = sum(1 for s in self.sessions if s.end_reason == "preempted")
        info = {
            "provider": "local",
            "preemptions": preemptions,
            "zones": [s.zone for s in self.sessions],
            "state_sha256": sha,
            "time_scale_factor": factor,
            "cost_usd": cost,  # market hours x price, like the statistics DB
            # R (market s) the policy was told at its last decision (None: no policy)
            "policy_restart_seconds": self.driver.restart_now() if self.driver is not None else None,
            "workdir": str(Path(self._nodes[0].log_path).parents[1]) if self._nodes else None,
        }
        self._emit(provider_event("completed", zone=self.sessions[-1].zone if self.sessions else None,
                                  final_step=final, preemptions=preemptions))
        return StageResult(stage=self.spec.name, attempt=self.attempt, completed=completed,
                           sessions=list(self.sessions), events=list(self.events),
                           final_step=final, info=info)

    # -- one node group -------------------------------------------------------------------
    def _node_env(self, node: _Node, sources: str, stats_path: Path, grace: float) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.cfg.extra_env)
        env.update(self.spec.env)
        env.update({
            rt.ENV_NODE_ID: node.node_id,
            rt.ENV_ZONE: node.zone,
            rt.ENV_CHECKPOINT_URI: self.spec.checkpoint_uri,
            rt.ENV_EVENTS_FILE: str(node.events_path),
            rt.ENV_NOTICE_SOURCES: sources,
            rt.ENV_GRACE_SECONDS: f"{grace:g}",
            rt.ENV_STATS_FILE: str(stats_path),
            "SPOTFLEET_NODE_RANK": str(node.rank),
            "SPOTFLEET_NUM_NODES": str(self.spec.num_nodes),
            "PYTHONUNBUFFERED": "1",
        })
        interval = self._decision.interval_seconds if self._decision is not None else None
        env.update(training_env(self.mttp_estimate(node.zone, node.spot),
                                self.restart_estimate(),
                                interval or self.spec.priors.interval_seconds,
                                self.checkpoint_estimate(self._stalls),
                                1.0 / self.cfg.time_scale.factor))
        if self.cfg.notice_poll_seconds is not None:
            env["SPOTFLEET_NOTICE_POLL_SECONDS"] = f"{self.cfg.notice_poll_seconds:g}"
        return env

    def _run_group(self, launch: Launch, group_index: int, relaunches: int,
                   schedule: CapacitySchedule, workdir: Path, stats_path: Path) -> str:
        region = schedule.region_of(launch.zone) if launch.zone in schedule.traces else launch.zone
        itype = self.spec.instance_type or self.cfg.instance_type
        if self.spec.instance_type is None and itype == "p3.2xlarge" \
                and self.spec.accelerator.upper() != FALLBACK_PRICE_ACCELERATOR:
            # the default instance type carries a V100: never bill another accelerator as one
            raise missing_price_error(self.spec.accelerator, "spot" if launch.spot else "on-demand")
        price = self.cfg.price_per_hour(itype, launch.zone, region, launch.spot,
                                        self.injector.trace_time())
        group: list[_Node] = []
        now = time.time()
        for rank in range(self.spec.num_nodes):
            nid = f"{self.spec.name}-a{self.attempt}-s{group_index}-n{rank}"
            ev = workdir / "events" / f"{nid}.jsonl"
            group.append(_Node(node_id=nid, rank=rank, zone=launch.zone, region=region,
                               spot=launch.spot, price=price, launched_at=now,
                               log_path=workdir / "logs" / f"{nid}.log", events_path=ev,
                               tail=EventTail(ev)))
        self._nodes.extend(group)
        for node in group:
            self._emit(provider_event("launch", node_id=node.node_id, zone=node.zone, region=region,
                                      spot=node.spot, price_per_hour=price, reason=launch.reason,
                                      relaunch=relaunches, rank=node.rank))
        # emulated allocation + preparation of the VM(s)
        if self._halt.wait(self.cfg.allocation_seconds + self.cfg.preparation_seconds):
            for node in group:
                node.ended_at = time.time()
                self._record(node, "cancelled")
            return "cancelled"
        try:
            for node in group:
                inj = self.injector.open_node(node.node_id, node.zone, spot=node.spot)
                env = self._node_env(node, inj.notice_sources, stats_path, self.injector.grace_seconds)
                # a warm fork server (no fresh python + torch import) when $SPOTFLEET_FORK_SERVER
                # names one, else Popen; either way its own process group, output to the log
                from fleet.providers.local.forkserver import spawn

                node.proc = spawn(self.spec.command, env, node.log_path)
                self.injector.attach(node.node_id, node.proc.pid)
        except OSError as exc:
            for node in group:
                self._kill(node)
            raise AttemptFailed(f"could not start {self.spec.command!r}: {exc}") from exc
        return self._watch(group)

    def _kill(self, node: _Node) -> None:
        if node.proc is not None and node.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(node.proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.proc.wait(timeout=5)

    def _kill_all(self, linger_seconds: float = 1.0) -> None:
        """Stop every process of the attempt; ones still tearing down get ``linger_seconds``."""
        end = time.time() + linger_seconds
        for node in self._nodes:
            if node.proc is not None and node.proc.poll() is None and node.exit_event is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    node.proc.wait(timeout=max(0.0, end - time.time()))
            self._kill(node)

    def _drain_injector(self, group: list[_Node]) -> None:
        by_id = {n.node_id: n for n in group}
        while True:
            try:
                kind, nid, deadline = self._injector_msgs.get_nowait()
            except queue.Empty:
                return
            node = by_id.get(nid)
            if node is None:
                continue
            if kind == "notice":
                inj = self.injector.nodes.get(nid)
                node.notice_at = inj.notice_at if inj is not None and inj.notice_at else time.time()
                self._emit(provider_event("notice_sent", node_id=nid, zone=node.zone,
                                          deadline_unix=deadline,
                                          grace_seconds=self.injector.grace_seconds,
                                          sources=inj.notice_sources if inj else None))

    def _absorb(self, node: _Node, event: Event) -> None:
        d = event.data
        step = d.get("step")
        node.watch.observe(event.kind, d, time.time())
        if event.kind == "save_started" and d.get("kind") == "emergency":
            node.emergency_saving = True
        elif event.kind in ("save_committed", "save_failed", "save_spilled") \
                and d.get("kind") == "emergency":
            node.emergency_saving = False
            if event.kind == "save_committed" and isinstance(step, int | float):
                node.emergency_step = int(step)
            elif event.kind == "save_failed":
                node.save_failed = str(d.get("reason") or "its emergency save failed")
        if event.kind == "start":
            node.ready_at = node.ready_at or event.time
            self.injector.mark_ready(node.node_id, event.time)
            r = d.get("resumed_from_step")
            node.first_step = int(r) if r is not None else 0
        elif event.kind == "restore" and step is not None:
            node.first_step = int(step)
        elif event.kind == "save_committed" and step is not None:
            node.last_checkpoint_step = int(step)
            stall = d.get("stall_seconds")
            if d.get("kind") in ("periodic", "insurance") and isinstance(stall, int | float):
                self._stalls.append(self._market(float(stall)))  # what C measures, market s
        elif event.kind == "progress" and node.rank == 0:
            self._progress = dict(d)
        elif event.kind == "exit":
            node.exit_event = event
            node.state_sha256 = d.get("state_sha256")
        if step is not None:
            node.last_step = max(int(step), node.last_step or 0)

    def _pump(self, group: list[_Node]) -> None:
        self._drain_injector(group)
        for node in group:
            for ev in node.tail.poll():
                self._absorb(node, ev)
                self._emit(ev)

    def _watch(self, group: list[_Node]) -> str:
        """Wait until every node of the group is done: its process ended, or it reported
        its ``exit`` event (then the node is released; the process' interpreter teardown
        may linger, and a preempted one is still SIGKILLed at its deadline)."""
        lost = False
        while True:
            self._pump(group)
            if self._cancelled.is_set():
                for node in group:
                    self._kill(node)
                self._finish(group, cancelled=True)
                return "cancelled"
            if self._stop_at is not None:  # Terminate: notice, wait for the saves, then kill
                outcome = self._graceful_stop(group)
                if outcome is not None:
                    return outcome
                time.sleep(self.cfg.poll_seconds)
                continue
            self._maybe_move(group)
            if self._stalled(group):  # hung: kill the group, relaunch as after a failure
                for node in group:
                    self._kill(node)
                time.sleep(self.cfg.poll_seconds)
                self._pump(group)
                return self._finish(group)
            pending = 0
            for node in group:
                if node.proc is None or node.ended_at is not None:
                    continue
                rc = node.proc.poll()
                if rc is not None:
                    node.exit_code = rc
                    node.ended_at = time.time()
                    self.injector.close_node(node.node_id)
                    if rc != 0 and not self._noticed(node):
                        lost = True
                elif node.exit_event is not None:
                    node.ended_at = node.exit_event.time
                    if node.exit_event.data.get("reason") == "error":
                        lost = True
                else:
                    pending += 1
            if lost:  # a node crashed: the group cannot go on
                for node in group:
                    self._kill(node)
            if pending == 0 or lost:
                time.sleep(self.cfg.poll_seconds)
                self._pump(group)
                return self._finish(group)
            time.sleep(self.cfg.poll_seconds)

    def _graceful_stop(self, group: list[_Node]) -> str | None:
        """One poll of an operator's Terminate (``request_stop``) for the running group.

        First poll: every running node gets a preemption notice with the stage's grace
        (``PreemptionInjector.preempt_now``: what a preemption sends, so the training process
        makes its emergency save and exits); a node that has not started training yet (no
        ``start`` event: nothing since its restore to save) is killed at once. Then: wait
        until every node has stopped or the grace has passed; the ones still running (hung,
        or a save slower than the grace) are SIGKILLed -- the injector kills them at the
        deadline too. A save torn by that kill never commits (its manifest is not
        written), so the latest checkpoint stays the previous one. The outcome once the group is
        finished: ``cancelled`` (recorded so, ``_stop_lines`` filled), or ``completed`` when
        every node had already finished its last step; None while it waits."""
        now = time.time()
        if self._stop_deadline is None:
            grace = terminate_grace_seconds(self.spec.terminate_grace_seconds, self.injector.grace_seconds)
            self._stop_grace = grace
            self._stop_deadline = now + grace
            for node in group:
                if node.proc is None or node.ended_at is not None or node.exit_event is not None \
                        or node.proc.poll() is not None:
                    continue
                if node.ready_at is None or grace <= 0:
                    node.stop_killed = True
                    self._kill(node)
                    continue
                inj = self.injector.nodes.get(node.node_id)
                if inj is not None and inj.state == "running":
                    with contextlib.suppress(ValueError):  # it ended meanwhile
                        self.injector.preempt_now(node.node_id, grace)
                # else: a preemption notice is already on its way; the deadline below holds too
            self._drain_injector(group)
            self._emit(provider_event("terminating", stage=self.spec.name, grace_seconds=grace,
                                      nodes=[n.node_id for n in group]))
        running = [n for n in group if n.proc is not None and n.ended_at is None
                   and n.exit_event is None and n.proc.poll() is None]
        if running and now < self._stop_deadline:
            return None
        for node in running:
            node.stop_killed = True
            self._kill(node)
        time.sleep(self.cfg.poll_seconds)
        self._pump(group)
        for node in group:
            if node.ended_at is None and node.exit_event is not None:
                node.ended_at = node.exit_event.time
        if group and all(n.exit_event is not None and n.exit_event.data.get("reason") == "completed"
                         for n in group):
            return self._finish(group)  # the last step was done before the Terminate: completed
        self._finish(group, cancelled=True)
        grace = self._stop_grace or 0.0
        for node in group:
            by_itself = not node.stop_killed and (
                node.exit_event is not None or (node.exit_code is not None and node.exit_code >= 0))
            saved = by_itself and node.last_checkpoint_step is not None and (
                node.emergency_step == node.last_checkpoint_step
                or node.last_checkpoint_step >= (node.last_step or 0))
            self._stop_lines.append(stop_summary(
                node.node_id, grace_seconds=grace, stopped_by_itself=by_itself,
                last_step=node.last_step, checkpoint_step=node.last_checkpoint_step,
                saved_at_stop=saved, save_failed=node.save_failed, started=node.ready_at is not None))
        return "cancelled"

    def _maybe_move(self, group: list[_Node]) -> None:
        """Ask the policy again while the group runs (its recheck time came, or a watched
        zone changed); a different target moves the group: notice (emergency save), then
        the next launch goes where the policy said."""
        driver = self.driver
        if driver is None or self._moving or self._decision is None:
            return
        if any(n.ready_at is None or n.notice_at is not None or n.ended_at is not None
               or n.exit_event is not None for n in group):
            return
        node = group[0]
        now = time.time()
        if node.spot and node.zone not in self.injector.up_zones(now):
            return  # its zone lost capacity: the preemption is on its way, not a move
        if self._market(now - self._started) < self._decision.recheck_at:
            return
        location = node.zone if node.spot else "on-demand"
        new = self._decide(driver, location)
        if new is not None and new.spot == node.spot and (new.zone == node.zone or not new.spot):
            return
        self._moving = True
        self._move_to = new
        self._emit(provider_event("moved", from_zone=node.zone, spot=new.spot if new else None,
                                  to_zone=(new.zone if new else "idle"),
                                  reason=new.reason if new else f"policy {driver.name}: idle"))
        for n in group:
            with contextlib.suppress(ValueError):
                self.injector.preempt_now(n.node_id)

    def _stalled(self, group: list[_Node]) -> bool:
        """The progress watchdog: a running node (ready, no notice, no emergency save in
        flight, process alive, no ``exit`` yet) with no training event for longer than its
        stall limit (``stall_limit_seconds``, wall s) is stalled; its reason is kept in
        ``node.stall``. True when any node of the group is."""
        now = time.time()
        stalled = False
        for node in group:
            if node.ready_at is None or node.ended_at is not None or node.exit_event is not None \
                    or node.emergency_saving or self._noticed(node) \
                    or node.proc is None or node.proc.poll() is not None:
                continue
            reason = node.watch.stalled(now, self.spec.stall_timeout_seconds,
                                        self.spec.stall_startup_seconds)
            if reason is not None:
                node.stall = reason
                stalled = True
        return stalled

    def _noticed(self, node: _Node) -> bool:
        """The node was told to go: seen by the provider, the injector, or the process."""
        if node.notice_at is None:
            inj = self.injector.nodes.get(node.node_id)
            if inj is not None and inj.notice_at is not None:
                node.notice_at = inj.notice_at
        if node.notice_at is not None:
            return True
        return (node.exit_code == rt.EXIT_PREEMPTED or (
            node.exit_event is not None and node.exit_event.data.get("reason") == "preempted"))

    def _finish(self, group: list[_Node], cancelled: bool = False) -> str:
        self._drain_injector(group)
        now = time.time()
        for node in group:
            if node.ended_at is None:
                node.ended_at = now
                if node.proc is not None:
                    node.exit_code = node.proc.poll()
                self.injector.close_node(node.node_id)
        if cancelled:
            outcome = "cancelled"
        elif any(n.stall is not None for n in group):
            outcome = "stalled"
        elif self._moving and not any(n.exit_event is not None and
                                      n.exit_event.data.get("reason") == "completed" for n in group):
            outcome = "moved"
        elif all(n.exit_code == 0 or (n.exit_event is not None
                                      and n.exit_event.data.get("reason") == "completed")
                 for n in group):  # a node killed while tearing down after its last step
            outcome = "completed"
        elif any(self._noticed(n) for n in group):
            outcome = "preempted"
        else:
            outcome = "failed"
        for node in group:
            reason = {"completed": "completed", "preempted": "preempted", "failed": "failed",
                      "cancelled": "cancelled", "moved": "cancelled", "stalled": "failed"}[outcome]
            if outcome == "stalled":
                self._record(node, "failed" if node.stall is not None else "cancelled")
                self._emit(provider_event(
                    "failed", node_id=node.node_id, zone=node.zone, exit_code=node.exit_code,
                    stalled=node.stall is not None,
                    reason=node.stall or "cancelled: another node of its group stalled",
                    last_step=node.last_step, last_checkpoint_step=node.last_checkpoint_step))
                continue
            if outcome == "failed" and node.exit_code == 0:
                reason = "cancelled"
            if outcome == "cancelled" and self._stop_at is not None and node.notice_at is not None \
                    and node.notice_at < self._stop_at:
                reason = "preempted"  # the market's notice came before the Terminate: its preemption
            self._record(node, reason)
            if outcome == "preempted":
                self._emit(provider_event("preempted", node_id=node.node_id, zone=node.zone,
                                          exit_code=node.exit_code,
                                          exit_reason=(node.exit_event.data.get("reason")
                                                       if node.exit_event else None),
                                          last_step=node.last_step,
                                          last_checkpoint_step=node.last_checkpoint_step))
            elif outcome == "failed" and (node.exit_code not in (0, None) or (
                    node.exit_event is not None and node.exit_event.data.get("reason") == "error")):
                # the node's own latest commit, and the checkpoint it restored (the run log's
                # "last checkpoint None" read as if nothing was saved when it had resumed one)
                self._emit(provider_event("failed", node_id=node.node_id, zone=node.zone,
                                          exit_code=node.exit_code, last_step=node.last_step,
                                          last_checkpoint_step=node.last_checkpoint_step,
                                          resumed_from_step=node.first_step))
        return outcome

    def _record(self, node: _Node, reason: str) -> None:
        """Keep the node's session, in market time (the node's own times are wall)."""
        self.sessions.append(self.clock.session(NodeSession(
            node_id=node.node_id, stage=self.spec.name, attempt=self.attempt, provider="local",
            cloud=self.cfg.cloud if self.cfg.cloud != "signal" else "local", region=node.region,
            zone=node.zone, instance_type=self.spec.instance_type or self.cfg.instance_type,
            spot=node.spot, price_per_hour=node.price, launched_at=node.launched_at,
            ready_at=node.ready_at, ended_at=node.ended_at, end_reason=reason,
            notice_at=node.notice_at, first_step=node.first_step, last_step=node.last_step,
            last_checkpoint_step=node.last_checkpoint_step,
            injected=(reason == "preempted" and self.injector is not None
                      and self.injector.injected(node.node_id)))))
