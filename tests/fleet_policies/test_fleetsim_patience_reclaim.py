"""``SpotfleetParams.patience_reclaim="other_regions"`` (session 19, opt-in): for the neighbour
window after a preemption of this job, the patience rule does not idle for a zone of the region
that preempted it; it tries the region's zones in their order and otherwise launches in the
next zone (the cheapest outside the region is the one it may wait for).

Found on the tuning set's H100 D/W 1.2 without notice (start 75): us-east4-a preempted the
job, the patience rule idled two ticks for us-east4-b / us-east4-a (both down), re-entered
us-east4-a, was preempted again and the slack was gone: 2.4 h on on-demand
(docs/fleet-policies-tuning-log.md, session 19)."""

from __future__ import annotations

import numpy as np

from fleet.policies.base import JobSpec
from fleet.policies.spotfleet import SpotfleetParams, SpotfleetPolicy
from fleet.simulation.engine import simulate
from fleet.simulation.market import Market

HIST = 288  # 24 h of 300 s ticks before the job
HIT = HIST + 24  # the job's zone (and its region) is reclaimed 2 h into the job


def _market() -> Market:
    """Two cheap zones in one region (a, b: 1.0 $/h) and a dearer one in another (c: 1.3 $/h),
    all up before the job but for one-tick outages (mean outage one tick); at ``HIT`` both
    zones of the cheap region go down together for 6 ticks; c stays up."""
    up = np.ones((3, HIST + 600), dtype=bool)
    up[:, 30:HIST:48] = False  # one-tick outages before the job (staggered per zone below)
    up[1, 30:HIST:48] = True
    up[1, 40:HIST:48] = False
    up[0:2, HIT:HIT + 6] = False
    price = np.ones((3, up.shape[1]))
    price[2] *= 1.3
    return Market(zones=("r1-a", "r1-b", "r2-c"), gap_seconds=300.0, available=up,
                  regions=("r1", "r1", "r2"), clouds=("gcp",) * 3, spot_price=price,
                  on_demand_price=np.array([3.4, 3.4, 3.4]))


def _run(params: SpotfleetParams) -> list[tuple[int, int]]:
    spec = JobSpec(work_hours=8.0, deadline_hours=16.0, notice_seconds=120.0)
    tl: list = []
    r = simulate(SpotfleetPolicy(params), _market(), spec, HIST, timeline=tl)
    assert r.deadline_met
    return tl


def _where(tl: list[tuple[int, int]], tick: int) -> int:
    return dict(tl)[tick]


def test_v10_idles_for_the_reclaimed_region():
    tl = _run(SpotfleetParams())
    assert _where(tl, HIST) == 0  # the cheap region first
    # after the reclaim the patience rule waits for r1 (idle), though r2-c is up
    assert _where(tl, HIT + 1) == -2


def test_other_regions_launches_outside_the_reclaimed_region():
    tl = _run(SpotfleetParams(patience_reclaim="other_regions"))
    assert _where(tl, HIST) == 0
    assert _where(tl, HIT + 1) == 2  # r2-c at once, no idle tick
    assert -2 not in [loc for t, loc in tl if HIT <= t < HIT + 6]


def test_default_is_v10():
    assert SpotfleetParams().patience_reclaim == "wait"
