"""Drive the local fleet's (re)launch decisions with a fleet policy from fleet/policies.

The simulator's policies (``OnDemandOnly``, ``Failover``, ``UniformProgress``,
``SpotfleetPolicy`` ...) decide per market tick from a ``JobState`` and an
``Observation`` of the market's past. ``FleetPolicyRelaunch`` builds both from what the
local fleet knows when it must place the node group — the replayed capacity up to the
current emulated tick, the job's checkpointed progress, its preemptions — and turns the
policy's ``Action`` into a ``Launch``: a zone index -> spot there, ``ON_DEMAND`` ->
on-demand, ``IDLE`` -> wait and ask again.

The policy is asked at each launch decision (start, after every preemption, while
waiting for capacity), not at every tick of a running session. All hours are EMULATED
hours (wall seconds x the time scale factor / 3600).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fleet.emulation.injector import CapacitySchedule, TimeScale
from fleet.policies.base import IDLE, ON_DEMAND, JobSpec, JobState, Observation, Policy
from fleet.providers.local.relaunch import Launch, RelaunchContext


@dataclass
class FleetPolicyRelaunch:
    """Adapter: ``choose(ctx)`` of the local fleet, decided by a ``fleet.policies`` policy."""

    policy: Policy
    job: JobSpec  # work and deadline in emulated hours, prices, restart and checkpoint cost
    schedule: CapacitySchedule
    time_scale: TimeScale
    block_seconds: float = 0.0  # the policy handles preempted zones itself
    _reset: bool = field(default=False, repr=False)
    _seen_preemptions: int = field(default=0, repr=False)

    def __post_init__(self) -> None:
        gaps = {tr.gap_seconds for tr in self.schedule.traces.values()}
        if len(gaps) != 1:
            raise ValueError(f"the market's zone traces have different tick lengths {sorted(gaps)} s; "
                             "a fleet policy needs one tick length for every zone")
        self.gap_seconds = gaps.pop()

    def _observation(self, zones: list[str], trace_t: float) -> Observation:
        tick = int((trace_t + self.schedule.offset_seconds) // self.gap_seconds)
        idx = np.arange(tick + 1)
        history = np.stack([self.schedule.traces[z].up()[idx % self.schedule.traces[z].n_ticks]
                            for z in zones])
        return Observation(tick=tick, gap_hours=self.gap_seconds / 3600.0, zones=tuple(zones),
                           available=history[:, -1].copy(), history=history)

    def choose(self, ctx: RelaunchContext) -> Launch | None:
        zones = list(ctx.zones)
        trace_t = self.time_scale.to_trace(ctx.now - ctx.started_at)
        obs = self._observation(zones, trace_t)
        if not self._reset:
            self.policy.reset(self.job, obs)
            self._reset = True
        just_preempted = ctx.preemptions > self._seen_preemptions
        self._seen_preemptions = ctx.preemptions
        last = zones.index(ctx.previous_zone) if ctx.previous_zone in zones else -1
        state = JobState(
            tick=obs.tick, start_tick=int(self.schedule.offset_seconds // self.gap_seconds),
            elapsed_hours=trace_t / 3600.0, spec=self.job, location=IDLE,
            committed_hours=ctx.committed_fraction * self.job.work_hours,
            preemptions=ctx.preemptions, last_preempted_zone=last,
            just_preempted=just_preempted, launches=ctx.launches)
        action = self.policy.decide(state, obs)
        name = getattr(self.policy, "name", type(self.policy).__name__)
        if action.target == ON_DEMAND:
            return Launch(ctx.on_demand_zone or zones[0], spot=False,
                          reason=f"policy {name}: on-demand (slack "
                                 f"{state.slack_hours:.2f} emulated h)")
        if action.target == IDLE or not 0 <= action.target < len(zones):
            return None
        zone = zones[action.target]
        if zone not in ctx.up_zones:
            return None  # the policy chose a zone the market has no capacity in: ask again
        return Launch(zone, spot=True, reason=f"policy {name}: spot in {zone}")
