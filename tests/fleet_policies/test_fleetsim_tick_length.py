"""The same market on a finer tick (``Market.refined``, issue 10, session 10): what
benchmarks/fleet_tick_sensitivity.py measures policies on. The refined market holds the
same hours of capacity at the same prices, and the exact bound can only fall (every plan
of the coarse grid is a plan of the fine one)."""

from __future__ import annotations

import numpy as np
import pytest

from fleet.policies.base import JobSpec
from fleet.simulation.engine import simulate
from fleet.simulation.market import Market
from fleet.simulation.omniscient import omniscient_bound
from fleet.simulation.sweep import make_policies


def _market() -> Market:
    rng = np.random.default_rng(11)
    up = rng.random((3, 300)) < 0.6
    prices = rng.uniform(0.8, 1.6, (3, 300))
    return Market(zones=("us-east-1a", "us-east-1b", "us-west-2a"), gap_seconds=600.0, available=up,
                  regions=("us-east-1", "us-east-1", "us-west-2"), clouds=("aws",) * 3,
                  spot_price=prices, on_demand_price=np.array([3.0, 3.0, 3.2]))


def test_refined_market_holds_the_same_hours_at_the_same_prices():
    m = _market()
    f = m.refined(4)
    assert f.gap_seconds == 150.0 and f.n_ticks == 4 * m.n_ticks
    assert f.available.sum(axis=1) * f.gap_hours == pytest.approx(m.available.sum(axis=1) * m.gap_hours)
    assert np.array_equal(f.available[:, 4 * 17 + 3], m.available[:, 17])
    assert np.array_equal(f.spot_price[:, 4 * 17:4 * 18], np.repeat(m.spot_price[:, 17:18], 4, axis=1))
    assert f.regions == m.regions and np.array_equal(f.on_demand_price, m.on_demand_price)
    assert np.array_equal(m.refined(1).available, m.available)
    with pytest.raises(ValueError, match="factor"):
        m.refined(0)


@pytest.mark.parametrize("notice", [0.0, 120.0])
def test_the_exact_bound_on_a_finer_tick_is_no_dearer(notice):
    m = _market()
    spec = JobSpec(work_hours=8.0, deadline_hours=12.0, restart_hours=0.1, checkpoint_hours=0.05,
                   notice_seconds=notice, checkpoint_gb=10.0)
    for start in (5, 60):
        coarse = omniscient_bound(m, spec, start)
        fine = omniscient_bound(m.refined(3), spec, 3 * start)
        assert coarse.exact and fine.exact
        assert fine.cost <= coarse.cost + 1e-9
        # and every online policy still pays at least the fine bound there
        for policy in make_policies(["failover", "spotfleet"]):
            assert simulate(policy, m.refined(3), spec, 3 * start).cost >= fine.cost - 1e-9, policy.name
