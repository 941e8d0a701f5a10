"""Reference fleet policies: on-demand only, single-zone greedy, SkyPilot-style failover,
and Uniform Progress (Can't Be Late, NSDI'24) in one zone and across zones.

All of them checkpoint at one fixed interval (Young's, from a prior mean time to
preemption, see :func:`default_checkpoint_interval_hours`) and, except on-demand only,
carry the same deadline safety net (:mod:`fleet.policies.safety`).
"""

from __future__ import annotations

import math

import numpy as np

from checkpointing.costmodel import young_interval_hours
from fleet.policies.base import IDLE, ON_DEMAND, Action, JobSpec, JobState, Observation, Policy
from fleet.policies.safety import must_go_on_demand, ticks_until_unsafe

PRIOR_MTTP_HOURS = 4.0
"""Prior mean time to preemption (h) for the baselines' fixed checkpoint interval: about
the median over the nine zones of the 2023 AWS p3.2xlarge availability traces."""


def default_checkpoint_interval_hours(spec: JobSpec, mttp_hours: float = PRIOR_MTTP_HOURS) -> float:
    """Young's interval ``sqrt(2 C M)`` for a fixed prior MTTP (h); inf when C = 0."""
    if spec.checkpoint_hours <= 0:
        return math.inf
    return young_interval_hours(spec.checkpoint_hours, 1.0 / mttp_hours)


def best_history_zone(obs: Observation) -> int:
    """Zone with the highest availability so far (ties: the first listed)."""
    return int(np.argmax(obs.history.mean(axis=1)))


def _far(obs: Observation, state: JobState) -> int:
    return obs.tick + 10 * int(math.ceil(state.spec.deadline_hours / obs.gap_hours)) + 10


def _on_demand_to_the_end(state: JobState, obs: Observation) -> Action | None:
    """The safety net: once on-demand (or once the slack forces it), stay there to the end."""
    if state.location == ON_DEMAND or must_go_on_demand(state, obs.gap_hours):
        return Action(ON_DEMAND, None, recheck_tick=_far(obs, state), watch=())
    return None


class OnDemandOnly(Policy):
    """Launch one on-demand instance and run to completion: the cost reference."""

    name = "on_demand"

    def decide(self, state: JobState, obs: Observation) -> Action:
        return Action(ON_DEMAND, None, recheck_tick=_far(obs, state), watch=())


class SingleZoneGreedy(Policy):
    """Spot in one zone whenever it has capacity, else wait; on-demand (to the end) once
    the slack forces it. ``zone=None`` picks the zone with the best availability history
    at the job's start (what a user reading the past would pick)."""

    name = "greedy_1zone"

    def __init__(self, zone: int | None = None) -> None:
        self.zone_arg = zone
        self.zone = 0
        self.interval = math.inf

    def reset(self, spec: JobSpec, obs: Observation) -> None:
        self.zone = best_history_zone(obs) if self.zone_arg is None else self.zone_arg
        self.interval = default_checkpoint_interval_hours(spec)

    def decide(self, state: JobState, obs: Observation) -> Action:
        if (final := _on_demand_to_the_end(state, obs)) is not None:
            return final
        k = ticks_until_unsafe(state, obs.gap_hours)
        if obs.available[self.zone]:
            return Action(self.zone, self.interval, obs.tick + k, watch=(self.zone,))
        return Action(IDLE, None, obs.tick + k, watch=(self.zone,))


class Failover(Policy):
    """SkyPilot managed-job recovery, EAGER_NEXT_REGION style, plus the safety net.

    Launch in the first zone (listed order) with capacity; after a preemption relaunch in
    the next zone with capacity, round robin. The preempted zone is blocked until the job
    has launched elsewhere (SkyPilot 0.14 does not block it, skypilot issue #10021;
    spotfleet does). Waits while no zone has capacity; on-demand to the end once the
    slack forces it.
    """

    name = "failover"

    def __init__(self) -> None:
        self.blocked = -1
        self.next_from = 0
        self.interval = math.inf

    def reset(self, spec: JobSpec, obs: Observation) -> None:
        self.blocked = -1
        self.next_from = 0
        self.interval = default_checkpoint_interval_hours(spec)

    def decide(self, state: JobState, obs: Observation) -> Action:
        if (final := _on_demand_to_the_end(state, obs)) is not None:
            return final
        k = ticks_until_unsafe(state, obs.gap_hours)
        if state.location >= 0:
            return Action(state.location, self.interval, obs.tick + k, watch=(state.location,))
        if state.just_preempted:
            self.blocked = state.last_preempted_zone
            self.next_from = (state.last_preempted_zone + 1) % obs.n_zones
        n = obs.n_zones
        for step in range(n):
            z = (self.next_from + step) % n
            if z != self.blocked and obs.available[z]:
                self.blocked = -1
                return Action(z, self.interval, obs.tick + k, watch=(z,))
        return Action(IDLE, None, obs.tick + k, watch=None)


class UniformProgress(Policy):
    """Uniform Progress (Can't Be Late, NSDI'24), single zone or across zones.

    Expected progress ``ep(t) = W t / D``; ``cp`` = checkpointed progress.
    1. Exploitation: take spot whenever it is available (even when behind) and stay until
       preempted. 2. Uniform progress: idle and ``cp < ep(t)`` -> on-demand to catch up.
    3. Hysteresis: on on-demand, stay until ``cp >= ep(t + 2d)``. 4. Safety net (shared
    with the other policies). The multi-zone variant takes spot in any zone with capacity
    (the last used zone first, then the listed order).
    """

    def __init__(self, multi_zone: bool = False, zone: int | None = None) -> None:
        self.multi = multi_zone
        self.zone_arg = zone
        self.zone = 0
        self.last = -1
        self.interval = math.inf
        self.name = "uniform_progress_multi" if multi_zone else "uniform_progress_1zone"

    def reset(self, spec: JobSpec, obs: Observation) -> None:
        self.zone = best_history_zone(obs) if self.zone_arg is None else self.zone_arg
        self.last = self.zone
        self.interval = default_checkpoint_interval_hours(spec)

    def _spot_zone(self, obs: Observation) -> int:
        if not self.multi:
            return self.zone if obs.available[self.zone] else -1
        if self.last >= 0 and obs.available[self.last]:
            return self.last
        up = np.flatnonzero(obs.available)
        return int(up[0]) if up.size else -1

    def decide(self, state: JobState, obs: Observation) -> Action:
        g = obs.gap_hours
        spec = state.spec
        if must_go_on_demand(state, g):
            return Action(ON_DEMAND, None, obs.tick + 1, watch=())
        k = ticks_until_unsafe(state, g)
        t = state.elapsed_hours
        ep = spec.work_hours * t / spec.deadline_hours
        cp = state.committed_hours + (state.uncommitted_hours if state.location == ON_DEMAND else 0.0)
        watch = None if self.multi else (self.zone,)
        if state.location >= 0:  # exploitation: stay until preempted
            return Action(state.location, self.interval, obs.tick + k, watch=(state.location,))
        if state.location == ON_DEMAND:
            ep_ahead = spec.work_hours * (t + 2 * spec.restart_hours) / spec.deadline_hours
            if cp < ep_ahead:
                return Action(ON_DEMAND, None, obs.tick + 1, watch=())
        z = self._spot_zone(obs)
        if z >= 0:
            self.last = z
            return Action(z, self.interval, obs.tick + k, watch=(z,))
        if cp < ep:
            return Action(ON_DEMAND, None, obs.tick + 1, watch=())
        # idle until we fall behind the line or capacity returns
        behind_at = cp * spec.deadline_hours / spec.work_hours  # elapsed hours where ep = cp
        k_behind = max(1, int(math.ceil((behind_at - t) / g)))
        return Action(IDLE, None, obs.tick + min(k, k_behind), watch=watch)
