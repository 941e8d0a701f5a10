"""The ``skypilot`` fleet provider: a stage is a SkyPilot managed job.

Launch, watch and cancel go through the SkyPilot SDK (API server requests:
``sky.jobs.launch`` / ``sky.jobs.queue_v2`` / ``sky.jobs.cancel``, results with
``sky.get``). Job records become ``NodeSession`` objects (one per node per cluster
the job ran on), priced from SkyPilot's catalog.

Placement is the stage's fleet policy's job (``StageSpec.policy`` from
fleet/policies/registry.py, driven by :class:`fleet.providers.decisions.PolicyDriver`:
the same object ``fleet-sim`` evaluates). SkyPilot 0.14's ``EAGER_NEXT_REGION``
recovery does not block the region that was just preempted (skypilot issue #10021), so
the job may come back in the zone that is losing capacity. When a job turns RECOVERING
(SkyPilot saw the cluster preempted) the provider cancels it, tells the policy the zone
is down, and relaunches the stage as a new managed job where the policy says: its
target zone and spot fallbacks as ``resources.ordered`` (SkyPilot tries them in that
order, as the simulator tries ``Action.fallbacks``), or on-demand in the zones of the region
the driver picks (``PolicyDriver.on_demand_zone_now``: the simulator's rule, priced per
region from the catalog; the watch loop reports each job's zone with
``PolicyDriver.launched``). The policy observes only what this controller sees (``Observation.probed``):
a zone is up while the job runs there, down when it was preempted there; the rest is its
belief from the past. Its restart time R (``JobSpec.restart_hours``) is the plan's,
refined by each job's launch -> ready as SkyPilot stamps it (``_session``;
``AttemptRecord.restart_estimate``, the local provider's function too), set before each
decision. The training process
resumes from the latest checkpoint in ``spec.checkpoint_uri`` (an object store every
zone can reach) and gets the run contract's statistics (MTTP of its zone, R, interval;
fleet/contract.py) in its task environment, refreshed at every relaunch from what the
attempt observed.

Training events stay on the VM (``SPOTFLEET_EVENTS_FILE``); this provider reports its
own events (launch, preempted, relaunch, completed, failed, cancelled). What it knows of
the training's progress comes from the checkpoint store it shares with the VMs: the
newest committed checkpoint's step, and the ``total_steps`` / ``mean_step_seconds`` the
training process writes into every manifest (``meta["progress"]``), read at most every
``progress_poll_seconds`` (``decisions.progress_from_checkpoints``). The policy gets it
through the same ``PolicyDriver.decide(t, Progress)`` the local provider feeds from the
process's progress events; work since the last checkpoint is invisible to it here.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from checkpointing.events import Event
from fleet.contract import (
    prior_history,
    training_env,
)
from fleet.providers.attempt import AttemptRecord
from fleet.providers.base import (
    AttemptFailed,
    FleetProvider,
    NodeSession,
    StageResult,
    StageSpec,
    attempt_budget_error,
)
from fleet.providers.decisions import PolicyDriver, Progress, progress_from_checkpoints
from fleet.providers.events import provider_event
from fleet.providers.skypilot.tasks import (
    SkyTaskOptions,
    build_task,
    hourly_price,
    resolve_instance_type,
)

log = logging.getLogger("fleet.providers.skypilot")

#: ManagedJobStatus values, grouped by what the provider does with them
WAITING = {"PENDING", "SUBMITTED", "STARTING"}
RUNNING = {"RUNNING", "WINDING_DOWN"}
RECOVERING = {"RECOVERING"}
DONE = {"SUCCEEDED"}
CANCELLED = {"CANCELLED", "CANCELLING"}
# everything else (FAILED, FAILED_SETUP, FAILED_PRECHECKS, FAILED_NO_RESOURCE,
# FAILED_CONTROLLER) is a failure


@dataclass
class SkyPilotConfig:
    """Provider settings. Durations in seconds (real time)."""

    options: SkyTaskOptions = field(default_factory=SkyTaskOptions)
    #: registry name (or a fleet.policies Policy object) overriding StageSpec.policy (None: the spec's)
    policy: Any = None
    poll_seconds: float = 15.0
    max_pending_seconds: float = 3600.0  # job not running this long -> AttemptFailed
    rotate_on_preemption: bool = True  # False: leave recovery entirely to SkyPilot
    decision_tick_seconds: float = 300.0  # the policy's tick (its Observation grid)
    progress_poll_seconds: float = 60.0  # re-list the checkpoint store for progress at most this often


def _get(record: Any, name: str) -> Any:
    return record.get(name) if isinstance(record, dict) else getattr(record, name, None)


def _status(record: Any) -> str:
    st = _get(record, "status")
    return str(getattr(st, "value", st))


class SkyPilotProvider(FleetProvider):
    """Run stages as SkyPilot managed jobs with spotfleet's zone rotation."""

    name = "skypilot"

    def __init__(self, config: SkyPilotConfig | None = None, sdk: Any = None,
                 clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep):
        self.config = config or SkyPilotConfig()
        self._sdk = sdk
        self._clock = clock
        self._sleep = sleep
        self._sessions: list[NodeSession] = []
        self._active: dict[str, int] = {}  # stage -> managed job id
        self._cancelled: set[str] = set()
        self._lock = threading.Lock()

    # -- SDK boundary ---------------------------------------------------------------------
    @property
    def sdk(self) -> Any:
        if self._sdk is None:
            import sky

            self._sdk = sky
        return self._sdk

    def _launch(self, task: Any, name: str) -> int:
        job_ids, _handle = self.sdk.get(self.sdk.jobs.launch(task, name=name))[:2]
        job_id = job_ids[0] if isinstance(job_ids, (list, tuple)) else job_ids
        if job_id is None:
            raise AttemptFailed(f"SkyPilot accepted managed job {name!r} but returned no job id")
        return int(job_id)

    def _records(self, job_id: int) -> list[Any]:
        out = self.sdk.get(self.sdk.jobs.queue_v2(refresh=False, job_ids=[job_id], fields=None))
        jobs = out[0] if isinstance(out, tuple) else out
        return [j for j in jobs if _get(j, "job_id") == job_id]

    def _cancel_job(self, job_id: int) -> None:
        self.sdk.get(self.sdk.jobs.cancel(job_ids=[job_id]))

    # -- public ---------------------------------------------------------------------------
    def cancel(self, stage: str) -> None:
        with self._lock:
            self._cancelled.add(stage)
            job_id = self._active.get(stage)
        if job_id is not None:
            self._cancel_job(job_id)

    def sessions(self) -> Iterator[NodeSession]:
        with self._lock:
            return iter(list(self._sessions))

    def run_stage(self, spec: StageSpec, attempt: int = 1,
                  on_event: Callable[[Event], None] | None = None) -> StageResult:
        run = _SkyRun(self, spec, attempt, on_event)
        try:
            return run.execute()
        finally:
            with self._lock:
                self._sessions.extend(run.sessions)
                self._active.pop(spec.name, None)
                self._cancelled.discard(spec.name)


class _SkyRun(AttemptRecord):
    """One attempt of one stage as SkyPilot managed jobs."""

    def __init__(self, provider: SkyPilotProvider, spec: StageSpec, attempt: int,
                 on_event: Callable[[Event], None] | None):
        super().__init__(spec, attempt, on_event)
        self.p = provider
        self.cfg = provider.config
        self.jobs: list[int] = []
        self._progress = Progress()
        self._progress_read_at: float | None = None
        self._progress_store: Any = None
        self._progress_warned = False
        self._stalls: list[float] = []  # stalls (s) of the prefix's periodic / insurance saves
        self.unpriced: list[str] = []  # node ids of sessions the catalog could not price

    def _cancelled(self) -> bool:
        with self.p._lock:
            return self.spec.name in self.p._cancelled

    def execute(self) -> StageResult:
        spec = self.spec
        zones = list(spec.zones)
        started = self.p._clock()
        self.started = started
        self.driver = None
        if spec.use_spot and zones:
            # once per stage: one catalog look-up per zone (until 2026-11-27 twice, the
            # second inside catalog_priced when the plan carried no on-demand price)
            on_demand = catalog_on_demand_prices(spec)
            self.driver = PolicyDriver(self.cfg.policy or spec.policy, zones,
                                       priors=catalog_priced(spec, on_demand),
                                       deadline_seconds=spec.deadline_seconds,
                                       on_demand_allowed=spec.on_demand_allowed,
                                       gap_seconds=self.cfg.decision_tick_seconds,
                                       prior_history=prior_history(
                                           spec.priors, zones, self.cfg.decision_tick_seconds),
                                       on_demand_prices=on_demand or None,
                                       accelerator=spec.accelerator)
        prev_zone: str | None = None
        relaunches = 0
        waiting_since: float | None = None
        while True:
            if self._cancelled():
                self._emit(provider_event("cancelled", stage=spec.name))
                raise AttemptFailed(f"stage {spec.name!r} was cancelled")
            now = self.p._clock()
            candidates, spot, reason = self._placement(zones, now - started)
            if candidates is None:  # the policy waits (idle): ask again after a poll
                waiting_since = now if waiting_since is None else waiting_since
                if now - waiting_since > self.cfg.max_pending_seconds:
                    raise AttemptFailed(
                        f"stage {spec.name!r}: the fleet policy waited {now - waiting_since:.0f} s "
                        f"(> max_pending_seconds={self.cfg.max_pending_seconds:g}) without a place "
                        "to run; the retry resumes from the latest checkpoint")
                self.p._sleep(self.cfg.poll_seconds)
                continue
            waiting_since = None
            if spec.budget_left_usd is not None:  # enforce_budget: launch only what the budget allows
                msg = attempt_budget_error(spec, self.sessions, self._launch_price(candidates, spot),
                                           first_launch=prev_zone is None,
                                           restart_seconds=self.restart_estimate())
                if msg is not None:
                    raise AttemptFailed(msg)
            env = self._training_env(candidates[0] if candidates else None, spot)
            task = build_task(replace(spec, env={**spec.env, **env}), candidates, use_spot=spot,
                              options=self.cfg.options)
            name = f"{spec.name}-a{self.attempt}" + (f"-r{relaunches}" if relaunches else "")
            job_id = self.p._launch(task, name)
            self.jobs.append(job_id)
            with self.p._lock:
                self.p._active[spec.name] = job_id
            if prev_zone is not None:
                self._emit(provider_event("relaunch", from_zone=prev_zone,
                                          to_zone=candidates[0] if candidates else None,
                                          spot=spot, reason=reason, relaunch=relaunches,
                                          job_id=job_id, zones=candidates))
            self._emit(provider_event("launch", zone=candidates[0] if candidates else None,
                                      zones=candidates, spot=spot, reason=reason,
                                      relaunch=relaunches, job_id=job_id, task_name=name,
                                      training_env=env))
            outcome, record = self._watch(job_id, task, spot)
            if outcome == "succeeded":
                self._emit(provider_event("completed", zone=_get(record, "zone"), job_id=job_id,
                                          preemptions=relaunches))
                return StageResult(stage=spec.name, attempt=self.attempt, completed=True,
                                   sessions=list(self.sessions), events=list(self.events),
                                   final_step=None,
                                   info={"provider": "skypilot", "jobs": list(self.jobs),
                                         "preemptions": relaunches,
                                         "unpriced_sessions": list(self.unpriced),
                                         # R (s) the policy was told at its last decision
                                         # (None: no policy placed the jobs)
                                         "policy_restart_seconds": (self.driver.restart_now()
                                                                    if self.driver is not None else None),
                                         "zones": [s.zone for s in self.sessions]})
            if outcome == "cancelled":
                self._emit(provider_event("cancelled", stage=spec.name, job_id=job_id))
                raise AttemptFailed(f"stage {spec.name!r}: managed job {job_id} was cancelled")
            if outcome == "failed":
                why = _get(record, "failure_reason") or _status(record)
                self._emit(provider_event("failed", zone=_get(record, "zone"), job_id=job_id,
                                          exit_code=None, reason=why))
                raise AttemptFailed(f"stage {spec.name!r}: managed job {job_id} ended "
                                    f"{_status(record)}: {why}. `sky jobs logs {job_id}` shows "
                                    "its output; the retry resumes from the latest checkpoint")
            # preempted
            zone = _get(record, "zone")
            relaunches += 1
            if zone and self.driver is not None:
                self.driver.preempted(self.p._clock() - started, zone)
            self._emit(provider_event("preempted", zone=zone, job_id=job_id,
                                      exit_code=None, last_step=None, last_checkpoint_step=None))
            if not self.cfg.rotate_on_preemption:
                continue  # unreachable: _watch only returns "preempted" when rotating
            self.p._cancel_job(job_id)
            if relaunches > spec.max_relaunches:
                raise AttemptFailed(
                    f"stage {spec.name!r}: {relaunches} preemptions exceed StageSpec."
                    f"max_relaunches={spec.max_relaunches}; the retry resumes from checkpoint")
            prev_zone = zone

    def _launch_price(self, candidates: list[str], spot: bool) -> float:
        """$/h per node of the next managed job at least: the catalog's cheapest candidate
        (SkyPilot may take any of them); 0 when the catalog prices none (then only the spend
        so far counts against the budget)."""
        cloud = self.spec.clouds[0] if self.spec.clouds else "aws"
        prices = []
        for zone in candidates or [None]:
            try:
                itype = resolve_instance_type(self.spec, zone=zone, use_spot=spot)
                prices.append(hourly_price(itype, spot, zone=zone, cloud=cloud))
            except Exception:  # noqa: BLE001 - not in the catalog: this candidate has no floor
                continue
        if not prices:
            log.warning("stage %s: the catalog prices none of %s (%s); the budget check counts only "
                        "the spend so far", self.spec.name, candidates, "spot" if spot else "on-demand")
        return min(prices, default=0.0)

    def _training_env(self, zone: str | None, spot: bool = True) -> dict[str, str]:
        """MTTP of ``zone`` / R / interval / checkpoint time for the training process (real
        seconds): the plan's priors, refined by what this attempt held and lost so far and
        by the stalls of the checkpoints on the stage's prefix (read with the progress).
        On on-demand no MTTP is exported: nothing preempts it, so no insurance saves.
        A multi-node task is recovered as a whole when one node is preempted (no elastic
        shrink on SkyPilot): its MTTP is the job's, one node's over ``num_nodes``
        (``mttp_estimate(job_nodes=...)``); until 2026-11-28 its nodes were told one node's,
        an insurance interval up to sqrt(num_nodes) too long."""
        mttp = self.mttp_estimate(zone, spot, job_nodes=self.spec.num_nodes)
        restart = self.restart_estimate()
        ckpt = self.checkpoint_estimate(self._stalls)
        return training_env(mttp, restart, self.spec.priors.interval_seconds, ckpt)

    def _placement(self, zones: list[str], t: float) -> tuple[list[str] | None, bool, str]:
        """Candidate zones (ordered) and spot/on-demand for the next managed job (None:
        the policy waits). ``t``: seconds since the attempt started."""
        if not self.spec.use_spot:
            return zones, False, "StageSpec.use_spot is False"
        driver = self.driver
        if driver is None:
            return zones, True, "SkyPilot chooses among the candidate zones"
        progress = self._progress_now()
        # R as this fleet measured it: the plan's prior refined by every launch -> ready of
        # the attempt's jobs so far (all ended here: a decision precedes each launch), the
        # same R the training process is told (``_training_env``)
        driver.restart_seconds = self.restart_estimate()
        d = driver.decide(t, progress, None)
        spot_zones: list[str] = []
        for x in d.tries:  # the policy's target and spot fallbacks: SkyPilot's ordered list
            if x is None or not x.spot:
                break
            spot_zones.append(x.zone)
        first = d.launch
        self._emit(provider_event(
            "decision", policy=driver.name, policy_class=type(driver.policy).__qualname__,
            target="idle" if first is None else first.zone if first.spot else "on-demand",
            spot=None if first is None else first.spot, market_seconds=round(t, 3), tick=d.tick,
            interval_seconds=d.interval_seconds, location=None,
            restart_seconds=round(driver.restart_now(), 3),
            committed_step=progress.committed_step, total_steps=progress.total_steps,
            step_seconds=progress.step_seconds,
            tries=[("idle" if x is None else x.zone if x.spot else "on-demand") for x in d.tries]))
        if first is None:
            return None, True, f"policy {driver.name}: wait"
        if not first.spot:  # the region the driver priced (on_demand_zone_now), its zone first
            region = driver.region(first.zone)
            return ([first.zone] + [z for z in zones if z != first.zone and driver.region(z) == region],
                    False, first.reason)
        return spot_zones, True, first.reason

    def _progress_now(self) -> Progress:
        """The training's progress as the checkpoint store shows it (module docstring);
        the last known one between reads and when the store cannot be read."""
        now = self.p._clock()
        if self._progress_read_at is not None and now - self._progress_read_at < self.cfg.progress_poll_seconds:
            return self._progress
        self._progress_read_at = now
        from checkpointing.manifest import list_checkpoints
        from checkpointing.stores.base import open_store

        try:
            if self._progress_store is None:
                self._progress_store = open_store(self.spec.checkpoint_uri)
            infos = list_checkpoints(self._progress_store)
            self._progress = progress_from_checkpoints(infos)
            self._stalls = [c.stall_seconds for c in infos if c.kind in ("periodic", "insurance")]
        except Exception as exc:  # unreachable from the controller: decide on what is known
            if not self._progress_warned:
                self._progress_warned = True
                log.warning("stage %s: cannot read progress from %s (%s); the fleet policy decides "
                            "with the last known progress", self.spec.name, self.spec.checkpoint_uri, exc)
        return self._progress

    def _session(self, record: Any, task: Any, spot: bool, end: float | None, reason: str,
                 recovery_launched: float | None = None) -> None:
        """Record the node session(s) of ``record``'s cluster. Launch -> ready, as SkyPilot's
        jobs controller stamps it (sky/jobs/state.py): a job's first cluster from
        ``submitted_at`` (the controller starts launching it) to ``start_at`` (the job
        submitted on the provisioned cluster; ``last_recovered_at`` is set to the same
        second); a cluster SkyPilot recovered onto (``last_recovered_at`` > ``start_at``)
        from ``recovery_launched`` (when this controller saw the recovery begin) to
        ``last_recovered_at``."""
        zone = _get(record, "zone") or ""
        region = _get(record, "region") or (zone[:-1] if zone else "")
        cloud = (_get(record, "cloud") or (self.spec.clouds[0] if self.spec.clouds else "aws"))
        cloud = str(cloud).lower()
        res = next((r for r in task.resources if r.zone == zone), next(iter(task.resources)))
        itype = res.instance_type or ""
        try:
            price = hourly_price(itype, spot, zone=zone or None, region=region or None, cloud=cloud)
            unpriced = None
        except Exception as exc:  # noqa: BLE001 - catalog without this entry: recorded UNPRICED
            price, unpriced = 0.0, exc
        start, recovered = _get(record, "start_at"), _get(record, "last_recovered_at")
        if start is not None and recovered is not None and recovered > start:
            ready = recovered
            launched = recovery_launched if recovery_launched is not None and recovery_launched <= recovered \
                else recovered
        else:
            ready = start
            launched = _get(record, "submitted_at") or start or end or 0.0
        ids = [f"{self.spec.name}-a{self.attempt}-j{_get(record, 'job_id')}"
               f"-r{_get(record, 'recovery_count') or 0}-n{rank}" for rank in range(self.spec.num_nodes)]
        if unpriced is not None:
            # $0/h marks "no price" (cost_tables.unpriced_sessions): the cost report, the
            # within_budget check and the CLI name these sessions; never a silent $0
            self.unpriced.extend(ids)
            log.warning("stage %s: SkyPilot's catalog has no %s price for %s in %s (%s); node session(s) %s "
                        "are recorded UNPRICED ($0/h) and the cost report flags them", self.spec.name,
                        "spot" if spot else "on-demand", itype or "?", zone or region or cloud, unpriced,
                        ", ".join(ids))
        for node_id in ids:
            self.sessions.append(NodeSession(
                node_id=node_id,
                stage=self.spec.name, attempt=self.attempt, provider="skypilot", cloud=cloud,
                region=region, zone=zone, instance_type=itype, spot=spot, price_per_hour=price,
                launched_at=float(launched), ready_at=ready,
                ended_at=end, end_reason=reason))  # type: ignore[arg-type]

    def _watch(self, job_id: int, task: Any, spot: bool) -> tuple[str, Any]:
        """Poll the job until it succeeds, fails, is cancelled or gets preempted."""
        since = self.p._clock()
        running: Any = None
        seen_at = since  # the last poll (s)
        # when the cluster of a job SkyPilot recovered began launching (None: the job's
        # first cluster, stamped by SkyPilot): the poll that saw it RECOVERING, or, when it
        # recovered between two polls, the last poll that saw the old cluster running
        recovery_launched: float | None = None
        recovering_at: float | None = None
        while True:
            records = self.p._records(job_id)
            if not records:
                raise AttemptFailed(f"managed job {job_id} is missing from `sky jobs queue`; "
                                    "was it cancelled or the jobs controller reset?")
            rec = records[0]
            st = _status(rec)
            now = self.p._clock()
            if st in RUNNING:
                if self.driver is not None and _get(rec, "zone"):
                    self.driver.observe(now - self.started, {_get(rec, "zone"): True})
                moved = running is not None and (
                    _get(running, "zone") != _get(rec, "zone") or
                    _get(running, "recovery_count") != _get(rec, "recovery_count"))
                if moved:
                    # SkyPilot recovered between two polls: the old cluster was preempted
                    self._session(running, task, spot, now, "preempted", recovery_launched)
                    recovery_launched = seen_at
                elif running is None and recovering_at is not None:
                    recovery_launched, recovering_at = recovering_at, None
                if (running is None or moved) and self.driver is not None and _get(rec, "zone"):
                    # where SkyPilot placed it: the last launch (and the checkpoint's region
                    # once work is saved) for the policy, as try_launch records it locally
                    self.driver.launched(now - self.started, _get(rec, "zone"), spot)
                running = rec
            elif st in RECOVERING:
                if running is not None:
                    self._session(running, task, spot, now, "preempted", recovery_launched)
                    if self.cfg.rotate_on_preemption:
                        return "preempted", running
                    running, recovering_at = None, now
            elif st in DONE:
                self._session(running or rec, task, spot, _get(rec, "end_at") or now, "completed",
                              recovery_launched)
                return "succeeded", rec
            elif st in CANCELLED:
                if running is not None:
                    self._session(running, task, spot, _get(rec, "end_at") or now, "cancelled",
                                  recovery_launched)
                return "cancelled", rec
            elif st in WAITING:
                if now - since > self.cfg.max_pending_seconds:
                    self.p._cancel_job(job_id)
                    raise AttemptFailed(
                        f"managed job {job_id} did not start within max_pending_seconds="
                        f"{self.cfg.max_pending_seconds:g} (no capacity in {[r.zone for r in task.resources]}?)")
            else:
                if running is not None:
                    self._session(running, task, spot, _get(rec, "end_at") or now, "failed",
                                  recovery_launched)
                return "failed", rec
            seen_at = now
            if self._cancelled():
                self.p._cancel_job(job_id)
            self.p._sleep(self.cfg.poll_seconds)


def catalog_on_demand_prices(spec: StageSpec) -> dict[str, float]:
    """On-demand $/h per candidate zone for the policy driver, by SkyPilot's catalog.

    The catalog prices on-demand per region (as :meth:`_SkyRun._session` bills an on-demand
    session), for the instance type an on-demand job would get there
    (``resolve_instance_type(use_spot=False)``, as ``build_task``). A plan that carried its
    own on-demand price keeps its level: that price is its cheapest on-demand region's
    (fleet/planning/planner.py), so each zone gets it x (the zone's catalog price / the
    cheapest candidate's) -- the catalog's own prices when the plan's came from it, and one
    source of prices per decision when they did not. Zones the catalog lacks are left out
    (the driver then uses the priors' flat price there); {} when it prices none.
    """
    cloud = spec.clouds[0] if spec.clouds else "aws"
    out: dict[str, float] = {}
    for zone in spec.zones:
        try:
            itype = resolve_instance_type(spec, zone=zone, use_spot=False)
            out[zone] = hourly_price(itype, False, zone=zone, cloud=cloud)
        except Exception:  # noqa: BLE001 - not in the catalog: left out (see the docstring)
            continue
    planned = spec.priors.on_demand_price_per_hour
    cheapest = min(out.values(), default=0.0)
    if planned and cheapest > 0:
        out = {z: planned * p / cheapest for z, p in out.items()}
    return out


def catalog_priced(spec: StageSpec, on_demand_prices: dict[str, float] | None = None):
    """``spec.priors`` with the stage's own catalog prices where the plan carried none.

    The policy decides in $/h; a stage planned without prices (e.g. on a market whose
    prices the planner did not know) gets the catalog's spot price per zone (of the spot
    instance type there) and, as its flat on-demand price, the cheapest candidate zone's
    on-demand price of the instance type an on-demand job would get
    (:func:`catalog_on_demand_prices`), as the planner's flat on-demand price is its
    cheapest on-demand region's (fleet/planning/planner.py). What the catalog lacks stays
    missing, and the policy driver then raises an error naming the accelerator; it is
    never priced as the V100 fallback. ``on_demand_prices``: ``catalog_on_demand_prices(spec)``
    when the caller has computed it (``_SkyRun.execute`` does, for the driver too).
    """
    pr = spec.priors
    if pr.spot_price_per_hour and pr.on_demand_price_per_hour:
        return pr
    cloud = spec.clouds[0] if spec.clouds else "aws"
    spot = dict(pr.spot_price_per_hour)
    for zone in spec.zones:
        if zone in spot:
            continue
        try:
            itype = resolve_instance_type(spec, zone=zone, use_spot=True)
            spot[zone] = hourly_price(itype, True, zone=zone, cloud=cloud)
        except Exception:  # noqa: BLE001 - not in the catalog: left missing (see the docstring)
            continue
    # no planned on-demand price here, so these are the catalog's own (not rescaled)
    if not pr.on_demand_price_per_hour and on_demand_prices is None:
        on_demand_prices = catalog_on_demand_prices(spec)
    on_demand = pr.on_demand_price_per_hour or min(on_demand_prices.values(),
                                                     default=pr.on_demand_price_per_hour)
    return replace(pr, spot_price_per_hour=spot, on_demand_price_per_hour=on_demand)
