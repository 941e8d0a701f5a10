"""``SpotfleetParams.launch_guard="restart_cost"`` (session 19, opt-in): v10's launch guard, and a
spot launch that would be the job's last spot run (the spare slack left after its overhead and
the failed tries before it is below one restart) is tried only if it is cheaper than
on-demand now, its forced on-demand remainder priced in the region the checkpoint ends in.

Found on the tuning set's H100 D/W 1.2 without notice (start 75): with 0.215 h of spare slack
v10 launched in europe-west1-c, kept 0.117 h of work and ran the forced 2.43 h of on-demand in
europe-west1 (90.87 $/h) instead of us-east4 (82.53 $/h) (docs/fleet-policies-tuning-log.md,
session 19)."""

from __future__ import annotations

import numpy as np

from fleet.policies.base import JobSpec
from fleet.policies.spotfleet import SpotfleetParams, SpotfleetPolicy
from fleet.simulation.engine import simulate
from fleet.simulation.market import Market

HIST = 288  # 24 h of 300 s ticks before the job


def _market() -> Market:
    """Two regions: r1-a (spot 5.0 $/h, dearer per useful hour than on-demand: never tried;
    on-demand 3.4 $/h) and r2-a (spot 1.0 $/h, on-demand 4.0 $/h), both up but for one-tick
    outages before the job and always up during it."""
    up = np.ones((2, HIST + 200), dtype=bool)
    up[0, 30:HIST:48] = False
    up[1, 40:HIST:48] = False
    price = np.ones((2, up.shape[1]))
    price[0] *= 5.0
    return Market(zones=("r1-a", "r2-a"), gap_seconds=300.0, available=up, regions=("r1", "r2"),
                  clouds=("gcp",) * 2, spot_price=price, on_demand_price=np.array([3.4, 4.0]))


# 2 h of work, 0.3 h of slack, no notice: above the net's threshold (6-min restart + one 300 s
# tick) 0.117 h are spare; the restart (0.1 h) fits (v10 launches), but leaves 0.017 h, less
# than the next launch's restart: the launch keeps at most 0.017 h + a tick of work, and the
# rest runs on on-demand in r2 (4.0 $/h) instead of r1 (3.4 $/h)
SPEC = JobSpec(work_hours=2.0, deadline_hours=2.3)


def _run(guard: str):
    tl: list = []
    r = simulate(SpotfleetPolicy(SpotfleetParams(launch_guard=guard)), _market(), SPEC, HIST,
                 timeline=tl)
    assert r.deadline_met
    return r, dict(tl)


def test_restart_guard_launches_and_ends_on_the_dearer_on_demand():
    r, where = _run("restart")
    assert where[HIST] == 1  # v10: spot in r2-a, the restart fits in the spare slack
    assert -1 in where.values()  # ... and the net sends it to on-demand, now in r2
    assert r.spot_hours > 0
    assert r.on_demand_cost > 4.0 * r.on_demand_hours - 1e-9


def test_restart_cost_goes_to_on_demand_at_once_in_the_cheaper_region():
    r, where = _run("restart_cost")
    assert where[HIST] == -1  # no launch: on-demand now in r1 is cheaper than the last spot run
    assert r.spot_hours == 0.0
    assert abs(r.on_demand_cost - 3.4 * r.on_demand_hours) < 1e-9
    assert r.cost < _run("restart")[0].cost


def test_restart_cost_keeps_a_launch_that_pays():
    """The same job with on-demand at 4.0 $/h in both regions: the launch's work is worth
    more than its spot $, so the rule launches as v10 does, bit for bit."""
    m = _market()
    m2 = Market(zones=m.zones, gap_seconds=300.0, available=m.available, regions=m.regions,
                clouds=m.clouds, spot_price=m.spot_price, on_demand_price=np.array([4.0, 4.0]))
    runs = [simulate(SpotfleetPolicy(SpotfleetParams(launch_guard=g)), m2, SPEC, HIST)
            for g in ("restart", "restart_cost")]
    assert runs[0].spot_hours > 0
    assert runs[0] == runs[1]


def test_default_is_v10_restart():
    assert SpotfleetParams().launch_guard == "restart"
