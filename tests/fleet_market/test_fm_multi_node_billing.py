"""A job of N nodes pays N instances: the simulator bills, the policies see and the
omniscient bound prices ``nodes`` x the per-instance $/h (``Market.prices_for``), while a
checkpoint's cross-region egress is paid once per move.

Found by an outside audit (session 16): a 4-node folder's on-demand run cost 3.06 $/h x the
hours, one instance's price, and the same folder with ``--nodes 3`` gave the 1-node costs.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from fleet.policies.base import JobSpec
from fleet.policies.baselines import OnDemandOnly, SkyPilotFailover
from fleet.simulation.engine import simulate
from fleet.simulation.market import Market
from fleet.simulation.omniscient import omniscient_bound
from fleet.simulation.sweep import run_sweep


def _folder(tmp_path):
    d = tmp_path / "4-node" / "aws-x"
    d.mkdir(parents=True)
    # counts of instances held; the 4-node job can run where count >= 4
    rng = np.random.default_rng(7)
    for z in ("us-east-1a", "us-east-1b", "us-west-2a"):
        counts = rng.choice([0, 2, 4, 5], size=400, p=[0.2, 0.2, 0.4, 0.2]).tolist()
        (d / f"{z}_v100_1.json").write_text(
            json.dumps({"metadata": {"gap_seconds": 600}, "data": counts}))
    return d


def _spec() -> JobSpec:
    return JobSpec(work_hours=6.0, deadline_hours=9.0, restart_hours=0.1, checkpoint_hours=1 / 60,
                   notice_seconds=0.0, spot_price=0.918, on_demand_price=3.06, checkpoint_gb=25.0)


def test_a_four_node_job_pays_four_instances(tmp_path):
    m4 = Market.from_dir(_folder(tmp_path))
    assert m4.nodes == 4
    m1 = Market(zones=m4.zones, gap_seconds=m4.gap_seconds, available=m4.available,
                regions=m4.regions, clouds=m4.clouds, instance_types=m4.instance_types, nodes=1)
    spec = _spec()
    od4 = simulate(OnDemandOnly(), m4, spec, 50)
    od1 = simulate(OnDemandOnly(), m1, spec, 50)
    assert od4.on_demand_hours == pytest.approx(od1.on_demand_hours)
    assert od4.cost == pytest.approx(4 * od1.cost)
    assert od4.cost == pytest.approx(4 * 3.06 * od4.on_demand_hours)
    # spot: the same decisions (prices scale alike), four instances billed per spot hour
    f4 = simulate(SkyPilotFailover(), m4, spec, 50)
    assert f4.spot_hours > 0
    assert f4.spot_cost == pytest.approx(4 * 0.918 * f4.spot_hours)
    assert f4.cost == pytest.approx(f4.spot_cost + f4.on_demand_cost + f4.migration_cost)
    # the bound prices the same four instances, and stays below every policy
    b4, b1 = omniscient_bound(m4, spec, 50).cost, omniscient_bound(m1, spec, 50).cost
    assert b4 <= f4.cost + 1e-9 and b4 <= od4.cost + 1e-9
    assert b4 > 3.0 * b1  # not one instance's price (egress, paid once, keeps it under 4x)
    res = run_sweep(m4, spec, [OnDemandOnly()], [50], with_omniscient=False)
    assert res.on_demand_cost == pytest.approx(4 * 3.06 * (spec.work_hours + spec.restart_hours))


def test_egress_is_paid_once_per_move_whatever_the_nodes(tmp_path):
    m4 = Market.from_dir(_folder(tmp_path))
    spec = _spec()
    moved = [r for r in (simulate(SkyPilotFailover(), m4, spec, s) for s in range(0, 200, 10))
             if r.migrations]
    assert moved, "the fixture should make failover cross regions at least once"
    for r in moved:
        assert r.migration_cost == pytest.approx(r.migrations * 0.02 * 25.0)
