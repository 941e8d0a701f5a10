"""``SpotfleetParams.launch_guard="restart_progress"`` (session 19, opt-in): a spot launch is
tried only if the spare slack above the safety net pays its overhead (restart, plus the
transfer across regions) plus one save plus one tick; v9's and v10's ``"restart"`` asks only
for the overhead.

Found on the tuning set's H100 D/W 1.2 without notice (start 75): after the second
preemption 0.215 h of spare slack was left, v10 launched in europe-west1-c (0.15 h of restart
and transfer), kept 0.12 h of work and was forced to on-demand two ticks later, in the dearer
region the move had taken the checkpoint to (docs/fleet-policies-tuning-log.md, session 19)."""

from __future__ import annotations

import numpy as np

from fleet.policies.base import JobSpec
from fleet.policies.spotfleet import SpotfleetParams, SpotfleetPolicy
from fleet.simulation.engine import simulate
from fleet.simulation.market import Market

HIST = 288  # 24 h of 300 s ticks before the job


def _market() -> Market:
    """Two zones of one region, up but for one-tick outages before the job and always up
    during it; spot 1.0 and 1.3 $/h, on-demand 3.4 $/h."""
    up = np.ones((2, HIST + 200), dtype=bool)
    up[0, 30:HIST:48] = False
    up[1, 40:HIST:48] = False
    price = np.ones((2, up.shape[1]))
    price[1] *= 1.3
    return Market(zones=("r1-a", "r1-b"), gap_seconds=300.0, available=up, regions=("r1", "r1"),
                  clouds=("gcp",) * 2, spot_price=price, on_demand_price=np.array([3.4, 3.4]))


# 2 h of work, 0.3 h of slack: above the net's threshold (6-min restart + one 300 s tick)
# 0.117 h are spare; the restart (0.1 h) fits, the restart + a 1-min save + a tick (0.2 h) not
SPEC = JobSpec(work_hours=2.0, deadline_hours=2.3)


def _run(guard: str):
    tl: list = []
    r = simulate(SpotfleetPolicy(SpotfleetParams(launch_guard=guard)), _market(), SPEC, HIST,
                 timeline=tl)
    assert r.deadline_met
    return r, dict(tl)


def test_restart_guard_launches_and_is_forced_off_two_ticks_later():
    r, where = _run("restart")
    assert where[HIST] == 0  # v10: spot in r1-a, the restart fits in the spare slack
    assert where[HIST + 2] == -1  # ... and the net sends it to on-demand two ticks later
    assert r.spot_hours > 0


def test_restart_progress_goes_to_on_demand_at_once():
    r, where = _run("restart_progress")
    assert where[HIST] == -1  # no launch: the restart, a save and a tick exceed the spare
    assert r.spot_hours == 0.0
    assert r.cost < _run("restart")[0].cost  # the two ticks of spot kept 0.05 h of work


def test_default_is_v10_restart():
    assert SpotfleetParams().launch_guard == "restart"
