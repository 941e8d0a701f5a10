"""Synthetic regimes (fleet/market/regimes.py) at the edges: a field the generator cannot
use is refused naming it; extreme but legal regimes (never down, always down, one zone,
100x price spikes) build, and every policy pays at least the exact bound and meets its
deadline there."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from fleet.market.regimes import RegimeConfig, regime_market, volatile_config
from fleet.policies.base import JobSpec
from fleet.simulation.engine import simulate
from fleet.simulation.market import Market
from fleet.simulation.omniscient import omniscient_bound
from fleet.simulation.sweep import make_policies, start_ticks


@pytest.mark.parametrize(("field", "value", "needle"), [
    # before 2026-11-28: "math domain error", numpy's "lam < 0 or lam is NaN", "Market.spot_price
    # must be positive $/h of shape (9, 1440), got (9, 1440)", "cannot convert float infinity
    # to integer", "zero-size array to reduction operation minimum which has no identity"
    ("up_mean_hours", 0.0, "must be a finite number > 0 (mean up-run, hours)"),
    ("down_mean_hours", -1.0, "must be a finite number > 0 (mean down-run, hours)"),
    ("region_outages_per_day", -1.0, "must be a finite number >= 0"),
    ("spot_price", 0.0, "must be a finite number > 0 ($/h)"),
    ("spot_price", float("nan"), "must be a finite number > 0 ($/h)"),
    ("hours", float("inf"), "must be a finite number > 0"),
    ("regions", (), "a non-empty tuple of distinct region names"),
    ("spike_factor", (0.0, 0.0), "0 < low <= high"),
    ("drought_days", (3.0, 1.0), "0 <= low <= high (days)"),
    ("zones_per_region", 0, "a whole number >= 1"),
])
def test_a_field_the_generator_cannot_use_is_refused_naming_it(field, value, needle):
    with pytest.raises(ValueError) as exc:
        replace(volatile_config(hours=48.0), **{field: value})
    assert f"RegimeConfig.{field} = {value!r}: " in str(exc.value) and needle in str(exc.value)


def test_market_price_refusal_says_what_is_wrong_not_the_same_shape_twice():
    avail = np.ones((2, 4), bool)
    prices = np.ones((2, 4))
    prices[1, 2] = 0.0
    with pytest.raises(ValueError, match=r"zone b tick 2 is 0\.0"):
        Market(zones=("a", "b"), gap_seconds=60.0, available=avail, spot_price=prices)
    with pytest.raises(ValueError, match=r"must have shape \(2, 4\) .*got \(2, 3\)"):
        Market(zones=("a", "b"), gap_seconds=60.0, available=avail, spot_price=np.ones((2, 3)))


BASE = volatile_config(hours=24.0 * 4)
EXTREMES = {
    "never down": replace(BASE, up_mean_hours=1e9, region_outages_per_day=0.0,
                          market_outages_per_day=0.0, droughts_per_week=0.0),
    "always down": replace(BASE, up_mean_hours=1e-6, down_mean_hours=1e9),
    "one zone": replace(BASE, regions=("us-east-1",), zones_per_region=1),
    "100x spikes": replace(BASE, spikes_per_day=24.0, spike_factor=(100.0, 100.0)),
    "spot above on-demand": replace(BASE, spot_price=10.0),
}


@pytest.mark.parametrize("name", list(EXTREMES))
@pytest.mark.parametrize("notice", [0.0, 120.0])
def test_extreme_regimes_every_policy_at_or_above_the_bound(name, notice):
    m = regime_market(EXTREMES[name], 3)
    if name == "never down":
        assert m.available.all()
    if name == "always down":
        assert not m.available.any()
    spec = JobSpec(8.0, 12.0, notice_seconds=notice, checkpoint_gb=50.0)
    for start in start_ticks(m, spec, 2, warmup_hours=24.0):
        bound = omniscient_bound(m, spec, start).cost
        for pol in make_policies():
            run = simulate(pol, m, spec, start)
            assert run.deadline_met and run.cost >= bound - 1e-9, (pol.name, start)


def test_regime_config_defaults_and_the_families_still_build():
    assert RegimeConfig().zone_names[0] == "us-east-1a"
    assert regime_market(volatile_config(hours=24.0), 1).n_zones == 9
