"""The regime-shift market (fleet.market.regimes.shift_market / shift_config) and the
held-out family built on it (shift_holdout70): statistics change at the shift as
configured, deterministic per seed, the shift tick is where it should be, bad input is
refused, and the family's starts lie around the shift. No policy is run here (the family
is held out)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from fleet.market.regimes import (
    SHIFT_SEED_OFFSET,
    all_break_config,
    available_config,
    regime_market,
    reliable_break_config,
    shift_config,
    shift_market,
)
from fleet.simulation.engine import horizon_ticks
from fleet.simulation.families import FAMILIES, RATIOS, SHIFT_HOURS, spread_starts

SEEDS = (0, 1, 2)  # not the family's held-out seeds 70-74


def _mean_up_run(row: np.ndarray) -> float:
    d = np.diff(np.r_[0, row.astype(int), 0])
    runs = np.flatnonzero(d == -1) - np.flatnonzero(d == 1)
    return float(runs.mean()) if runs.size else 0.0


@pytest.fixture(scope="module")
def shifted():
    before, after = shift_config()
    return before, after, {seed: shift_market(before, after, seed, SHIFT_HOURS) for seed in SEEDS}


def test_regime_shift_statistics_change_as_configured(shifted):
    before, after, markets = shifted
    for seed, m in markets.items():
        g = m.gap_hours
        k = int(SHIFT_HOURS / g)
        zpr = before.zones_per_region
        cheap = [z for z in range(m.n_zones) if z % zpr]
        reliable = [z for z in range(m.n_zones) if z % zpr == 0]
        av = m.available
        cheap_before, cheap_after = av[cheap, :k].mean(), av[cheap, k:].mean()
        assert cheap_before > 0.8 and cheap_after < 0.35, (seed, cheap_before, cheap_after)
        assert av[reliable, k:].mean() > 0.8, seed  # the dear zones stay reliable
        up_before = np.mean([_mean_up_run(av[z, :k]) for z in cheap]) * g
        up_after = np.mean([_mean_up_run(av[z, k:]) for z in cheap]) * g
        assert up_before > 4.0 and 0.3 < up_after < 0.8, (seed, up_before, up_after)
        # the reliable zone is the dear one on both sides; prices and on-demand are shared
        sp = m.spot_price
        for r in range(len(before.regions)):
            z0 = r * zpr
            assert sp[z0, :k].min() >= sp[z0 + 1:z0 + zpr, :k].min() * 1.5
            assert np.isclose(np.median(sp[z0, :k]), np.median(sp[z0, k:]))
        assert m.on_demand_price is not None and len(set(m.on_demand_price)) == len(before.regions)


def _after_shift(config) -> list[tuple]:
    """Per seed of ``SEEDS``: (availability, tick length h, shift tick, reliable zones) of
    ``shift_market(*config())``; the reliable zone of each region is its first."""
    before, after = config()
    zpr = before.zones_per_region
    out = []
    for seed in SEEDS:
        m = shift_market(before, after, seed, SHIFT_HOURS)
        out.append((m.available, m.gap_hours, int(SHIFT_HOURS / m.gap_hours),
                    [z for z in range(m.n_zones) if z % zpr == 0]))
    return out


def test_the_opposite_shift_breaks_the_zone_whose_history_is_best():
    """``reliable_break_config`` (family ``reliable_break_holdout300``): before the shift each
    region's dear zone has the best history; after it, that zone flaps and the cheap ones stay
    as calm as before."""
    for seed, (av, g, k, reliable) in zip(SEEDS, _after_shift(reliable_break_config), strict=True):
        cheap = [z for z in range(av.shape[0]) if z not in reliable]
        assert av[reliable, :k].mean() > av[cheap, :k].mean() > 0.8, seed
        assert av[reliable, k:].mean() < 0.5 < 0.8 < av[cheap, k:].mean(), seed
        assert np.mean([_mean_up_run(av[z, k:]) for z in reliable]) * g < 1.0, seed
    assert "reliable_break_holdout300" in FAMILIES


def test_the_market_wide_shift_breaks_every_zone():
    """``all_break_config`` (family ``all_break_holdout410``): every zone is calm before the
    shift (the dear one calmest) and flaps after it, the dear one as much as the cheap ones,
    so no order of the zones that the history gives survives the shift."""
    for seed, (av, g, k, reliable) in zip(SEEDS, _after_shift(all_break_config), strict=True):
        assert av[reliable, :k].mean() > av[:, :k].mean() > 0.8, seed
        assert av[:, k:].mean() < 0.35 and av[reliable, k:].mean() < 0.45, seed
        assert np.mean([_mean_up_run(av[z, k:]) for z in range(av.shape[0])]) * g < 1.0, seed
    assert "all_break_holdout410" in FAMILIES and "reliable_break_holdout310" in FAMILIES


def test_regime_shift_tick_and_halves(shifted):
    before, after, markets = shifted
    seed = SEEDS[0]
    m = markets[seed]
    k = int(SHIFT_HOURS / m.gap_hours)
    assert k == 171 * 12  # 300 s ticks
    a, b = regime_market(before, seed), regime_market(after, seed + SHIFT_SEED_OFFSET)
    assert m.n_ticks == a.n_ticks == b.n_ticks
    assert np.array_equal(m.available[:, :k], a.available[:, :k])
    assert np.array_equal(m.available[:, k:], b.available[:, k:])
    assert np.array_equal(m.spot_price[:, :k], a.spot_price[:, :k])
    assert np.array_equal(m.on_demand_price, a.on_demand_price)
    assert m.zones == a.zones and m.regions == a.regions


def test_regime_shift_is_deterministic_per_seed(shifted):
    before, after, markets = shifted
    again = shift_market(before, after, SEEDS[1], SHIFT_HOURS)
    m = markets[SEEDS[1]]
    assert np.array_equal(again.available, m.available)
    assert np.array_equal(again.spot_price, m.spot_price)
    assert not np.array_equal(markets[SEEDS[0]].available, m.available)


@pytest.mark.parametrize("field, value", [("zones_per_region", 2), ("hours", 100.0),
                                          ("gap_seconds", 600.0), ("on_demand_price", 5.0),
                                          ("regions", ("us-east-1",)),
                                          ("region_price_spread", 0.5)])
def test_regime_shift_refuses_mismatched_configs(field, value):
    before = available_config(hours=240.0)
    with pytest.raises(ValueError, match=f"after.{field}"):
        shift_market(before, replace(before, **{field: value}), 0, 100.0)


@pytest.mark.parametrize("shift", [0.0, -5.0, 240.0, 500.0, float("nan")])
def test_regime_shift_refuses_a_shift_outside_the_market(shift):
    before = available_config(hours=240.0)
    with pytest.raises(ValueError, match="shift_hours"):
        shift_market(before, before, 0, shift)


def test_shift_family_starts_lie_around_the_shift():
    fam = FAMILIES["shift_holdout70"]
    before, after = shift_config()
    m = shift_market(before, after, SEEDS[0], SHIFT_HOURS)  # same shape as the family's
    w = fam.work_hours
    for ratio in RATIOS:
        spec = fam.spec(ratio, 0.0)
        starts = fam.starts(m, spec, 20)
        hours = np.array(starts) * m.gap_hours
        assert len(set(starts)) == 20
        assert hours.min() >= fam.warmup_hours >= SHIFT_HOURS - 0.25 * w
        assert hours.max() < SHIFT_HOURS + 0.5 * w
        assert max(starts) + horizon_ticks(spec, m.gap_hours) < m.n_ticks
    # without the window the same market's starts would run to the end
    assert spread_starts(m, fam.spec(1.05, 0.0), 20, fam.warmup_hours)[-1] * m.gap_hours > 200
    with pytest.raises(ValueError, match="last_start_hours"):
        spread_starts(m, fam.spec(3.0, 0.0), 20, fam.warmup_hours, last_start_hours=280.0)
    with pytest.raises(ValueError, match="last_start_hours"):
        spread_starts(m, fam.spec(3.0, 0.0), 20, fam.warmup_hours, last_start_hours=100.0)
