"""Synthetic market regimes for robustness tests: volatile capacity, droughts, region-wide
outages, price spikes, expensive-and-reliable vs cheap-and-flaky zones.

:func:`regime_market` builds a :class:`~fleet.simulation.market.Market` directly
(availability, per-tick spot prices, regions, on-demand prices) from a
:class:`RegimeConfig`. Per zone, capacity alternates up and down runs with lognormal
lengths (heavy tails, as in the real traces); on top of that:

* **region-wide outages** take every zone of a region down together, and
  **market-wide outages** every zone (Poisson events, exponential lengths);
* **multi-day droughts** take every zone of ``drought_regions`` randomly chosen regions
  down for ``drought_days`` days;
* **price spikes** multiply a zone's spot price for a few hours;
* **cheap and flaky vs expensive and reliable**: within a region, zone ``k`` has a
  reliability rank: the most reliable zone has ``reliable_up_factor`` x longer up-runs
  and ``reliable_price_factor`` x the price.

:func:`volatile_config` is the "synthetic volatile" family of docs/fleet-policies.md
(all zones down 24-54 % of the time over the report seeds); :func:`available_config` a mostly-available
contrast. Deterministic per seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np


@dataclass(frozen=True)
class RegimeConfig:
    """A synthetic regime (hours, $/h unless noted)."""

    regions: tuple[str, ...] = ("us-east-1", "us-west-2", "eu-west-1")
    zones_per_region: int = 3
    gap_seconds: float = 300.0
    hours: float = 24.0 * 30
    up_mean_hours: float = 3.0  # mean up-run of an ordinary zone
    down_mean_hours: float = 3.0  # mean down-run
    run_sigma: float = 1.0  # log-sd of run lengths
    region_outages_per_day: float = 0.5  # per region
    region_outage_mean_hours: float = 6.0
    market_outages_per_day: float = 0.0  # events taking every zone down together
    market_outage_mean_hours: float = 4.0
    droughts_per_week: float = 0.5  # market events taking drought_regions regions down
    drought_days: tuple[float, float] = (1.0, 3.0)
    drought_regions: int = 2
    spot_price: float = 1.0  # base spot $/h of the cheapest zone
    region_price_spread: float = 0.3  # regions' base prices spread over 1 .. 1 + spread
    reliable_up_factor: float = 4.0
    reliable_price_factor: float = 1.6
    spikes_per_day: float = 0.3  # per zone
    spike_factor: tuple[float, float] = (1.5, 3.0)
    spike_mean_hours: float = 4.0
    on_demand_price: float = 3.4

    @property
    def zone_names(self) -> tuple[str, ...]:
        return tuple(f"{r}{chr(ord('a') + k)}" for r in self.regions
                     for k in range(self.zones_per_region))


def volatile_config(**overrides) -> RegimeConfig:
    """Volatile: short up-runs, long downs, daily region outages, multi-day droughts."""
    base = RegimeConfig(up_mean_hours=2.5, down_mean_hours=4.0, region_outages_per_day=0.8,
                        region_outage_mean_hours=8.0, market_outages_per_day=1.2,
                        market_outage_mean_hours=5.0, droughts_per_week=0.7,
                        drought_days=(1.0, 3.0), drought_regions=3)
    return replace(base, **overrides)


def available_config(**overrides) -> RegimeConfig:
    """Mostly available: long up-runs, short downs, rare outages, no droughts."""
    base = RegimeConfig(up_mean_hours=12.0, down_mean_hours=1.0, region_outages_per_day=0.1,
                        region_outage_mean_hours=2.0, droughts_per_week=0.0)
    return replace(base, **overrides)


def _lognormal(rng: np.random.Generator, mean: float, sigma: float, n: int) -> np.ndarray:
    mu = math.log(mean) - 0.5 * sigma**2
    return rng.lognormal(mu, sigma, n)


def _events(rng: np.random.Generator, rate_per_hour: float, hours: float) -> np.ndarray:
    n = rng.poisson(rate_per_hour * hours)
    return np.sort(rng.uniform(0.0, hours, n))


def regime_market(config: RegimeConfig, seed: int):
    """Generate the market (see the module docstring)."""
    from fleet.simulation.market import Market

    if config.hours <= 0 or config.gap_seconds <= 0 or config.zones_per_region < 1:
        raise ValueError("RegimeConfig needs hours > 0, gap_seconds > 0, zones_per_region >= 1")
    rng = np.random.default_rng(seed)
    g = config.gap_seconds / 3600.0
    n = int(math.ceil(config.hours / g))
    zones = config.zone_names
    nz = len(zones)
    zpr = config.zones_per_region
    avail = np.zeros((nz, n), dtype=bool)
    price = np.empty((nz, n))
    region_base = 1.0 + config.region_price_spread * rng.random(len(config.regions))
    for zi in range(nz):
        ri, k = divmod(zi, zpr)
        reliable = k == 0 and zpr > 1
        up_mean = config.up_mean_hours * (config.reliable_up_factor if reliable else 1.0)
        t = 0.0
        up = bool(rng.random() < up_mean / (up_mean + config.down_mean_hours))
        while t < config.hours:
            d = float(_lognormal(rng, up_mean if up else config.down_mean_hours,
                                 config.run_sigma, 1)[0])
            a, b = int(t / g), int(min(config.hours, t + max(d, g)) / g)
            avail[zi, a:b] = up
            t += max(d, g)
            up = not up
        p0 = config.spot_price * region_base[ri] * (config.reliable_price_factor if reliable else 1.0)
        price[zi] = p0
        for s in _events(rng, config.spikes_per_day / 24.0, config.hours):
            a = int(s / g)
            b = int(min(config.hours, s + rng.exponential(config.spike_mean_hours)) / g) + 1
            price[zi, a:b] = p0 * rng.uniform(*config.spike_factor)
    for ri in range(len(config.regions)):
        for s in _events(rng, config.region_outages_per_day / 24.0, config.hours):
            a = int(s / g)
            b = int(min(config.hours, s + rng.exponential(config.region_outage_mean_hours)) / g) + 1
            avail[ri * zpr:(ri + 1) * zpr, a:b] = False
    for s in _events(rng, config.market_outages_per_day / 24.0, config.hours):
        a = int(s / g)
        b = int(min(config.hours, s + rng.exponential(config.market_outage_mean_hours)) / g) + 1
        avail[:, a:b] = False
    for s in _events(rng, config.droughts_per_week / 168.0, config.hours):
        hit = rng.choice(len(config.regions), size=min(config.drought_regions, len(config.regions)),
                         replace=False)
        a = int(s / g)
        b = int(min(config.hours, s + 24.0 * rng.uniform(*config.drought_days)) / g) + 1
        for ri in hit:
            avail[ri * zpr:(ri + 1) * zpr, a:b] = False
    od = np.array([config.on_demand_price * region_base[zi // zpr] for zi in range(nz)])
    return Market(zones=zones, gap_seconds=config.gap_seconds, available=avail,
                  regions=tuple(config.regions[zi // zpr] for zi in range(nz)),
                  clouds=tuple("aws" for _ in zones), instance_types=tuple("synthetic" for _ in zones),
                  spot_price=price, on_demand_price=od)
