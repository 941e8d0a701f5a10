"""Elastic multi-node stages on the local fleet: K nodes over z emulated zones.

A stage with ``StageSpec.num_nodes = K > 1`` runs one node agent per slot
(``python -m checkpointing.elastic_run``: PyTorch's elastic agent, c10d rendezvous,
``--nnodes 1:K``), each a real process group in an emulated zone, all on 127.0.0.1.
This controller is the stage's stable backbone (the playbook's on-demand core): it hosts
the c10d rendezvous store, places nodes, watches them, and replaces the lost ones.

* **Placement.** Nodes are spread over the candidate zones that have capacity, at most
  ``max_per_zone`` per zone (default ``ceil(K / z)``: the planner's even spread), fewest
  nodes first, then the zones' preference order. ``on_demand_nodes`` of the K run
  on-demand (never preempted; the first zone of the list hosts them).
* **A zone is reclaimed** (the replayed market, ``preempt_now`` or ``reclaim_zone``):
  its nodes get the cloud's notice; their workers leave at the next step boundary and
  the survivors re-form without them (``checkpointing/elastic.py``). The controller does
  not restart anything: it only launches replacements where capacity and the per-zone
  cap allow (``regain_zone`` / the market bringing the zone back), which then join the
  group at the next rendezvous and receive the state from a peer.
* **All nodes lost**: new nodes are launched when capacity exists; nobody holds the
  state in memory any more, so the new group's rank 0 restores the latest complete
  checkpoint (written by rank 0 only).
* **Insurance against that loss.** Every node is told, at its launch, one failure
  unit's MTTP, R, the checkpoint-time prior and the number of independent units the
  group spans (its spot nodes' zones: nodes in one zone are reclaimed together), and the
  stage's statistics file, rewritten whenever a node is launched or ends (so observed
  preemptions reach the running rank 0). Rank 0's policy insures against losing every
  unit at once (``checkpointing.intervals.group_loss_mttp_seconds``; docs/elastic.md).

Nodes launched together wait for each other after their (slow) start before joining
the rendezvous (``SPOTFLEET_ELASTIC_GO_FILE``), so a batch forms one group instead of
growing one node at a time. The run works on the wall clock; the sessions and events it
reports are in market time (``MarketClock``, as the single-node run); prices $/h.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import queue
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from checkpointing import runtime_env as rt
from checkpointing.elastic_run import (
    DEFAULT_LAST_CALL_TIMEOUT,
    DEFAULT_RDZV_JOIN_SKEW,
    DEFAULT_RDZV_POLL_INTERVAL,
)
from checkpointing.elastic_state import DEFAULT_HANDOFF_ROOT
from checkpointing.events import Event
from checkpointing.intervals import equivalent_unit_mttp_seconds, group_loss_mttp_seconds
from checkpointing.outcome import EXIT_FINAL_SAVE_FAILED
from fleet.contract import session_cost_usd, training_env, training_stats
from fleet.emulation.injector import PreemptionInjector
from fleet.providers.attempt import AttemptRecord
from fleet.providers.base import (
    AttemptFailed,
    NodeSession,
    StageResult,
    StageSpec,
    attempt_budget_error,
)
from fleet.providers.local.clock import MarketClock
from fleet.providers.local.node_process import NodeProcess
from fleet.providers.membership import membership_changes
from fleet.providers.stall import ProgressWatch, check_stall_startup, check_stall_timeout
from fleet.providers.terminate import check_terminate_grace, stop_summary, terminate_grace_seconds

try:  # fleet/providers/events.py (shared by local and SkyPilot); older trees: local/
    from fleet.providers.events import EventTail, provider_event
except ImportError:  # pragma: no cover - depends on the tree's layout
    from fleet.providers.local.provider_events import EventTail, provider_event

log = logging.getLogger(__name__)

#: env var: file whose appearance lets a launch batch's agents join the rendezvous
ENV_GO_FILE = "SPOTFLEET_ELASTIC_GO_FILE"


@dataclass
class ElasticConfig:
    """How the local fleet runs an elastic stage. Durations in wall seconds."""

    min_nodes: int = 1  # the group trains while at least this many nodes are up
    max_per_zone: int | None = None  # default ceil(K / number of candidate zones)
    on_demand_nodes: int = 0  # of the K slots, how many run on-demand (the core)
    last_call_timeout: float = DEFAULT_LAST_CALL_TIMEOUT  # rendezvous: wait for more nodes (s)
    # a waiting agent re-reads the rendezvous this often (torch: 1 s; docs/elastic.md)
    rdzv_poll_interval: float = DEFAULT_RDZV_POLL_INTERVAL
    # upper bound of torch's random pre-join skew, s (torch: 0.3; None: torch's;
    # docs/elastic.md)
    rdzv_join_skew: float | None = DEFAULT_RDZV_JOIN_SKEW
    batch_wait_seconds: float = 60.0  # a launch batch waits this long for its slowest node
    completion_wait_seconds: float = 60.0  # after one node completes, wait for the others
    max_failures: int = 4  # node crashes (exit != 0 without a notice) tolerated
    handoff_root: str = DEFAULT_HANDOFF_ROOT


@dataclass(kw_only=True)
class _ElasticNode(NodeProcess):
    """A member of an elastic group: its slot, its launch batch and when it may start."""

    slot: int
    start_at: float
    batch: str
    end_reason: str | None = None
    stall: str | None = None  # why the group's progress watchdog killed it


@dataclass
class _Batch:
    name: str
    go_file: Path
    nodes: list[str] = field(default_factory=list)
    created: float = field(default_factory=time.time)
    released: bool = False


class ElasticStageRun(AttemptRecord):
    """One attempt of one elastic multi-node stage on the local fleet."""

    def __init__(self, provider: Any, spec: StageSpec, attempt: int,
                 on_event: Callable[[Event], None] | None, elastic: ElasticConfig | None = None):
        super().__init__(spec, attempt, on_event)
        self.provider = provider
        self.cfg = provider.config
        self.elastic = elastic or getattr(self.cfg, "elastic", None) or ElasticConfig()
        self.injector: PreemptionInjector | None = None
        self.run_id = f"{spec.name}-a{attempt}-{uuid.uuid4().hex[:8]}"
        self._cancelled = threading.Event()
        self._lock = threading.Lock()
        self._reclaimed: set[str] = set()
        self._nodes: list[_ElasticNode] = []
        self._batches: dict[str, _Batch] = {}
        self._serial = 0
        self._store = None
        self._tmp: str | None = None
        self._notices: queue.SimpleQueue[tuple[str, float]] = queue.SimpleQueue()
        self.preemptions = 0
        self.failures = 0
        self._stalls: list[float] = []  # market s of the periodic / insurance saves' stalls
        self._stats_path: Path | None = None
        self._last_stats: tuple[Any, ...] | None = None
        self.budget_hold: str | None = None  # why replacements are not launched (the budget)
        # the group's progress watchdog (fleet/providers/stall.py), wall s / steps: only rank 0
        # reports progress, and a hung worker blocks every rank in the next collective, so
        # the group is watched as one: its latest training event from any node
        self._watch = ProgressWatch()  # restart()ed at each worker start and node end
        self.stalls = 0
        # an operator's Terminate (request_stop, fleet/providers/terminate.py), wall s
        self._stop_at: float | None = None
        self._stop_deadline: float | None = None
        self._stop_grace: float | None = None
        self._emergency_step: int | None = None  # the group's latest committed emergency save
        self._stop_killed: set[str] = set()  # nodes the stop killed while they still ran
        self.clock = MarketClock.starting(getattr(self.cfg, "market_clock_start_unix", None),
                                          self.cfg.time_scale.factor)

    def _emit(self, event: Event) -> None:
        """Events leave the provider in market time (``MarketClock.event``)."""
        super()._emit(self.clock.event(event))

    # -- controls (tests, drills, the Dagster fault injection) --------------------------
    def cancel(self) -> None:
        self._cancelled.set()

    def request_stop(self) -> None:
        """A graceful stop (an operator's Terminate); idempotent. A grace of 0 cancels. Every
        live node gets the preemption notice a zone reclaim gives it, so the group leaves at
        one agreed step and rank 0 writes the emergency checkpoint (as when every zone is
        reclaimed at once); nothing is relaunched (``_graceful_stop``)."""
        if self._stop_at is not None:
            return
        if self.spec.terminate_grace_seconds == 0:
            self.cancel()
            return
        self._stop_at = time.time()

    def reclaim_zone(self, *zones: str, grace_seconds: float | None = None) -> list[str]:
        """The cloud takes ``zones`` back now: every node there gets the notice (killed
        after the grace window) and no node is placed there until ``regain_zone``. The
        notices of all the zones go out together (one correlated reclaim). Returns the
        noticed node ids."""
        with self._lock:
            self._reclaimed.update(zones)
            nodes = [n for n in self._nodes if n.zone in zones and n.spot and n.proc is not None
                     and n.ended_at is None]
        hit = []
        for n in nodes:
            with contextlib.suppress(ValueError):
                self.injector.preempt_now(n.node_id, grace_seconds)
                hit.append(n.node_id)
        return hit

    def regain_zone(self, *zones: str) -> None:
        """Capacity returns in ``zones``: nodes may be placed there again."""
        with self._lock:
            self._reclaimed.difference_update(zones)

    def alive_nodes(self) -> list[str]:
        with self._lock:
            return [n.node_id for n in self._nodes if n.ended_at is None]

    # -- setup ------------------------------------------------------------------------------
    def _workdir(self) -> Path:
        base = self.cfg.workdir
        if base is None:
            self._tmp = tempfile.mkdtemp(prefix="spotfleet-elastic-")
            base = Path(self._tmp)
        d = Path(base) / self.spec.name / f"attempt-{self.attempt}"
        for sub in ("events", "logs", "go"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        return d

    def _validate(self, zones: list[str]) -> None:
        cmd = self.spec.command
        if len(cmd) < 2 or not cmd[1].endswith(".py"):
            raise ValueError(f"StageSpec.command={cmd!r}: an elastic multi-node stage runs "
                             "[python, script.py, args...] (the script uses "
                             "checkpointing.elastic.ElasticSession, e.g. examples/train_elastic.py)")
        if not Path(cmd[1]).exists():
            raise ValueError(f"StageSpec.command[1]={cmd[1]!r}: no such training script")
        if "ElasticSession" not in Path(cmd[1]).read_text(encoding="utf-8", errors="replace"):
            raise ValueError(
                f"StageSpec.command[1]={cmd[1]!r}: a stage of num_nodes={self.spec.num_nodes} "
                "trains data-parallel, one worker per node, and the script must use "
                "checkpointing.elastic.ElasticSession (this one does not: its nodes would "
                "train the same model independently). Use examples/train_elastic.py as the "
                "template (docs/elastic.md), or set nodes: 1")
        if not zones:
            raise ValueError("an elastic stage needs at least one candidate zone")
        if self.elastic.on_demand_nodes > self.spec.num_nodes:
            raise ValueError(f"ElasticConfig.on_demand_nodes={self.elastic.on_demand_nodes} is "
                             f"more than StageSpec.num_nodes={self.spec.num_nodes}")
        check_stall_timeout(self.spec.stall_timeout_seconds, "StageSpec.stall_timeout_seconds")
        check_stall_startup(self.spec.stall_startup_seconds, "StageSpec.stall_startup_seconds")
        check_terminate_grace(self.spec.terminate_grace_seconds, "StageSpec.terminate_grace_seconds")

    def _max_per_zone(self, zones: list[str]) -> int:
        if self.elastic.max_per_zone:
            return self.elastic.max_per_zone
        spot = self.spec.num_nodes - self.elastic.on_demand_nodes
        return max(1, math.ceil(spot / max(1, len(zones))))

    # -- main loop ----------------------------------------------------------------------------
    def execute(self) -> StageResult:
        from checkpointing.elastic_run import host_rendezvous_store

        schedule = self.provider.schedule()
        zones = list(self.spec.zones) or schedule.zones
        unknown = [z for z in zones if z not in schedule.traces]
        if unknown:
            raise ValueError(f"StageSpec.zones has {unknown} which the emulated market does not "
                             f"have; use a subset of {schedule.zones}")
        self._validate(zones)
        workdir = self._workdir()
        self._stats_path = workdir / "stats.json"
        self._store = host_rendezvous_store("127.0.0.1:0")
        endpoint = f"127.0.0.1:{self._store.port}"
        self.injector = PreemptionInjector(
            schedule, self.cfg.time_scale, cloud=self.cfg.cloud, delivery=self.cfg.delivery,
            grace_seconds=self.cfg.grace_seconds, grace_scale=self.cfg.grace_scale,
            min_uptime_seconds=self.cfg.min_uptime_seconds, poll_seconds=self.cfg.poll_seconds,
            on_notice=lambda nid, deadline: self._notices.put((nid, deadline)))
        self.injector.start(time.time())
        max_zone = self._max_per_zone(zones)
        waiting_since: float | None = None
        completing_since: float | None = None
        try:
            while True:
                if self._cancelled.is_set():
                    self._emit(provider_event("cancelled", stage=self.spec.name))
                    raise AttemptFailed(f"stage {self.spec.name!r} was cancelled")
                now = time.time()
                self._start_due(endpoint, workdir)
                self._release_batches()
                self._pump()
                self._reap()
                if self._stop_at is not None:  # Terminate: notices, wait for the save, no relaunch
                    if self._graceful_stop(now):
                        return self._result()
                    time.sleep(self.cfg.poll_seconds)
                    continue
                self._watch_progress(now)
                alive = [n for n in self._nodes if n.ended_at is None]
                done = [n for n in self._nodes if n.end_reason == "completed"]
                unsaved = self._final_save_failure()
                if unsaved is not None:
                    raise AttemptFailed(unsaved)
                if done:
                    completing_since = completing_since or now
                    if not alive or now - completing_since > self.elastic.completion_wait_seconds:
                        return self._result()
                    time.sleep(self.cfg.poll_seconds)
                    continue
                if self.failures > self.elastic.max_failures:
                    raise AttemptFailed(self._failure_message())
                if self.preemptions > self.spec.max_relaunches * self.spec.num_nodes:
                    raise AttemptFailed(
                        f"stage {self.spec.name!r}: {self.preemptions} node preemptions exceed "
                        f"StageSpec.max_relaunches x num_nodes = "
                        f"{self.spec.max_relaunches * self.spec.num_nodes}")
                missing = self.spec.num_nodes - len(alive)
                if missing > 0:
                    placed = self._place(missing, zones, max_zone, now, workdir,
                                         first=not self._nodes, alive=alive)
                    if placed == 0 and not alive:
                        if waiting_since is None:
                            waiting_since = now
                            self._emit(provider_event("waiting", up=self._up_zones(zones, now),
                                                      blocked=sorted(self._reclaimed)))
                        elif now - waiting_since > self.cfg.max_capacity_wait_seconds:
                            raise AttemptFailed(
                                f"stage {self.spec.name!r}: no capacity for any node in {zones} "
                                f"for {now - waiting_since:.0f} s (max_capacity_wait_seconds="
                                f"{self.cfg.max_capacity_wait_seconds:g})")
                    elif placed:
                        waiting_since = None
                time.sleep(self.cfg.poll_seconds)
        finally:
            self._kill_all()
            self.injector.stop()
            shutil.rmtree(Path(self.elastic.handoff_root) / self.run_id, ignore_errors=True)
            self._store = None

    # -- placement ----------------------------------------------------------------------------
    def _up_zones(self, zones: list[str], now: float) -> list[str]:
        up = set(self.injector.up_zones(now))
        with self._lock:
            return [z for z in zones if z in up and z not in self._reclaimed]

    def _place(self, missing: int, zones: list[str], max_zone: int, now: float, workdir: Path,
               first: bool, alive: list[_ElasticNode]) -> int:
        """Launch up to ``missing`` nodes where capacity and the per-zone caps allow."""
        schedule = self.provider.schedule()
        od_alive = sum(1 for n in alive if not n.spot)
        od_wanted = self.elastic.on_demand_nodes
        with contextlib.suppress(KeyError, ValueError):
            od_wanted = int(self.spec.env["SPOTFLEET_ON_DEMAND_NODES"])
        plan: list[tuple[str, bool]] = [(zones[0], False)] * max(0, min(missing, od_wanted - od_alive))
        if self.spec.use_spot:
            counts = {z: sum(1 for n in alive if n.zone == z and n.spot) for z in zones}
            up = self._up_zones(zones, now)
            planned = set(parse_placement(self.spec.env.get("SPOTFLEET_PLACEMENT", "")))
            plan += [(z, True) for z in choose_zones(missing - len(plan), zones, counts, up,
                                                     self._caps(zones, max_zone), planned)]
        else:
            plan = [(zones[0], False)] * missing
        if not plan:
            return 0
        if self._budget_refuses(plan, alive, now, first):
            return 0
        self._serial += 1
        batch = _Batch(name=f"b{self._serial}", go_file=workdir / "go" / f"b{self._serial}")
        self._batches[batch.name] = batch
        itype = self.spec.instance_type or self.cfg.instance_type
        used_slots = {n.slot for n in alive}
        free_slots = [s for s in range(self.spec.num_nodes) if s not in used_slots]
        reason = ("initial placement" if first else
                  "relaunch: every node was lost" if not alive else
                  f"grow: {len(alive)} of {self.spec.num_nodes} nodes up")
        for (zone, spot), slot in zip(plan, free_slots, strict=False):
            region = schedule.region_of(zone)
            price = self.cfg.price_per_hour(itype, zone, region, spot,
                                            self.injector.trace_time())
            nid = f"{self.spec.name}-a{self.attempt}-e{len(self._nodes)}-n{slot}"
            ev = workdir / "events" / f"{nid}.jsonl"
            node = _ElasticNode(
                node_id=nid, slot=slot, zone=zone, region=region, spot=spot, price=price,
                launched_at=now, start_at=now + self.cfg.allocation_seconds +
                self.cfg.preparation_seconds, batch=batch.name,
                log_path=workdir / "logs" / f"{nid}.log", events_path=ev, tail=EventTail(ev))
            with self._lock:
                self._nodes.append(node)
            batch.nodes.append(nid)
            self._emit(provider_event("launch", node_id=nid, zone=zone, region=region, spot=spot,
                                      price_per_hour=price, reason=reason, rank=slot,
                                      relaunch=self.preemptions, elastic=True))
        self._write_stats()
        return len(plan)

    def _budget_refuses(self, plan: list[tuple[str, bool]], alive: list[_ElasticNode],
                        now: float, first: bool) -> bool:
        """The budget rule (``StageSpec.budget_left_usd``; ``attempt_budget_error``, the one
        rule every provider uses) for the nodes about to be launched: spent = this
        attempt's sessions, the alive nodes' billed so far included; start-up = the
        planned nodes' prices x the restart time. The first launch or every node lost: the
        stage stops (AttemptFailed, the budget's non-retriable message). Survivors still
        training: the replacements are not launched and the group keeps training at its
        size (a warning, once, and ``info["budget_hold"]`` in the stage's result)."""
        if self.spec.budget_left_usd is None:
            return False
        schedule = self.provider.schedule()
        itype = self.spec.instance_type or self.cfg.instance_type
        prices = [self.cfg.price_per_hour(itype, z, schedule.region_of(z), spot,
                                          self.injector.trace_time())
                  for z, spot in plan]
        # a node group of len(plan) nodes at their mean price: start-up = sum of their prices
        group = replace(self.spec, num_nodes=len(plan))
        sessions = [*self.sessions, *(self._session(n, ended_at=now) for n in alive)]
        msg = attempt_budget_error(group, sessions, sum(prices) / len(prices), first_launch=first,
                                   restart_seconds=self.restart_estimate())
        if msg is None:
            return False
        if not alive:
            raise AttemptFailed(msg)
        if self.budget_hold is None:
            self.budget_hold = msg
            log.warning("%s (%d node(s) not launched; the %d up keep training)", msg, len(plan),
                        len(alive))
        return True

    def _caps(self, zones: list[str], max_zone: int) -> dict[str, int]:
        """Per-zone node caps: the plan's spread (``SPOTFLEET_PLACEMENT``) for the zones it
        uses; the other candidate zones take overflow up to ``max_zone`` each."""
        caps = {z: max_zone for z in zones}
        planned = parse_placement(self.spec.env.get("SPOTFLEET_PLACEMENT", ""))
        for z, n in planned.items():
            if z in caps:
                caps[z] = n
        return caps

    def _node_command(self, endpoint: str) -> list[str]:
        py, script, *args = self.spec.command
        k = self.spec.num_nodes
        return [py, "-m", "checkpointing.elastic_run", "--nnodes", f"{self.elastic.min_nodes}:{k}",
                "--rdzv-endpoint", endpoint, "--rdzv-id", self.run_id, "--local-addr", "127.0.0.1",
                "--last-call-timeout", f"{self.elastic.last_call_timeout:g}",
                "--rdzv-poll-interval", f"{self.elastic.rdzv_poll_interval:g}",
                *(() if self.elastic.rdzv_join_skew is None
                  else ("--rdzv-join-skew", f"{self.elastic.rdzv_join_skew:g}")),
                "--", script, *args]

    # -- statistics for rank 0's insurance interval (market seconds; fleet/contract.py) ------
    def running_starts(self) -> list[float]:
        """launch -> ready (market s) of the nodes that started and have not ended, for
        ``restart_estimate``: R is what a replacement takes to join (or a relaunched group
        to start), which is what both the group-loss model and the restart cost need."""
        recorded = {s.node_id for s in self.sessions}
        return [self.cfg.time_scale.to_trace(max(0.0, n.ready_at - n.launched_at))
                for n in self._nodes if n.node_id not in recorded and n.ready_at is not None]

    def group_stats(self) -> tuple[float | None, float, int]:
        """(one unit's MTTP, R, units) of the group as it stands (launched, not ended), in
        market seconds.

        A unit is a zone: the local fleet (and a cloud's capacity reclaim) takes a zone's
        nodes together, so co-located nodes count once. The zones' MTTPs
        (``mttp_estimate``: prior refined by this attempt's sessions there) are combined
        into one (``equivalent_unit_mttp_seconds``). MTTP None: an on-demand member (the
        group is never lost at once), no node, or a zone without any estimate."""
        restart = self.restart_estimate()
        with self._lock:
            live = [n for n in self._nodes if n.ended_at is None]
        zones = sorted({n.zone for n in live if n.spot})
        if not zones or any(not n.spot for n in live):
            return None, restart, max(1, len(zones))
        mttps = [self.mttp_estimate(z) for z in zones]
        if any(m is None for m in mttps):
            return None, restart, len(zones)
        return equivalent_unit_mttp_seconds([float(m) for m in mttps], restart), restart, len(zones)

    def _write_stats(self) -> None:
        """Rewrite the stage's statistics file (``SPOTFLEET_STATS_FILE``, the training
        process's seconds) from :meth:`group_stats`; a ``stats`` event when it changed."""
        with self._lock:
            if self._stats_path is None or all(n.ended_at is not None for n in self._nodes):
                return  # no node to tell (all lost: the relaunch writes it again)
        mttp, restart, units = self.group_stats()
        stats: dict[str, Any] = training_stats(mttp, restart, None, 1.0 / self.cfg.time_scale.factor)
        stats["loss_units"] = units
        tmp = self._stats_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(stats), encoding="utf-8")
        os.replace(tmp, self._stats_path)
        key = (mttp, restart, units)
        if key != self._last_stats:
            self._last_stats = key
            group = group_loss_mttp_seconds(mttp, restart, units) if mttp is not None else None
            self._emit(provider_event("stats", zone=None, mttp_seconds=mttp, restart_seconds=restart,
                                      loss_units=units, group_mttp_seconds=group))

    def _node_env(self, node: _ElasticNode, sources: str, batch: _Batch) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.cfg.extra_env)
        env.update(self.spec.env)
        env.update({
            rt.ENV_NODE_ID: node.node_id,
            rt.ENV_ZONE: node.zone,
            rt.ENV_CHECKPOINT_URI: self.spec.checkpoint_uri,
            rt.ENV_EVENTS_FILE: str(node.events_path),
            rt.ENV_NOTICE_SOURCES: sources,
            rt.ENV_GRACE_SECONDS: f"{self.injector.grace_seconds:g}",
            "SPOTFLEET_NODE_RANK": str(node.slot),
            "SPOTFLEET_NUM_NODES": str(self.spec.num_nodes),
            "SPOTFLEET_HANDOFF_DIR": self.elastic.handoff_root,
            ENV_GO_FILE: str(batch.go_file),
            "PYTHONUNBUFFERED": "1",
        })
        env.pop("WORLD_SIZE", None)
        env.pop("RANK", None)
        # rank 0's policy inputs in the process's seconds: one unit's MTTP, R, the
        # checkpoint-time prior, the units, and the file that refreshes them
        mttp, restart, units = self.group_stats()
        env.update(training_env(mttp, restart, None, self.checkpoint_estimate(self._stalls),
                                1.0 / self.cfg.time_scale.factor))
        env[rt.ENV_LOSS_UNITS] = str(units)
        if self._stats_path is not None:
            env[rt.ENV_STATS_FILE] = str(self._stats_path)
        if self.cfg.notice_poll_seconds is not None:
            env["SPOTFLEET_NOTICE_POLL_SECONDS"] = f"{self.cfg.notice_poll_seconds:g}"
        return env

    def _start_due(self, endpoint: str, workdir: Path) -> None:
        now = time.time()
        for node in self._nodes:
            if node.proc is not None or node.ended_at is not None or node.start_at > now:
                continue
            batch = self._batches[node.batch]
            inj = self.injector.open_node(node.node_id, node.zone, spot=node.spot)
            env = self._node_env(node, inj.notice_sources, batch)
            try:
                with node.log_path.open("wb") as log:
                    node.proc = subprocess.Popen(self._node_command(endpoint), env=env, stdout=log,
                                                 stderr=subprocess.STDOUT, start_new_session=True)
            except OSError as exc:
                raise AttemptFailed(f"could not start node {node.node_id}: {exc}") from exc
            self.injector.attach(node.node_id, node.proc.pid)

    def _release_batches(self) -> None:
        """Let a batch join the rendezvous once all its live nodes are warm (or waited long)."""
        now = time.time()
        for batch in self._batches.values():
            if batch.released:
                continue
            live = [n for n in self._nodes if n.batch == batch.name and n.ended_at is None]
            ready = [n for n in live if Path(f"{batch.go_file}.ready.{n.node_id}").exists()]
            if (live and len(ready) == len(live)) or not live or \
                    now - batch.created > self.elastic.batch_wait_seconds:
                batch.go_file.touch()
                batch.released = True

    # -- events and exits -------------------------------------------------------------------
    def _drain_notices(self) -> None:
        while True:
            try:
                node_id, deadline = self._notices.get_nowait()
            except queue.Empty:
                return
            self._on_notice(node_id, deadline)

    def _on_notice(self, node_id: str, deadline: float) -> None:
        with self._lock:
            node = next((n for n in self._nodes if n.node_id == node_id), None)
        if node is None:
            return
        inj_node = self.injector.nodes.get(node_id)
        node.notice_at = node.notice_at or (inj_node.notice_at if inj_node else None) or time.time()
        inj = self.injector.nodes.get(node_id)
        self._emit(provider_event("notice_sent", node_id=node_id, zone=node.zone,
                                  deadline_unix=deadline, grace_seconds=self.injector.grace_seconds,
                                  sources=inj.notice_sources if inj else None))

    def _pump(self) -> None:
        self._drain_notices()
        for node in list(self._nodes):
            for ev in node.tail.poll():
                self._absorb(node, ev)
                self._emit(ev)

    def _absorb(self, node: _ElasticNode, event: Event) -> None:
        d = event.data
        step = d.get("step")
        self._watch.observe(event.kind, d, time.time())  # when the controller read it (wall s)
        if event.kind == "start":
            self._watch.restart()  # workers (re)start: the start-up allowance
            if node.ready_at is None:
                node.ready_at = event.time
                self.injector.mark_ready(node.node_id, event.time)
            if node.first_step is None:
                r = d.get("resumed_from_step")
                node.first_step = int(r) if r is not None else 0
        elif event.kind == "save_committed" and step is not None:
            node.last_checkpoint_step = int(step)
            if d.get("kind") == "emergency":
                self._emergency_step = max(int(step), self._emergency_step or 0)
            stall = d.get("stall_seconds")
            if d.get("kind") in ("periodic", "insurance") and isinstance(stall, int | float):
                self._stalls.append(self.cfg.time_scale.to_trace(float(stall)))  # C, market s
        elif event.kind == "exit":
            node.exit_event = event
        if isinstance(step, (int, float)):
            node.last_step = max(int(step), node.last_step or 0)

    def _reap(self) -> None:
        for node in self._nodes:
            if node.proc is None or node.ended_at is not None:
                continue
            rc = node.proc.poll()
            if rc is None:
                continue
            self._pump()
            node.exit_code = rc
            node.ended_at = time.time()
            self.injector.close_node(node.node_id)
            inj = self.injector.nodes.get(node.node_id)
            if node.notice_at is None and inj is not None and inj.notice_at is not None:
                node.notice_at = inj.notice_at
            if rc == 0:
                node.end_reason = "completed"
            elif rc == EXIT_FINAL_SAVE_FAILED:
                node.end_reason = "failed"  # rank 0: every step trained, final checkpoint lost
            elif self._stop_at is not None and (node.notice_at is None or node.notice_at >= self._stop_at):
                node.end_reason = "cancelled"  # an operator's Terminate: not the market's preemption
            elif node.notice_at is not None or rc == rt.EXIT_PREEMPTED:
                node.end_reason = "preempted"
                self.preemptions += 1
                self._emit(provider_event("preempted", node_id=node.node_id, zone=node.zone,
                                          exit_code=rc, last_step=node.last_step,
                                          last_checkpoint_step=node.last_checkpoint_step))
            elif self._cancelled.is_set() or any(n.end_reason == "completed" for n in self._nodes):
                node.end_reason = "cancelled"  # the stage ended while this node was joining
            else:
                node.end_reason = "failed"
                self.failures += 1
                self._emit(provider_event("failed", node_id=node.node_id, zone=node.zone,
                                          exit_code=rc))
            self._record(node)
            self._write_stats()  # its session refines the zone's MTTP and R; the units change
            self._watch.restart()  # the survivors re-form: the start-up allowance

    def _graceful_stop(self, now: float) -> bool:
        """One poll of an operator's Terminate (``request_stop``). First poll: every live node
        that has started training gets a preemption notice with the stage's grace
        (``PreemptionInjector.preempt_now``, as a zone reclaim: the group leaves at one agreed
        step and rank 0 writes the emergency checkpoint); a node not training yet is killed at
        once. Then wait until every node has ended or the grace has passed, and kill what is
        still running (hung, or a save slower than the grace; a save torn by the kill never
        commits). True: the stage had completed (every step done before the Terminate);
        otherwise raises ``AttemptFailed`` saying what the group saved, once it is stopped."""
        alive = [n for n in self._nodes if n.ended_at is None]
        if self._stop_deadline is None:
            grace = terminate_grace_seconds(self.spec.terminate_grace_seconds, self.injector.grace_seconds)
            self._stop_grace, self._stop_deadline = grace, now + grace
            for node in alive:
                if node.exit_event is not None:
                    continue  # done (e.g. completed, waiting in the agents' exit barrier): let it end
                if node.proc is None or node.ready_at is None or grace <= 0:
                    self._stop_node(node, killed=node.proc is not None and node.proc.poll() is None)
                    continue
                inj = self.injector.nodes.get(node.node_id)
                if inj is not None and inj.state == "running":
                    with contextlib.suppress(ValueError):  # it ended meanwhile
                        self.injector.preempt_now(node.node_id, grace)
            self._emit(provider_event("terminating", stage=self.spec.name, grace_seconds=grace,
                                      nodes=[n.node_id for n in alive]))
            return False
        if alive and now < self._stop_deadline:
            return False
        for node in alive:
            self._stop_node(node, killed=node.exit_event is None)  # else: only tearing down
        self._pump()
        unsaved = self._final_save_failure()
        if unsaved is not None:  # every step trained, the final checkpoint not committed
            raise AttemptFailed(unsaved)
        if any(n.end_reason == "completed" or (n.exit_event is not None
                                               and n.exit_event.data.get("reason") == "completed")
               for n in self._nodes):
            return True
        # killed: by this stop, or by the injector at the notice deadline (a signal's exit code)
        killed = any(n.node_id in self._stop_killed or (
            n.ready_at is not None and n.ended_at is not None and n.ended_at >= (self._stop_at or 0.0)
            and n.exit_event is None and (n.exit_code or 0) < 0) for n in self._nodes)
        last = max((n.last_step or 0 for n in self._nodes), default=0)
        ckpt = max((n.last_checkpoint_step for n in self._nodes if n.last_checkpoint_step is not None),
                   default=None)
        line = stop_summary(
            f"group {self.run_id}", grace_seconds=self._stop_grace or 0.0, stopped_by_itself=not killed,
            last_step=last, checkpoint_step=ckpt,
            saved_at_stop=ckpt is not None and self._emergency_step == ckpt and ckpt >= last,
            save_failed=None, started=any(n.ready_at is not None for n in self._nodes))
        self._emit(provider_event("cancelled", stage=self.spec.name, nodes=[line]))
        raise AttemptFailed(f"stage {self.spec.name!r} was cancelled (Terminate: every node was asked "
                            f"to save, grace {self._stop_grace or 0.0:g} s): {line}")

    def _stop_node(self, node: _ElasticNode, killed: bool = False) -> None:
        """Kill one node of a stopping group and record it ``cancelled`` (``killed``: it was
        still running, not only tearing down: the stop message says so)."""
        if killed:
            self._stop_killed.add(node.node_id)
        self._kill_process(node)
        if node.ended_at is None:
            node.ended_at = time.time()
            node.exit_code = node.proc.poll() if node.proc is not None else None
            node.end_reason = "cancelled"
            if self.injector is not None:
                self.injector.close_node(node.node_id)
            self._record(node)

    @staticmethod
    def _kill_process(node: _ElasticNode) -> None:
        """SIGKILL the node's process group if it still runs, and reap it (up to 5 s)."""
        if node.proc is not None and node.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(node.proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.proc.wait(timeout=5)

    def _watch_progress(self, now: float) -> None:
        """The group's progress watchdog: while at least one live node has started
        training, at least ``ElasticConfig.min_nodes`` are alive (fewer wait in the rendezvous
        for replacements, silent by design) and none is being reclaimed (a notice: the group
        re-forms), no training event from ANY node for longer than the stall limit
        (``stall_limit_seconds``, wall s; the start-up allowance until the first progress
        after a worker start or a node's end) means the group is hung (a deadlocked worker
        blocks every rank in its next collective): every live node is killed and recorded
        failed with the reason, and the main loop launches a new group, whose rank 0
        restores the latest complete checkpoint. Each stall counts as one failure
        (``ElasticConfig.max_failures``)."""
        timeout = self.spec.stall_timeout_seconds
        alive = [n for n in self._nodes if n.ended_at is None and n.proc is not None
                 and n.proc.poll() is None]
        if timeout in (None, 0) or not alive \
                or len(alive) < self.elastic.min_nodes \
                or not any(n.ready_at is not None for n in alive) \
                or any(n.notice_at is not None or n.exit_event is not None for n in alive) \
                or any(n.exit_event is not None and n.exit_event.data.get("reason") == "completed"
                       for n in self._nodes):
            # not watched now: the silence clock restarts when the watch resumes (a late
            # replacement after a long outage is not a stall of the group)
            if self._watch.last_event_at is not None:
                self._watch.last_event_at = now
            return
        reason = self._watch.stalled(now, timeout, self.spec.stall_startup_seconds)
        if reason is None:
            return
        self.stalls += 1
        self.failures += 1
        for node in alive:
            self._kill_process(node)
        self._pump()  # what they wrote before the kill
        for node in alive:
            node.exit_code = node.proc.poll()
            node.ended_at = time.time()
            node.end_reason = "failed"
            node.stall = reason
            self.injector.close_node(node.node_id)
            self._record(node)
            self._emit(provider_event("failed", node_id=node.node_id, zone=node.zone,
                                      exit_code=node.exit_code, stalled=True,
                                      reason=f"{reason} (the whole elastic group)",
                                      last_step=node.last_step,
                                      last_checkpoint_step=node.last_checkpoint_step))
        self._watch = ProgressWatch()
        self._write_stats()

    def _record(self, node: _ElasticNode) -> None:
        """Keep the node's session, in market time (the node's own times are wall)."""
        self.sessions.append(self._session(node))

    def _session(self, node: _ElasticNode, ended_at: float | None = None) -> NodeSession:
        """The node's session in market time; ``ended_at`` (wall): as if it ended then."""
        return self.clock.session(NodeSession(
            node_id=node.node_id, stage=self.spec.name, attempt=self.attempt, provider="local",
            cloud=self.cfg.cloud if self.cfg.cloud != "signal" else "local", region=node.region,
            zone=node.zone, instance_type=self.spec.instance_type or self.cfg.instance_type,
            spot=node.spot, price_per_hour=node.price, launched_at=node.launched_at,
            ready_at=node.ready_at, ended_at=node.ended_at if ended_at is None else ended_at,
            end_reason=node.end_reason or "failed", notice_at=node.notice_at,
            first_step=node.first_step, last_step=node.last_step,
            last_checkpoint_step=node.last_checkpoint_step,
            injected=(node.end_reason == "preempted" and self.injector is not None
                      and self.injector.injected(node.node_id))))

    def _kill_all(self) -> None:
        for node in self._nodes:
            self._stop_node(node)

    def _final_save_failure(self) -> str | None:
        """The error of a rank 0 that trained every step but could not commit the final
        checkpoint (its ``exit`` reason ``final_save_failed``), else None. The other ranks
        exit 0: their part is done, but the stage is not complete without that checkpoint
        (a next stage would start from an older one)."""
        for n in self._nodes:
            ev = n.exit_event
            if ev is not None and ev.data.get("reason") == "final_save_failed":
                return (f"stage {self.spec.name!r}: trained all {ev.data.get('step')} steps, but "
                        f"the final checkpoint was not committed (node {n.node_id}, exit "
                        f"{EXIT_FINAL_SAVE_FAILED}): {ev.data.get('error') or 'see ' + str(n.log_path)}")
        return None

    def _failure_message(self) -> str:
        node = next((n for n in reversed(self._nodes) if n.end_reason == "failed"), None)
        if node is None:
            return f"stage {self.spec.name!r}: elastic node group lost"
        tail = ""
        with contextlib.suppress(OSError):
            tail = node.log_path.read_text(encoding="utf-8", errors="replace")[-1500:]
        stalls = f", {self.stalls} of them group stall(s)" if self.stalls else ""
        why = f" ({node.stall})" if node.stall else ""
        return (f"stage {self.spec.name!r}: {self.failures} node crash(es) without a preemption "
                f"notice{stalls} (ElasticConfig.max_failures={self.elastic.max_failures}); last: "
                f"{node.node_id} in {node.zone} exit code {node.exit_code}{why}; log {node.log_path}:\n{tail}")

    # -- result -------------------------------------------------------------------------------
    def membership_log(self) -> list[dict[str, Any]]:
        """Rank 0's ``membership`` events: one per group formed (step, world size, source)."""
        out = []
        for ev in self.events:
            if ev.kind == "membership" and ev.data.get("rank") == 0:
                out.append({"time": ev.time, "node_id": ev.node_id, **ev.data})
        return out

    def _result(self) -> StageResult:
        final = sha = None
        for n in self._nodes:
            if n.exit_event is not None and n.exit_event.data.get("reason") == "completed":
                final = n.exit_event.data.get("step", n.last_step)
                sha = n.exit_event.data.get("state_sha256") or sha
        factor = self.cfg.time_scale.factor
        node_hours = {s.node_id: ((s.ended_at or s.launched_at) - s.launched_at) / 3600.0
                      for s in self.sessions}  # market hours
        cost = sum(session_cost_usd(s.price_per_hour, s.launched_at, s.ended_at) for s in self.sessions)
        groups = self.membership_log()
        # the tax of each shrink / grow (fleet/providers/membership.py): the nodes that were
        # training, idle from their hand-off to the new group's first step (the events are
        # in market time already: market seconds, like the statistics DB)
        changes = membership_changes(self.events, self.sessions)
        tax_node_s = sum(c.node_seconds for c in changes)
        info = {
            "provider": "local",
            "elastic": True,
            "rdzv_run_id": self.run_id,
            "preemptions": self.preemptions,
            # groups after the first that had to read the checkpoint: every node was lost
            "all_nodes_lost": sum(1 for g in groups[1:] if g.get("state_from") == "checkpoint"),
            "zones": [s.zone for s in self.sessions],
            "state_sha256": sha,
            "world_sizes": [g["world_size"] for g in groups],
            "membership": groups,
            "node_hours": node_hours,
            "membership_tax_node_seconds": tax_node_s,
            "membership_tax_usd": sum(c.dollars for c in changes),
            "budget_hold": self.budget_hold,  # replacements the budget did not launch
            "time_scale_factor": factor,
            "cost_usd": cost,  # market hours x price, like the statistics DB
            "workdir": str(self._nodes[0].log_path.parents[1]) if self._nodes else None,
        }
        self._emit(provider_event("completed", zone=None, final_step=final,
                                  preemptions=self.preemptions))
        return StageResult(stage=self.spec.name, attempt=self.attempt, completed=True,
                           sessions=list(self.sessions), events=list(self.events),
                           final_step=final, info=info)


def parse_placement(text: str) -> dict[str, int]:
    """``"us-east-1a:2,us-east-1b:2"`` -> ``{"us-east-1a": 2, "us-east-1b": 2}``."""
    out: dict[str, int] = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        zone, _, n = item.rpartition(":")
        try:
            out[zone] = int(n)
        except ValueError:
            raise ValueError(f"SPOTFLEET_PLACEMENT entry {item!r}: use zone:nodes, e.g. "
                             "us-east-1a:2") from None
    return out


def choose_zones(missing: int, zones: list[str], counts: dict[str, int], up: list[str],
                 caps: dict[str, int], planned: set[str] | None = None) -> list[str]:
    """Zones for ``missing`` new spot nodes: only zones that are up and below their cap;
    the plan's zones before overflow zones, the emptiest zone (relative to its cap) first,
    then the preference order of ``zones``.

    ``counts``: spot nodes alive per zone; ``caps``: the most nodes a zone may hold;
    ``planned``: the zones of the plan's spread (empty / None: every zone alike)."""
    planned = planned or set(zones)
    counts = dict(counts)
    out: list[str] = []
    for _ in range(max(0, missing)):
        cands = [z for z in zones if z in up and counts.get(z, 0) < caps.get(z, 0)]
        if not cands:
            break
        z = min(cands, key=lambda c: (c not in planned, counts.get(c, 0) / max(1, caps[c]),
                                      zones.index(c)))
        counts[z] = counts.get(z, 0) + 1
        out.append(z)
    return out
