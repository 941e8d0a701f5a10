"""Jobs without a deadline in the simulator: the live driver's far horizon, idle time, a floor.

A job with no deadline of its own reaches the policy as the live driver builds it
(:class:`fleet.providers.decisions.PolicyDriver`): ``deadline_hours`` = ``no_deadline_factor``
(50) x the work, ``deadline_given=False``. Such a horizon (600 h for a 12 h job) outruns
every trace in the shared data, so a run is capped at a window that fits the market
(``simulate(..., horizon_hours=...)``): a job that has not finished by then counts as
unfinished (``completion_hours`` inf), and its cost is what it spent until then.

Units: hours, $ and $/h.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from fleet.policies.base import IDLE, NO_DEADLINE_FACTOR, JobSpec, Policy
from fleet.simulation.engine import RunResult, region_on_demand_prices, simulate
from fleet.simulation.market import Market

__all__ = ["NO_DEADLINE_FACTOR", "NoDeadlineRun", "idle_hours", "no_deadline_spec", "run_capped",
           "spot_floor_usd", "window_hours"]


def no_deadline_spec(spec: JobSpec, factor: float = NO_DEADLINE_FACTOR) -> JobSpec:
    """``spec`` as the live driver hands a job without a deadline to the policy: horizon
    ``factor`` x the work (h), ``deadline_given=False``; everything else unchanged."""
    return dataclasses.replace(spec, deadline_hours=factor * spec.work_hours, deadline_given=False)


def idle_hours(timeline: list[tuple[int, int]], end_tick: int, gap_hours: float) -> float:
    """Hours the job held no instance (h): from each decision that left it idle to the
    next decision (or to ``end_tick``, where an unfinished run stops), from the
    ``(tick, location)`` timeline :func:`simulate` fills. Failed launch tries from a held
    location (each ``probe_seconds``) are not counted."""
    out = 0
    for k, (tick, loc) in enumerate(timeline):
        if loc == IDLE:
            nxt = timeline[k + 1][0] if k + 1 < len(timeline) else end_tick
            out += nxt - tick
    return out * gap_hours


def spot_floor_usd(market: Market, spec: JobSpec, start_tick: int, window_hours: float) -> float:
    """A lower limit on any policy's cost ($) for a job started at ``start_tick`` that
    finishes within ``window_hours``: the work plus one restart (a job launches at least
    once) billed at the lowest $/h anywhere in the window -- the cheapest zone's lowest
    spot price, whether or not it had capacity, or on-demand if that were lower. No
    preemptions, no saves, no egress."""
    sp, od = region_on_demand_prices(market, spec)
    end = min(market.n_ticks, start_tick + int(math.ceil(window_hours / market.gap_hours)))
    low = min(float(sp[:, start_tick:end].min()), float(od.min()))
    return (spec.work_hours + spec.restart_hours) * low


@dataclass(frozen=True)
class NoDeadlineRun:
    """One run (hours, $): the simulator's result, the idle hours and whether it finished
    within the window."""

    result: RunResult
    idle_hours: float
    window_hours: float

    @property
    def finished(self) -> bool:
        return math.isfinite(self.result.completion_hours)


def run_capped(policy: Policy, market: Market, spec: JobSpec, start_tick: int,
               window_hours: float) -> NoDeadlineRun:
    """:func:`simulate` ``policy`` for ``spec`` from ``start_tick``, stopped after
    ``window_hours`` (h) at most, with its idle hours (:func:`idle_hours`)."""
    timeline: list[tuple[int, int]] = []
    r = simulate(policy, market, spec, start_tick, timeline=timeline, horizon_hours=window_hours)
    g = market.gap_hours
    if math.isfinite(r.completion_hours):
        end = start_tick + int(math.ceil(r.completion_hours / g - 1e-9))
    else:
        end = start_tick + int(math.ceil(window_hours / g))
    return NoDeadlineRun(r, idle_hours(timeline, end, g), window_hours)


def window_hours(market: Market, starts: list[int]) -> float:
    """The longest window (h) every start of ``starts`` has before the market ends, less
    one tick: one cap for all of the market's runs, so that they are comparable."""
    return (market.n_ticks - max(starts) - 1) * market.gap_hours
