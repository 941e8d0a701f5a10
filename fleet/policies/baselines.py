"""Reference fleet policies, each as its authors run it, plus the shared deadline net.

* ``on_demand`` — one on-demand instance from start to finish: the cost reference.
* ``greedy_1zone`` — spot in the zone with the best availability before the start
  whenever a launch there succeeds, else wait; on-demand to the end once the slack
  forces it.
* ``uniform_progress_1zone`` / ``uniform_progress_multi`` — Uniform Progress (Can't Be
  Late, NSDI'24), price-blind as published: take spot whenever a launch succeeds and
  stay until preempted; idle and behind ``ep(t) = W t / D`` -> on-demand; on on-demand
  stay until ahead of ``ep(t + 2d)`` AND a spot launch succeeds (it never leaves
  on-demand for idle, so it never pays a restart to come back).
* ``failover_sky`` — SkyPilot managed-job recovery as SkyPilot 0.14 runs it: every
  (re)launch tries the zones cheapest first (the optimizer's order), the preempted zone
  included (skypilot#10021: EAGER_NEXT_REGION never blocks the preempted region).
* ``failover`` — the same with #10021 fixed, as documented: the first recovery attempt
  after a preemption tries the other regions first, then falls back to every zone
  (the preempted one included) in the same attempt — it never blocks a zone for good.
* ``up_eager_failover`` — the multi-region baseline of SkyNomad: Uniform Progress's
  spot/on-demand/idle logic with eager failover's zone order.

Launches are probes (:class:`~fleet.policies.base.Observation` with ``probed``): a policy
lists the zones to try in order; each failed try costs ``probe_seconds``.

Checkpoints: with a usable notice (``JobSpec.notice_saves``) every baseline relies on the
emergency save and takes no periodic checkpoints; without one, Young's interval for a
prior MTTP of 4 h. All but on-demand carry the safety net of :mod:`fleet.policies.safety`.
"""

from __future__ import annotations

import math

import numpy as np

from checkpointing.costmodel import young_interval_hours
from fleet.policies.base import IDLE, ON_DEMAND, Action, JobSpec, JobState, Observation, Policy
from fleet.policies.market_view import launch_action
from fleet.policies.safety import affordable_probes, must_go_on_demand, ticks_until_unsafe

PRIOR_MTTP_HOURS = 4.0
"""Prior mean time to preemption (h) for the baselines' fixed checkpoint interval: about
the median over the nine zones of the 2023 AWS p3.2xlarge availability traces."""


def default_checkpoint_interval_hours(spec: JobSpec, mttp_hours: float = PRIOR_MTTP_HOURS) -> float:
    """Young's interval ``sqrt(2 C M)`` for a fixed prior MTTP (h); inf when C = 0."""
    if spec.checkpoint_hours <= 0:
        return math.inf
    return young_interval_hours(spec.checkpoint_hours, 1.0 / mttp_hours)


def baseline_interval_hours(spec: JobSpec) -> float | None:
    """None (emergency save only) with a usable notice, else Young's interval."""
    return None if spec.notice_saves else default_checkpoint_interval_hours(spec)


def best_history_zone(obs: Observation) -> int:
    """Zone with the highest availability in the history (ties: the first listed)."""
    return int(np.argmax(obs.history.mean(axis=1)))


def _far(obs: Observation, state: JobState) -> int:
    return obs.tick + 10 * int(math.ceil(state.spec.deadline_hours / obs.gap_hours)) + 10


def _on_demand_to_the_end(state: JobState, obs: Observation) -> Action | None:
    """The safety net: once on-demand (or once the slack forces it), stay there to the end."""
    if state.location == ON_DEMAND or must_go_on_demand(state, obs.gap_hours):
        return Action(ON_DEMAND, None, recheck_tick=_far(obs, state), watch=())
    return None


def price_order(obs: Observation, spec: JobSpec, zones=None) -> list[int]:
    """Zones cheapest spot price first (listed order on ties), as SkyPilot's optimizer."""
    zs = list(range(obs.n_zones)) if zones is None else list(zones)
    price = obs.spot_prices(spec)
    return sorted(zs, key=lambda z: (price[z], z))


def eager_failover_order(obs: Observation, spec: JobSpec, preempted_zone: int) -> list[int]:
    """#10021 fixed: other regions first (cheapest first), then the preempted region."""
    order = price_order(obs, spec)
    if preempted_zone < 0 or not obs.regions:
        return order
    bad = obs.regions[preempted_zone]
    return [z for z in order if obs.regions[z] != bad] + [z for z in order if obs.regions[z] == bad]


class OnDemandOnly(Policy):
    """Launch one on-demand instance and run to completion: the cost reference."""

    name = "on_demand"

    def decide(self, state: JobState, obs: Observation) -> Action:
        return Action(ON_DEMAND, None, recheck_tick=_far(obs, state), watch=())


class SingleZoneGreedy(Policy):
    """Spot in one zone whenever a launch there succeeds, else wait; on-demand (to the end)
    once the slack forces it. ``zone=None``: the zone with the best availability before
    the job's start."""

    name = "greedy_1zone"

    def __init__(self, zone: int | None = None) -> None:
        self.zone_arg = zone
        self.zone = 0
        self.interval: float | None = None

    def reset(self, spec: JobSpec, obs: Observation) -> None:
        self.zone = best_history_zone(obs) if self.zone_arg is None else self.zone_arg
        self.interval = baseline_interval_hours(spec)

    def decide(self, state: JobState, obs: Observation) -> Action:
        if (final := _on_demand_to_the_end(state, obs)) is not None:
            return final
        k = ticks_until_unsafe(state, obs.gap_hours)
        if state.location == self.zone:
            return Action(self.zone, self.interval, obs.tick + k, watch=(self.zone,))
        return launch_action([self.zone], IDLE, self.interval, obs.tick + 1)


class SkyPilotFailover(Policy):
    """SkyPilot managed-job recovery as 0.14 runs it (see the module docstring)."""

    name = "failover_sky"
    eager = False

    def __init__(self) -> None:
        self.interval: float | None = None
        self.first_try_after: int = -1  # zone whose region the next attempt skips first

    def reset(self, spec: JobSpec, obs: Observation) -> None:
        self.interval = baseline_interval_hours(spec)
        self.first_try_after = -1

    def decide(self, state: JobState, obs: Observation) -> Action:
        if (final := _on_demand_to_the_end(state, obs)) is not None:
            return final
        k = ticks_until_unsafe(state, obs.gap_hours)
        if state.location >= 0:
            return Action(state.location, self.interval, obs.tick + k, watch=(state.location,))
        if self.eager and state.just_preempted:
            order = eager_failover_order(obs, state.spec, state.last_preempted_zone)
        else:
            order = price_order(obs, state.spec)
        return launch_action(order, IDLE, self.interval, obs.tick + 1)


class Failover(SkyPilotFailover):
    """EAGER_NEXT_REGION with skypilot#10021 fixed (see the module docstring)."""

    name = "failover"
    eager = True


class UniformProgress(Policy):
    """Uniform Progress (Can't Be Late, NSDI'24), single zone or across zones.

    Expected progress ``ep(t) = W t / D``; ``cp`` = checkpointed progress.
    1. Exploitation: take spot whenever a launch succeeds (even when behind) and stay
       until preempted. 2. Idle and ``cp < ep(t)`` -> on-demand. 3. Hysteresis: on
       on-demand, stay until ``cp >= ep(t + 2d)`` and then only for spot (never idle).
    4. The safety net. Multi-zone: the last used zone first, then the listed order
    (``eager=True``: SkyPilot's eager-failover order, cheapest first, the preempted
    region last — SkyNomad's "UP with eager failover").
    """

    def __init__(self, multi_zone: bool = False, zone: int | None = None,
                 eager: bool = False) -> None:
        self.multi = multi_zone or eager
        self.eager = eager
        self.zone_arg = zone
        self.zone = 0
        self.last = -1
        self.interval: float | None = None
        self.name = ("up_eager_failover" if eager else
                     "uniform_progress_multi" if multi_zone else "uniform_progress_1zone")

    def reset(self, spec: JobSpec, obs: Observation) -> None:
        self.zone = best_history_zone(obs) if self.zone_arg is None else self.zone_arg
        self.last = self.zone
        self.interval = baseline_interval_hours(spec)

    def _order(self, state: JobState, obs: Observation) -> list[int]:
        if not self.multi:
            return [self.zone]
        if self.eager:
            return eager_failover_order(obs, state.spec, state.last_preempted_zone
                                        if state.just_preempted else -1)
        rest = [z for z in range(obs.n_zones) if z != self.last]
        return ([self.last] if self.last >= 0 else []) + rest

    def decide(self, state: JobState, obs: Observation) -> Action:
        g = obs.gap_hours
        spec = state.spec
        if must_go_on_demand(state, g):
            return Action(ON_DEMAND, None, obs.tick + 1, watch=())
        k = ticks_until_unsafe(state, g)
        t = state.elapsed_hours
        ep = spec.work_hours * t / spec.deadline_hours
        cp = state.committed_hours + (state.uncommitted_hours if state.location == ON_DEMAND else 0.0)
        if state.location >= 0:  # exploitation: stay until preempted
            self.last = state.location
            return Action(state.location, self.interval, obs.tick + k, watch=(state.location,))
        order = self._order(state, obs)
        if state.location == ON_DEMAND:
            ep_ahead = spec.work_hours * (t + 2 * spec.restart_hours) / spec.deadline_hours
            if cp < ep_ahead:
                return Action(ON_DEMAND, None, obs.tick + 1, watch=())
            return launch_action(order, ON_DEMAND, self.interval, obs.tick + 1)
        if cp < ep:
            return launch_action(order, ON_DEMAND, self.interval, obs.tick + 1,
                                 max_tries=affordable_probes(state, g))
        return launch_action(order, IDLE, self.interval, obs.tick + 1)


def builtin_policy_factories() -> dict:
    """Name -> zero-argument factory of every built-in policy, in table order (the
    registry in :mod:`fleet.policies.registry` and the sweeps use this list)."""
    from fleet.policies.spotfleet import SpotfleetPolicy

    return {
        "on_demand": OnDemandOnly,
        "greedy_1zone": SingleZoneGreedy,
        "uniform_progress_1zone": lambda: UniformProgress(multi_zone=False),
        "uniform_progress_multi": lambda: UniformProgress(multi_zone=True),
        "failover_sky": SkyPilotFailover,
        "failover": Failover,
        "up_eager_failover": lambda: UniformProgress(eager=True),
        "spotfleet": SpotfleetPolicy,
    }
