"""Deterministic replays of a job through ``PolicyDriver`` against a ``CapacitySchedule``
(no wall clock): the driver the local fleet builds and a tick-by-tick stand-in for the
training job. Shared by the live-policy tests of this folder."""

from __future__ import annotations

import numpy as np

from fleet.contract import RunPriors
from fleet.emulation.injector import CapacitySchedule
from fleet.policies.base import Action, Policy
from fleet.providers.decisions import PolicyDriver, Progress

F = 1800.0  # market seconds per wall second of the local fleet's default time scale
STEP_S = 0.035 * F  # market seconds per step of the example (step sleep 0.03 s + 5 ms)


def rotating() -> CapacitySchedule:
    zones = ["us-east-1a", "us-east-1b", "us-west-2a"]
    drill = CapacitySchedule.rotating(zones)
    return CapacitySchedule(drill.traces.values(), offset_seconds=72 * 3600.0)


def driver(s: CapacitySchedule, steps: int, deadline: float | None = None,
           prices: dict[str, float] | None = None,
           policy: Policy | str = "spotfleet") -> PolicyDriver:
    """The driver the local fleet builds for ``spotfleet local-fleet run`` (CLI priors)."""
    zones = list(s.zones)
    gap = s.traces[zones[0]].gap_seconds
    prior = np.stack([s.past(z, 0.0, int(24 * 30 * 3600 / gap)) for z in zones])
    pri = RunPriors(work_seconds=steps * STEP_S, notice_seconds=6 * F, on_demand_price_per_hour=3.06,
                    spot_price_per_hour=prices or {z: 0.918 for z in zones})
    return PolicyDriver(policy, zones, priors=pri, deadline_seconds=deadline, gap_seconds=gap,
                        prior_history=prior, regions=[s.region_of(z) for z in zones])


def replay(s: CapacitySchedule, d: PolicyDriver, steps: int, start_step: int = 0,
           location: str | None = None, t0: float = 0.0, limit_h: float = 48.0,
           held: list | None = None):
    """Run the job against the schedule tick by tick: notices always save (committed =
    step), a launch starts training after the restart. Returns (finished at market s or
    None, ticks idle while some zone was up); ``held`` (a list) gets the location of
    every tick."""
    gap = d.gap_seconds
    restart = d.priors.restart_seconds
    step, t, ready, idle_up = float(start_step), t0, t0, 0
    while t < t0 + limit_h * 3600.0:
        if location not in (None, "on-demand") and not s.is_up(location, t):
            d.preempted(t, location)
            location = None
        p = Progress(total_steps=steps, step=int(step), committed_step=int(step), step_seconds=STEP_S)
        dec = d.decide(t, p, location)
        lau, _ = d.try_launch(t, dec, lambda z, now=t: s.is_up(z, now), location)
        new = None if lau is None else (lau.zone if lau.spot else "on-demand")
        if new != location:
            location, ready = new, t + (restart if new is not None else 0.0)
        if held is not None:
            held.append(location)
        if location is None and s.up_zones(t):
            idle_up += 1
        if location is not None:
            step += max(0.0, t + gap - max(ready, t)) / STEP_S
            if step >= steps:
                return t + gap, idle_up
        t += gap
    return None, idle_up


class RestartSpy(Policy):
    """Records the restart (h) the policy is told at each decision; spot in the first zone.
    The live providers' tests check that it is the restart they measure, not the plan's."""

    name = "restart-spy"

    def __init__(self) -> None:
        self.told: list[float] = []

    def decide(self, state, obs) -> Action:
        self.told.append(state.spec.restart_hours)
        return Action(0)
