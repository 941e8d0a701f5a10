"""Jobs without a deadline (``JobSpec.deadline_given=False``, horizon 50 x the work as the
live driver builds it): spotfleet's ``waiting_pays`` promise, checked in the simulator.

``waiting_pays`` idles only while ``(idle so far + expected wait) x e_now < (e_now - e_b) x
work left``. At an idle decision ``e_b`` ($/useful h) is at least the zone's spot $/h and
``e_now`` at most on-demand's cost per useful hour from idle, ``od x (rem + d) / rem``, so
the idle time before the last idle decision is below ``rem (1 - p rem / (od (rem + d)))``,
which grows with ``rem`` <= W; the last idle decision idles one tick more. Hence, in hours,
with ``p`` the lowest spot $/h of the run's window and ``od`` the dearest on-demand $/h::

    idle in all <= W (1 - (p / od) W / (W + d)) + one tick

(< W + one tick: the job always finishes). The multi-day droughts of ``volatile_config``
(every zone down 36-52 h) end the wait instead of renewing it.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from fleet.market.regimes import regime_market, volatile_config
from fleet.policies.base import IDLE, JobSpec
from fleet.policies.spotfleet import SpotfleetParams, SpotfleetPolicy
from fleet.simulation.engine import region_on_demand_prices, simulate
from fleet.simulation.families import FAMILIES
from fleet.simulation.market import Market
from fleet.simulation.no_deadline import no_deadline_spec, run_capped

VOLATILE = FAMILIES["volatile"]


def idle_bound_hours(market: Market, spec: JobSpec, start: int, window_h: float) -> float:
    """The module docstring's bound (h) for a run of ``spec`` from ``start`` within
    ``window_h`` hours."""
    sp, od = region_on_demand_prices(market, spec)
    end = start + int(math.ceil(window_h / market.gap_hours))
    p = float(sp[:, start:end].min())
    w, d = spec.work_hours, spec.restart_hours
    return w * (1.0 - (p / float(od.max())) * w / (w + d)) + market.gap_hours


def _longest_outage_start(m: Market, after_hours: float) -> tuple[int, float]:
    """(first tick, hours) of the longest stretch with every zone down after ``after_hours``."""
    down = ~m.available.any(axis=0)
    best, at, i = 0, -1, int(after_hours / m.gap_hours)
    while i < m.n_ticks:
        if down[i]:
            j = i
            while j < m.n_ticks and down[j]:
                j += 1
            if j - i > best:
                best, at = j - i, i
            i = j
        else:
            i += 1
    return at, best * m.gap_hours


@pytest.mark.parametrize("wait", ["cheapest", "set"])
@pytest.mark.parametrize("notice", [0.0, 120.0])
def test_no_deadline_jobs_finish_and_idle_within_the_budget_through_droughts(notice, wait):
    """Seeds 12 and 13 of the volatile family: starts at the first tick of their longest
    market-wide outage (48.7 h and 51.7 h) and one tick before it (the history then shows
    zones up), plus 10 of the family's starts on seed 10 (its 11.9 h outage at 168 h
    included). Every job finishes and idles within the bound; with ``no_deadline_wait="set"``
    it does wait in some of them (the default waits only for the cheapest zone, whose
    expected outage here exceeds the budget, and never idles in these cases)."""
    spec = no_deadline_spec(VOLATILE.spec(3.0, notice))
    pol = lambda: SpotfleetPolicy(SpotfleetParams(no_deadline_wait=wait))  # noqa: E731
    cases = []
    for seed in (12, 13):
        m = regime_market(volatile_config(hours=24.0 * 12), seed)
        at, hours = _longest_outage_start(m, 168.0)
        assert hours > 36.0  # a multi-day drought of every zone
        cases += [(m, at), (m, at - 1)]
    m10 = regime_market(volatile_config(hours=24.0 * 12), 10)
    cases += [(m10, s) for s in VOLATILE.starts(m10, VOLATILE.spec(3.0, 0.0), 10)]
    idled = 0.0
    for m, s in cases:
        window = (m.n_ticks - s - 1) * m.gap_hours
        run = run_capped(pol(), m, spec, s, min(window, 60.0))
        bound = idle_bound_hours(m, spec, s, run.window_hours)
        assert run.finished, (s, run.result)
        assert run.idle_hours <= bound + 1e-9, (s, run.idle_hours, bound)
        assert bound < spec.work_hours + m.gap_hours
        idled += run.idle_hours
    if wait == "set":
        assert idled > 0.0  # it does wait (the default "cheapest" rule never idles here)


def _cheap_flaky_dear_steady() -> Market:
    """Three zones of one region, 5-min ticks, 20 days: ``a`` 1.00 $/h, up 5 h then down
    0.5 h; ``b`` 1.05 $/h, up 1 h in 5 (its launches almost surely fail); ``c`` 2.80 $/h,
    always up; on-demand 3.06 $/h."""
    g = 300.0
    n = int(20 * 24 * 3600 / g)
    h = np.arange(n) * g / 3600.0
    avail = np.stack([(h % 5.5) < 5.0, (h % 5.0) < 1.0, np.ones(n, dtype=bool)])
    sp = np.stack([np.full(n, 1.0), np.full(n, 1.05), np.full(n, 2.8)])
    return Market(zones=("us-east-1a", "us-east-1b", "us-east-1c"), gap_seconds=g,
                  available=avail, spot_price=sp, on_demand_price=np.full(3, 3.06))


@pytest.mark.parametrize("offset", [3, 33, 63])
def test_no_deadline_waits_for_the_cheap_zone_not_for_a_zone_believed_down(offset):
    """Preempted in ``a`` (back in 0.5 h), the job without a deadline compared the wait with
    ``b``, 0.05 $/h dearer but almost surely down (belief 0.2 from its history, less once
    tried): waiting "saved" nothing, so it tried ``a``, ``b`` and ran on ``c`` at 2.8 $/h
    until the move rule took it back (before 2026-11-27: 14.40 / 15.09 / 14.40 $ at offsets
    3 / 33 / 63; after: 12.33 / 13.71 / 12.33 $). ``e_now`` is now the best zone *believed
    up* (``c``), as the docstring says: after the first preemption waiting 0.5 h for ``a``
    pays. (Near the end of the job the idle budget, work left x relative saving, can be
    spent: offset 33 finishes its last 0.6 h on ``c``.)"""
    m = _cheap_flaky_dear_steady()
    spec = no_deadline_spec(JobSpec(work_hours=12.0, deadline_hours=12.0, notice_seconds=120.0))
    start = int(14 * 24 * 3600 / m.gap_seconds) + offset  # 14 days of history; a is up
    tl: list[tuple[int, int]] = []
    r = simulate(SpotfleetPolicy(), m, spec, start, timeline=tl, horizon_hours=60.0)
    assert math.isfinite(r.completion_hours)
    assert r.preemptions >= 2  # the 0.5 h outages of a were met
    locs = [loc for _, loc in tl]
    assert locs[0] == 0
    after = next(loc for loc in locs if loc != 0)
    assert after == IDLE, tl  # waits for a (before: launched c)
    assert r.on_demand_hours == 0.0
    assert r.cost < 12.0 * 1.15  # the work at about a's price (14.40-15.09 $ before)


def test_horizon_cap_changes_nothing_for_a_run_that_ends_within_it():
    """``simulate(..., horizon_hours=...)`` only stops a run early: a deadline job that ends
    within the cap is the same run, and one cut short is unfinished."""
    m = regime_market(volatile_config(hours=24.0 * 12), 10)
    spec = VOLATILE.spec(1.5, 0.0)
    s = VOLATILE.starts(m, spec, 3)[1]
    full = simulate(SpotfleetPolicy(), m, spec, s)
    assert math.isfinite(full.completion_hours)
    capped = simulate(SpotfleetPolicy(), m, spec, s, horizon_hours=full.completion_hours + 1.0)
    assert capped == full
    short = simulate(SpotfleetPolicy(), m, spec, s, horizon_hours=0.5 * spec.work_hours)
    assert math.isinf(short.completion_hours) and not short.deadline_met
