"""The omniscient DP is exact for the simulator's model and bounds every online policy."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from fleet.policies.base import IDLE, ON_DEMAND, JobSpec
from fleet.policies.scripted import ScriptedPolicy
from fleet.simulation.engine import PolicyError, simulate
from fleet.simulation.market import Market
from fleet.simulation.omniscient import omniscient_bound, quantum_seconds
from fleet.simulation.sweep import make_policies, start_ticks

AVAIL = "spot-traces/availability/1-node/aws-02-15-2023"


def _brute_force(m: Market, spec: JobSpec, n_ticks: int) -> float:
    """Cheapest deadline-meeting run over every per-tick action sequence."""
    locs = [IDLE, ON_DEMAND] + list(range(m.n_zones))
    best = np.inf
    for plan in itertools.product(locs, repeat=n_ticks):
        if any(z >= 0 and not m.available[z, k] for k, z in enumerate(plan)):
            continue
        try:
            r = simulate(ScriptedPolicy(plan, 0), m, spec, 0)
        except PolicyError:
            continue
        if r.deadline_met:
            best = min(best, r.cost)
    return best


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_dp_equals_brute_force_on_tiny_markets(seed):
    rng = np.random.default_rng(seed)
    gap = 120.0  # s
    spec = JobSpec(work_hours=9 / 60, deadline_hours=14 / 60, restart_hours=2 / 60,
                   checkpoint_hours=1 / 60, notice_seconds=60.0, on_demand_price=3.0,
                   spot_price=1.0)
    n = 7  # ticks before the deadline
    avail = rng.random((2, n)) < 0.6
    full = np.concatenate([avail, np.ones((2, 60), bool)], axis=1)
    m = Market(zones=("a", "b"), gap_seconds=gap, available=full)
    bf = _brute_force(m, spec, n)
    dp = omniscient_bound(m, spec, 0)
    assert dp.cost == pytest.approx(bf, rel=1e-9)


@pytest.fixture(scope="module")
def real_market(shared_data):
    return Market.from_dir(shared_data / AVAIL)


def test_quantum_is_the_gcd_of_gap_restart_and_checkpoint():
    assert quantum_seconds(195.0, 0.1, 1 / 60) == 15
    with pytest.raises(ValueError, match="whole seconds"):
        quantum_seconds(195.0, 0.1 + 1e-4, 1 / 60)


def test_dp_plan_replays_to_the_same_cost_on_a_real_trace(real_market):
    spec = JobSpec(12.0, 14.0, restart_hours=0.1, checkpoint_hours=1 / 60, notice_seconds=120)
    start = start_ticks(real_market, spec, 7)[3]
    res = omniscient_bound(real_market, spec, start, want_plan=True)
    assert omniscient_bound(real_market, spec, start).cost == pytest.approx(res.cost, rel=1e-12)
    run = simulate(ScriptedPolicy(res.plan, start), real_market, spec, start)
    assert run.deadline_met
    assert run.cost == pytest.approx(res.cost, rel=1e-9)
    assert run.completion_hours == pytest.approx(res.completion_hours, abs=1e-9)


@pytest.mark.parametrize("notice", [0.0, 120.0])
def test_dp_is_below_every_online_policy(real_market, notice):
    spec = JobSpec(12.0, 14.0, restart_hours=0.1, checkpoint_hours=1 / 60, notice_seconds=notice)
    for start in start_ticks(real_market, spec, 4, offset=0.25):
        bound = omniscient_bound(real_market, spec, start).cost
        assert bound >= spec.spot_price * (spec.work_hours + spec.restart_hours) - 1e-9
        for pol in make_policies():
            r = simulate(pol, real_market, spec, start)
            assert r.cost >= bound - 1e-9, (pol.name, start)
