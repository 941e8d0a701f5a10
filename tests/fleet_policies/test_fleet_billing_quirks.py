"""benchmarks/fleet_billing_quirks.py and the billing it measures: the omniscient DP's
on-demand start region (the simulator's by default), cross-region moves with nothing
committed (not billed, in the engine and in the DP), and the wrapper that counts them."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
from brute_force import cheapest_scripted_cost as _brute_force

from fleet.policies.base import JobSpec
from fleet.policies.scripted import ScriptedPolicy
from fleet.simulation.engine import simulate
from fleet.simulation.market import Market
from fleet.simulation.omniscient import omniscient_bound

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def quirks():
    spec = importlib.util.spec_from_file_location(
        "fleet_billing_quirks", ROOT / "benchmarks" / "fleet_billing_quirks.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    yield mod
    sys.modules.pop(spec.name, None)




@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4, 5])
def test_restricted_dp_equals_brute_force_when_on_demand_prices_tie(seed):
    """Tied on-demand prices: the simulator starts on-demand in the first region; the DP
    restricted to that region equals the cheapest simulated plan and is >= the free DP."""
    rng = np.random.default_rng(200 + seed)
    spec = JobSpec(work_hours=8 / 60, deadline_hours=11 / 60, restart_hours=2 / 60,
                   checkpoint_hours=1 / 60, notice_seconds=60.0 * (seed % 2),
                   checkpoint_gb=20.0, egress_usd_per_gb=0.1, transfer_seconds=60.0)
    n = 6
    avail = rng.random((2, n)) < 0.5
    avail[0, :] = False  # spot only in us-west-2: the free DP would start on-demand there
    full = np.concatenate([avail, np.ones((2, 60), bool)], axis=1)
    m = Market(zones=("us-east-1a", "us-west-2a"), gap_seconds=120.0, available=full,
               spot_price=np.full((2, n + 60), 0.5), on_demand_price=np.array([3.0, 3.0]))
    bf = _brute_force(m, spec, n)
    free = omniscient_bound(m, spec, 0, first_on_demand_region=-1).cost
    restricted = omniscient_bound(m, spec, 0, first_on_demand_region=0).cost
    assert restricted == pytest.approx(bf, rel=1e-9)
    assert omniscient_bound(m, spec, 0).cost == restricted  # the default: the simulator's region
    assert free <= restricted + 1e-9


def test_restricted_dp_rejects_a_region_outside_the_market():
    m = Market(zones=("us-east-1a",), gap_seconds=120.0, available=np.ones((1, 50), bool))
    with pytest.raises(ValueError, match="first_on_demand_region"):
        omniscient_bound(m, JobSpec(0.2, 0.4), 0, first_on_demand_region=1)


def _probe_run(quirks, plan, east_up_ticks):
    spec = JobSpec(work_hours=1.0, deadline_hours=5.0, restart_hours=0.1, checkpoint_hours=0.05,
                   checkpoint_gb=100.0, egress_usd_per_gb=0.02, transfer_seconds=360.0,
                   notice_seconds=300.0)
    a = np.ones((2, 100), dtype=bool)
    a[0, east_up_ticks:] = False
    m = Market(zones=("us-east-1a", "us-west-2a"), gap_seconds=360.0, available=a,
               spot_price=np.full((2, 100), 0.9))
    probe = quirks.MoveProbe(ScriptedPolicy(plan, 0))
    tl: list[tuple[int, int]] = []
    r = simulate(probe, m, spec, 0, timeline=tl)
    sp, _, mig_usd, mig_h = quirks._market_info(m, spec)
    return r, quirks.empty_moves(probe, tl, r.migrations, sp, mig_usd, mig_h)


def test_a_move_of_nothing_is_not_billed(quirks):
    """docs/fleet-policies.md's example: east reclaimed during its restart, then west.
    Nothing was committed, so nothing is copied: no migration, no egress, no transfer
    (before the fix: 1 migration, 2.00 $ + 0.1 h, 3.19 $)."""
    r, (n, usd) = _probe_run(quirks, [0] + [1] * 40, 1)
    assert r.migrations == 0 and r.migration_cost == 0.0 and n == 0 and usd == 0.0
    assert r.completion_hours == pytest.approx(1.2)  # 0.1 h lost in east + 0.1 h + 1 h west
    assert r.cost == pytest.approx(1.2 * 0.9)


def test_probe_ignores_a_move_after_work_was_saved(quirks):
    """Three ticks of work in east (saved in the notice window), then west: a real move."""
    r, (n, usd) = _probe_run(quirks, [0, 0, 0] + [1] * 40, 3)
    assert r.migrations == 1 and n == 0 and usd == 0.0
