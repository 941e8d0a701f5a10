"""The two session-19 launch guards (``SpotfleetParams.launch_guard`` values; ``"restart"`` is
v9's and v10's: no spot launch whose overhead the spare slack cannot pay; ``"restart_cost"`` is
v11's, the default since session 20).

Both come from the tuning set's H100 D/W 1.2 without notice (start 75): after the second
preemption 0.215 h of spare slack was left, v10 launched in europe-west1-c (0.15 h of restart
and transfer), kept 0.117 h of work and was forced to on-demand two ticks later, in the dearer
region the move had taken the checkpoint to (docs/fleet-policies-tuning-log.md, session 19).

* ``"restart_progress"`` (rejected, clause 2): the spare must also pay one save and one tick.
* ``"restart_cost"`` (passed clauses 1-3 and the seen-family check; adopted in session 20, v11): a launch that would be the job's
  last spot run is tried only if it is cheaper than on-demand now, its forced on-demand
  remainder priced in the region the checkpoint ends in.
"""

from __future__ import annotations

import numpy as np

from fleet.policies.base import JobSpec
from fleet.policies.spotfleet import SpotfleetParams, SpotfleetPolicy
from fleet.simulation.engine import simulate
from fleet.simulation.market import Market

HIST = 288  # 24 h of 300 s ticks before the job
# 2 h of work, 0.3 h of slack, no notice: above the net's threshold (6-min restart + one 300 s
# tick) 0.117 h are spare; the restart (0.1 h) fits (v10 launches), the restart + a 1-min save +
# a tick (0.2 h) not; after the launch 0.017 h are left, less than the next launch's restart
SPEC = JobSpec(work_hours=2.0, deadline_hours=2.3)


def _market(regions: tuple[str, str], spot: tuple[float, float], on_demand: tuple[float, float]) -> Market:
    """Two zones, up but for one-tick outages before the job and always up during it."""
    up = np.ones((2, HIST + 200), dtype=bool)
    up[0, 30:HIST:48] = False
    up[1, 40:HIST:48] = False
    price = np.ones((2, up.shape[1])) * np.array(spot)[:, None]
    return Market(zones=(f"{regions[0]}-a", f"{regions[1]}-{'a' if regions[0] != regions[1] else 'b'}"),
                  gap_seconds=300.0, available=up, regions=regions, clouds=("gcp",) * 2,
                  spot_price=price, on_demand_price=np.array(on_demand))


#: one region, spot 1.0 and 1.3 $/h, on-demand 3.4 $/h
ONE_REGION = _market(("r1", "r1"), (1.0, 1.3), (3.4, 3.4))
#: r1-a: spot 5.0 $/h (dearer per useful hour than on-demand: never tried), on-demand 3.4 $/h;
#: r2-a: spot 1.0 $/h, on-demand 4.0 $/h
TWO_REGIONS = _market(("r1", "r2"), (5.0, 1.0), (3.4, 4.0))


def _run(guard: str, market: Market):
    tl: list = []
    r = simulate(SpotfleetPolicy(SpotfleetParams(launch_guard=guard)), market, SPEC, HIST, timeline=tl)
    assert r.deadline_met
    return r, dict(tl)


def test_default_is_v11_restart_cost():
    assert SpotfleetParams().launch_guard == "restart_cost"


def test_the_default_policy_goes_to_on_demand_at_once_where_v10_launched():
    """The default (v11) makes the restart_cost decision, not v10's, on the market it was found on."""
    tl: list = []
    r = simulate(SpotfleetPolicy(), TWO_REGIONS, SPEC, HIST, timeline=tl)
    assert r == _run("restart_cost", TWO_REGIONS)[0] and dict(tl)[HIST] == -1


def test_restart_guard_launches_and_is_forced_off_two_ticks_later():
    r, where = _run("restart", ONE_REGION)
    assert where[HIST] == 0  # v10: spot in r1-a, the restart fits in the spare slack
    assert where[HIST + 2] == -1  # ... and the net sends it to on-demand two ticks later
    assert r.spot_hours > 0


def test_restart_progress_goes_to_on_demand_at_once():
    r, where = _run("restart_progress", ONE_REGION)
    assert where[HIST] == -1  # no launch: the restart, a save and a tick exceed the spare
    assert r.spot_hours == 0.0
    assert r.cost < _run("restart", ONE_REGION)[0].cost  # the two ticks of spot kept 0.05 h of work


def test_restart_guard_launches_and_ends_on_the_dearer_on_demand():
    r, where = _run("restart", TWO_REGIONS)
    assert where[HIST] == 1  # v10: spot in r2-a, the restart fits in the spare slack
    assert -1 in where.values()  # ... and the net sends it to on-demand, now in r2
    assert r.spot_hours > 0
    assert r.on_demand_cost > 4.0 * r.on_demand_hours - 1e-9


def test_restart_cost_goes_to_on_demand_at_once_in_the_cheaper_region():
    r, where = _run("restart_cost", TWO_REGIONS)
    assert where[HIST] == -1  # no launch: on-demand now in r1 is cheaper than the last spot run
    assert r.spot_hours == 0.0
    assert abs(r.on_demand_cost - 3.4 * r.on_demand_hours) < 1e-9
    assert r.cost < _run("restart", TWO_REGIONS)[0].cost


def test_restart_cost_keeps_a_launch_that_pays():
    """The same job with on-demand at 4.0 $/h in both regions: the launch's work is worth
    more than its spot $, so the rule launches as v10 does, bit for bit."""
    m = _market(("r1", "r2"), (5.0, 1.0), (4.0, 4.0))
    runs = [simulate(SpotfleetPolicy(SpotfleetParams(launch_guard=g)), m, SPEC, HIST)
            for g in ("restart", "restart_cost")]
    assert runs[0].spot_hours > 0
    assert runs[0] == runs[1]
