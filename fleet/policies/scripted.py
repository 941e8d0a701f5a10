"""A policy that replays a fixed per-tick plan (e.g. the omniscient DP's schedule)."""

from __future__ import annotations

from collections.abc import Sequence

from fleet.policies.base import ON_DEMAND, Action, JobState, Observation, Policy


class ScriptedPolicy(Policy):
    """Plays ``plan[k]`` (a location int) at tick ``start_tick + k``; on-demand after the
    plan ends. No periodic checkpoints (``checkpoint_interval_hours=None``): with a
    usable notice this is exactly the offline model of :mod:`fleet.simulation.omniscient`.
    """

    name = "scripted"

    def __init__(self, plan: Sequence[int], start_tick: int) -> None:
        self.plan = tuple(int(x) for x in plan)
        self.start_tick = int(start_tick)

    def decide(self, state: JobState, obs: Observation) -> Action:
        k = obs.tick - self.start_tick
        target = self.plan[k] if 0 <= k < len(self.plan) else ON_DEMAND
        return Action(target, None, obs.tick + 1)
