"""What a policy is shown is a record of what the job saw, frozen, and nothing of the future.

Found by an outside audit (session 16): (1) in probe mode a zone the job held across ticks
with no decision between was back-filled as *down* for those ticks once it was preempted
(the record was rewritten with later knowledge); (2) ``obs.spot_price`` was a view whose
``.base`` held every zone's price for every tick, future included, and policies could write
into the arrays the simulator bills from."""

from __future__ import annotations

import numpy as np
import pytest

from fleet.policies.base import IDLE, Action, JobSpec, JobState, Observation, Policy
from fleet.simulation.engine import simulate
from fleet.simulation.market import Market


class HoldZeroRecorder(Policy):
    """Launches in zone 0 and asks again only after 20 ticks (or a preemption); records
    every observation."""

    name = "hold0"

    def __init__(self) -> None:
        self.seen: list[Observation] = []

    def decide(self, state: JobState, obs: Observation) -> Action:
        self.seen.append(obs)
        if state.location == IDLE and obs.available[0]:
            return Action(0, None, obs.tick + 20)
        return Action(IDLE, None, obs.tick + 1)


def _market() -> Market:
    n = 500
    avail = np.ones((2, n), dtype=bool)
    avail[0, 112:] = False  # zone 0 reclaimed at tick 112
    prices = np.linspace(1.0, 2.0, n)[None, :].repeat(2, axis=0)
    return Market(zones=("us-east-1a", "us-east-1b"), gap_seconds=600, available=avail,
                  spot_price=prices, on_demand_price=np.array([3.0, 3.0]))


def _spec() -> JobSpec:
    return JobSpec(work_hours=10.0, deadline_hours=30.0, restart_hours=0.1, checkpoint_hours=1 / 60)


def test_held_ticks_stay_up_in_the_record_after_a_preemption():
    pol = HoldZeroRecorder()
    r = simulate(pol, _market(), _spec(), 100)
    assert r.preemptions >= 1
    after = next(o for o in pol.seen if o.tick == 112)
    # launched at 100, held through 111 with no decision between, preempted at 112
    assert after.history[0, 100:112].all(), after.history[0, 100:113].astype(int)
    assert not after.history[0, 112]


@pytest.mark.parametrize("observe", ["probe", "oracle"])
def test_observations_are_read_only_and_hold_no_future_prices(observe):
    pol = HoldZeroRecorder()
    m = _market()
    simulate(pol, m, _spec(), 100, observe=observe)
    obs = pol.seen[0]
    for arr in (obs.spot_price, obs.on_demand_price, obs.history):
        with pytest.raises(ValueError):
            arr[0] = arr[0]  # read-only: a policy cannot change what the simulator bills
    base = obs.spot_price.base if obs.spot_price.base is not None else obs.spot_price
    assert base.size == m.n_zones  # this tick's prices only, not the (zones x ticks) market
