"""The held-out family ``v100_apr`` (session 5): the 4-zone AWS V100 preemption traces of
April 2023 load as 4 zones in 2 regions on 32 s ticks, 100 starts fit, and the exact
omniscient DP bounds a policy's run on them (32 s ticks are shorter than the 60 s save)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fleet.policies.baselines import builtin_policy_factories
from fleet.simulation.engine import horizon_ticks, simulate
from fleet.simulation.families import FAMILIES, RATIOS, V100_APR_DIR, spread_starts
from fleet.simulation.omniscient import omniscient_bound


@pytest.fixture(scope="module")
def apr(shared_data):
    folder = shared_data / V100_APR_DIR
    if not folder.is_dir():
        pytest.skip(f"{folder} is absent from the shared data folder")
    fam = FAMILIES["v100_apr"]
    (m, starts), = fam.load(shared_data, 100)
    assert starts is None
    return fam, m, folder


def test_v100_apr_loads_four_zones_in_two_regions_with_the_files_availability(apr):
    fam, m, folder = apr
    assert m.zones == ("us-east-1c", "us-east-1f", "us-west-2b", "us-west-2c")
    assert m.regions == ("us-east-1", "us-east-1", "us-west-2", "us-west-2")
    assert m.gap_seconds == 32.0 and m.nodes == 1
    assert m.spot_price is None  # no per-tick prices for this window: the flat 0.918 $/h
    assert np.all(m.on_demand_price == fam.on_demand_price)
    for k, zone in enumerate(m.zones):
        raw = json.loads((folder / f"{zone}_v100_1.json").read_text(encoding="utf-8"))
        data = np.asarray(raw["data"])
        assert raw["metadata"]["gap_seconds"] == 32
        assert m.n_ticks == data.size
        assert m.available[k].mean() == pytest.approx((data >= 1).mean(), abs=1e-12)
    assert 0.2 < m.available.mean(axis=1).min() < m.available.mean(axis=1).max() < 0.9


def test_v100_apr_fits_100_starts_after_its_history_at_every_ratio(apr):
    fam, m, _ = apr
    first = int(np.ceil(fam.warmup_hours / m.gap_hours))
    for ratio in RATIOS:
        spec = fam.spec(ratio, 0.0)
        starts = spread_starts(m, spec, 100, fam.warmup_hours)
        assert len(set(starts)) == 100
        assert starts[0] >= first
        assert starts[-1] + horizon_ticks(spec, m.gap_hours) < m.n_ticks


@pytest.mark.parametrize("notice", [0.0, 120.0])
def test_v100_apr_bound_is_exact_and_below_the_policies(apr, notice):
    fam, m, _ = apr
    spec = fam.spec(1.2, notice)
    start = spread_starts(m, spec, 100, fam.warmup_hours)[37]
    bound = omniscient_bound(m, spec, start)
    assert bound.exact and bound.quantum_seconds == 4  # gcd(32 s, 360 s, 60 s, 60 s move)
    pols = builtin_policy_factories()
    for name in ("spotfleet", "failover_sky"):
        run = simulate(pols[name](), m, spec, start)
        assert run.deadline_met, name
        assert bound.cost <= run.cost + 1e-9, name


def test_v100_apr_bound_stays_exact_at_the_longest_deadline(apr):
    # D/W = 3 on 32 s ticks is 4.0e8 DP cells: above the former coarsening threshold,
    # which made this bound inexact (8 s grid) until the cost-only limit was raised
    fam, m, _ = apr
    spec = fam.spec(3.0, 0.0)
    bound = omniscient_bound(m, spec, spread_starts(m, spec, 100, fam.warmup_hours)[0])
    assert bound.exact and bound.quantum_seconds == 4
    assert bound.cost >= spec.work_hours * spec.spot_price - 1e-9


@pytest.mark.parametrize("name, seeds", [("volatile_holdout60", range(60, 65)),
                                         ("available_holdout60", range(60, 65))])
def test_fresh_holdout_families_use_seeds_60_to_64(tmp_path, name, seeds):
    from fleet.market import regimes

    fam = FAMILIES[name]
    markets = fam.load(tmp_path, 100)
    assert len(markets) == len(seeds)
    cfg = getattr(regimes, name.replace("_holdout60", "_config"))(hours=24.0 * 12)
    first = regimes.regime_market(cfg, seeds[0])
    assert np.array_equal(markets[0][0].available, first.available)
