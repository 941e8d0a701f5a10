"""The ``skypilot`` fleet provider: a stage is a SkyPilot managed job.

Launch, watch and cancel go through the SkyPilot SDK (API server requests:
``sky.jobs.launch`` / ``sky.jobs.queue_v2`` / ``sky.jobs.cancel``, results with
``sky.get``). Job records become ``NodeSession`` objects (one per node per cluster
the job ran on), priced from SkyPilot's catalog.

Zone rotation is spotfleet's job. SkyPilot 0.14's ``EAGER_NEXT_REGION`` recovery
does not block the region that was just preempted (skypilot issue #10021), so the
job may come back in the zone that is losing capacity. When a job turns RECOVERING
(SkyPilot saw the cluster preempted) the provider cancels it and relaunches the stage
as a new managed job whose ``resources.ordered`` list no longer contains the
preempted zone (blocked for ``policy.block_seconds``), with on-demand when the
deadline needs it (``RelaunchPolicy``). The training process resumes from the latest
checkpoint in ``spec.checkpoint_uri`` (an object store every zone can reach).

Training events stay on the VM (``SPOTFLEET_EVENTS_FILE``); this provider reports its
own events (launch, preempted, relaunch, completed, failed, cancelled).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from checkpointing.events import Event
from fleet.providers.attempt import AttemptRecord
from fleet.providers.base import AttemptFailed, FleetProvider, NodeSession, StageResult, StageSpec
from fleet.providers.local.provider_events import provider_event
from fleet.providers.local.relaunch import RelaunchContext, RelaunchPolicy
from fleet.providers.skypilot.tasks import SkyTaskOptions, build_task, hourly_price

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
    policy: Any = field(default_factory=lambda: RelaunchPolicy(block_seconds=3600.0))
    poll_seconds: float = 15.0
    max_pending_seconds: float = 3600.0  # job not running this long -> AttemptFailed
    rotate_on_preemption: bool = True  # False: leave recovery entirely to SkyPilot
    restart_seconds: float = 360.0  # estimate of one relaunch, for the deadline rule


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

    def _cancelled(self) -> bool:
        with self.p._lock:
            return self.spec.name in self.p._cancelled

    def execute(self) -> StageResult:
        spec = self.spec
        zones = list(spec.zones)
        started = self.p._clock()
        blocked: dict[str, float] = {}
        prev_zone: str | None = None
        relaunches = 0
        while True:
            if self._cancelled():
                self._emit(provider_event("cancelled", stage=spec.name))
                raise AttemptFailed(f"stage {spec.name!r} was cancelled")
            now = self.p._clock()
            candidates, spot, reason = self._placement(zones, blocked, prev_zone, started, now)
            if candidates is None:  # every zone blocked: wait for the first block to expire
                self._sleep_until(min(blocked.values()))
                continue
            task = build_task(spec, candidates, use_spot=spot, options=self.cfg.options)
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
                                      relaunch=relaunches, job_id=job_id, task_name=name))
            outcome, record = self._watch(job_id, task, spot)
            if outcome == "succeeded":
                self._emit(provider_event("completed", zone=_get(record, "zone"), job_id=job_id,
                                          preemptions=relaunches))
                return StageResult(stage=spec.name, attempt=self.attempt, completed=True,
                                   sessions=list(self.sessions), events=list(self.events),
                                   final_step=None,
                                   info={"provider": "skypilot", "jobs": list(self.jobs),
                                         "preemptions": relaunches,
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
            if zone:
                blocked[zone] = self.p._clock() + float(getattr(self.cfg.policy, "block_seconds", 0.0))
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

    def _placement(self, zones: list[str], blocked: dict[str, float], prev_zone: str | None,
                   started: float, now: float) -> tuple[list[str] | None, bool, str]:
        """Candidate zones (ordered) and spot/on-demand for the next managed job."""
        if not self.spec.use_spot:
            return zones, False, "StageSpec.use_spot is False"
        open_zones = [z for z in zones if blocked.get(z, 0.0) <= now]
        if zones and not open_zones:
            return None, True, "every candidate zone is blocked"
        ctx = RelaunchContext(zones=zones, up_zones=open_zones, now=now, started_at=started,
                              previous_zone=prev_zone, blocked_until=dict(blocked),
                              deadline_seconds=self.spec.deadline_seconds,
                              restart_seconds=self.cfg.restart_seconds,
                              remaining_work_seconds=None)
        launch = self.cfg.policy.choose(ctx) if zones else None
        if launch is None:
            return open_zones, True, "SkyPilot chooses among the candidate zones"
        if not launch.spot:
            return zones, False, launch.reason
        rest = [z for z in open_zones if z != launch.zone]
        return [launch.zone, *rest], True, launch.reason

    def _sleep_until(self, t: float) -> None:
        self.p._sleep(max(0.0, min(t - self.p._clock(), self.cfg.poll_seconds)))

    def _session(self, record: Any, task: Any, spot: bool, end: float | None, reason: str) -> None:
        zone = _get(record, "zone") or ""
        region = _get(record, "region") or (zone[:-1] if zone else "")
        cloud = (_get(record, "cloud") or (self.spec.clouds[0] if self.spec.clouds else "aws"))
        cloud = str(cloud).lower()
        res = next((r for r in task.resources if r.zone == zone), next(iter(task.resources)))
        itype = res.instance_type or ""
        try:
            price = hourly_price(itype, spot, zone=zone or None, region=region or None, cloud=cloud)
        except Exception:  # catalog without this entry: record the session unpriced
            price = 0.0
        launched = _get(record, "last_recovered_at") or _get(record, "submitted_at") or end or 0.0
        for rank in range(self.spec.num_nodes):
            self.sessions.append(NodeSession(
                node_id=f"{self.spec.name}-a{self.attempt}-j{_get(record, 'job_id')}"
                        f"-r{_get(record, 'recovery_count') or 0}-n{rank}",
                stage=self.spec.name, attempt=self.attempt, provider="skypilot", cloud=cloud,
                region=region, zone=zone, instance_type=itype, spot=spot, price_per_hour=price,
                launched_at=float(launched), ready_at=_get(record, "start_at"),
                ended_at=end, end_reason=reason))  # type: ignore[arg-type]

    def _watch(self, job_id: int, task: Any, spot: bool) -> tuple[str, Any]:
        """Poll the job until it succeeds, fails, is cancelled or gets preempted."""
        since = self.p._clock()
        running: Any = None
        while True:
            records = self.p._records(job_id)
            if not records:
                raise AttemptFailed(f"managed job {job_id} is missing from `sky jobs queue`; "
                                    "was it cancelled or the jobs controller reset?")
            rec = records[0]
            st = _status(rec)
            now = self.p._clock()
            if st in RUNNING:
                if running is not None and (_get(running, "zone") != _get(rec, "zone") or
                                            _get(running, "recovery_count") != _get(rec, "recovery_count")):
                    # SkyPilot recovered between two polls: the old cluster was preempted
                    self._session(running, task, spot, now, "preempted")
                running = rec
            elif st in RECOVERING:
                if running is not None:
                    self._session(running, task, spot, now, "preempted")
                    if self.cfg.rotate_on_preemption:
                        return "preempted", running
                    running = None
            elif st in DONE:
                self._session(running or rec, task, spot, _get(rec, "end_at") or now, "completed")
                return "succeeded", rec
            elif st in CANCELLED:
                if running is not None:
                    self._session(running, task, spot, _get(rec, "end_at") or now, "cancelled")
                return "cancelled", rec
            elif st in WAITING:
                if now - since > self.cfg.max_pending_seconds:
                    self.p._cancel_job(job_id)
                    raise AttemptFailed(
                        f"managed job {job_id} did not start within max_pending_seconds="
                        f"{self.cfg.max_pending_seconds:g} (no capacity in {[r.zone for r in task.resources]}?)")
            else:
                if running is not None:
                    self._session(running, task, spot, _get(rec, "end_at") or now, "failed")
                return "failed", rec
            if self._cancelled():
                self.p._cancel_job(job_id)
            self.p._sleep(self.cfg.poll_seconds)
