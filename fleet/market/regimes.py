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

**Regime shift** (:func:`shift_market`, :func:`shift_config`): a market whose history
lies about its future. Every tick before ``shift_hours`` is the ``before`` regime's,
every tick from it on the ``after`` regime's (an independent draw, seed + 10007),
on the same zones, regions, region price levels and on-demand prices, so only the
behaviour changes at the shift (and the spot price where the two configs price
differently). :func:`shift_config` is the pair behind the ``shift_holdout70`` family:
calm, mostly available before (:func:`available_config`); after, the cheap zones flap
(0.5 h up-runs, 1.5 h downs: ~25 % available) while the dearer reliable zone of each
region stays up (~94 %). That is what SkyNomad's GCP H100 window does to policies that
trust the history before the job (docs/fleet-policies.md, "Comparing with SkyNomad's
published figures"); a stationary regime never does it. :func:`reliable_break_config` is
the opposite shift (the ``reliable_break_holdout300`` family): the reliable zone of each
region flaps after the shift while the cheap ones stay calm; :func:`all_break_config` breaks
every zone (the ``all_break_holdout410`` family).
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

    def __post_init__(self) -> None:
        """Refuse a field the generator cannot use, naming it (until 2026-11-28 a zero mean
        run ended in ``math domain error``, a negative rate in numpy's ``lam < 0``, a zero
        spot price in ``Market.spot_price must be positive $/h of shape (9, 1440), got (9,
        1440)``, no regions in ``zero-size array to reduction operation``)."""
        def bad(name: str, need: str) -> ValueError:
            return ValueError(f"RegimeConfig.{name} = {getattr(self, name)!r}: must be {need}")

        def num(x: object) -> bool:
            return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)

        if (not isinstance(self.regions, tuple) or not self.regions
                or not all(isinstance(r, str) and r for r in self.regions)
                or len(set(self.regions)) != len(self.regions)):
            raise bad("regions", "a non-empty tuple of distinct region names, e.g. ('us-east-1',)")
        for name in ("zones_per_region", "drought_regions"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < (name == "zones_per_region"):
                raise bad(name, "a whole number >= 1" if name == "zones_per_region"
                          else "a whole number >= 0")
        for name, need in (("gap_seconds", "> 0 (seconds per tick)"), ("hours", "> 0"),
                           ("up_mean_hours", "> 0 (mean up-run, hours)"),
                           ("down_mean_hours", "> 0 (mean down-run, hours)"),
                           ("spot_price", "> 0 ($/h)"), ("on_demand_price", "> 0 ($/h)"),
                           ("reliable_up_factor", "> 0"), ("reliable_price_factor", "> 0")):
            v = getattr(self, name)
            if not num(v) or v <= 0:
                raise bad(name, f"a finite number {need}")
        for name in ("run_sigma", "region_outages_per_day", "region_outage_mean_hours",
                     "market_outages_per_day", "market_outage_mean_hours", "droughts_per_week",
                     "region_price_spread", "spikes_per_day", "spike_mean_hours"):
            v = getattr(self, name)
            if not num(v) or v < 0:
                raise bad(name, "a finite number >= 0 (0: none)")
        for name, low in (("drought_days", 0.0), ("spike_factor", 0.0)):
            v = getattr(self, name)
            if (not isinstance(v, tuple) or len(v) != 2 or not all(num(x) for x in v)
                    or not low <= v[0] <= v[1] or (name == "spike_factor" and v[0] <= 0)):
                raise bad(name, "a pair (low, high) of finite numbers with "
                          + ("0 < low <= high (x the spot price)" if name == "spike_factor"
                             else "0 <= low <= high (days)"))

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
    return _market(config, *_regime_arrays(config, seed))


def _market(config: RegimeConfig, avail: np.ndarray, price: np.ndarray, region_base: np.ndarray):
    from fleet.simulation.market import Market

    zones = config.zone_names
    zpr = config.zones_per_region
    od = np.array([config.on_demand_price * region_base[zi // zpr] for zi in range(len(zones))])
    return Market(zones=zones, gap_seconds=config.gap_seconds, available=avail,
                  regions=tuple(config.regions[zi // zpr] for zi in range(len(zones))),
                  clouds=tuple("aws" for _ in zones), instance_types=tuple("synthetic" for _ in zones),
                  spot_price=price, on_demand_price=od)


def _regime_arrays(config: RegimeConfig, seed: int, region_base: np.ndarray | None = None
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(availability, spot price, region price levels) of ``regime_market(config, seed)``;
    ``region_base`` replaces the drawn region price levels (the draw still happens, so
    availability is the same either way)."""
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
    drawn = 1.0 + config.region_price_spread * rng.random(len(config.regions))
    region_base = drawn if region_base is None else region_base
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
    return avail, price, region_base


SHIFT_SEED_OFFSET = 10007
"""The ``after`` regime of :func:`shift_market` is drawn with ``seed + SHIFT_SEED_OFFSET``."""


def shift_config(**after_overrides) -> tuple[RegimeConfig, RegimeConfig]:
    """(before, after) of a regime shift: before = :func:`available_config` (up-runs 12 h,
    downs 1 h, rare region outages); after = the cheap zones turn flaky (up-runs 0.5 h,
    downs 1.5 h: ~25 % available) while each region's reliable zone (``k == 0``, 1.6x the
    spot price) keeps long up-runs (``reliable_up_factor`` 48: 24 h, ~94 % available).
    Same prices, regions and length (12 days) on both sides; ``after_overrides`` change
    the after regime only."""
    before = available_config(hours=24.0 * 12)
    after = replace(before, up_mean_hours=0.5, down_mean_hours=1.5, reliable_up_factor=48.0)
    return before, replace(after, **after_overrides)


def reliable_break_config(**after_overrides) -> tuple[RegimeConfig, RegimeConfig]:
    """(before, after) of the opposite regime shift: before = :func:`available_config` (as
    :func:`shift_config`: each region's reliable zone, ``k == 0``, 1.6x the spot price, has
    4x longer up-runs, 48 h); after = that reliable zone flaps (0.5 h up-runs:
    ``reliable_up_factor`` 1/24, 1 h downs: ~33 % available) while the cheap zones keep the
    calm regime (12 h up-runs, 1 h downs). The zone whose history is best is the one that
    breaks: a policy (or baseline) that trusts the best history is the one it punishes."""
    before = available_config(hours=24.0 * 12)
    after = replace(before, reliable_up_factor=0.5 / before.up_mean_hours)
    return before, replace(after, **after_overrides)


def all_break_config(**after_overrides) -> tuple[RegimeConfig, RegimeConfig]:
    """(before, after) of a regime shift that breaks every zone: before =
    :func:`available_config` (as :func:`shift_config`); after = every zone flaps, the
    reliable one too (0.5 h up-runs, 1.5 h downs: ~25 % available; ``reliable_up_factor``
    1). No zone's history is true after the shift, so no ordering of the zones helps: the
    test is how soon a policy stops betting on spot (the ``all_break_holdout410`` family)."""
    before = available_config(hours=24.0 * 12)
    after = replace(before, up_mean_hours=0.5, down_mean_hours=1.5, reliable_up_factor=1.0)
    return before, replace(after, **after_overrides)


def shift_market(before: RegimeConfig, after: RegimeConfig, seed: int, shift_hours: float):
    """A market that changes regime at ``shift_hours``: the ticks before the shift tick
    ``int(shift_hours / gap)`` are those of ``regime_market(before, seed)``, the ticks from
    it on those of ``regime_market(after, seed + SHIFT_SEED_OFFSET)`` (each regime drawn over
    the whole length and cut at the shift, so the after regime is already in its stationary
    state there), with ``before``'s region price levels and on-demand prices on both sides.

    ``before`` and ``after`` must agree on ``regions``, ``zones_per_region``,
    ``gap_seconds``, ``hours`` (the market's length), ``on_demand_price`` and
    ``region_price_spread``; they may differ in anything else (run lengths, outages,
    spot price and its spikes). ``0 < shift_hours < hours``. A ``ValueError`` names the
    field otherwise.
    """
    for name in ("regions", "zones_per_region", "gap_seconds", "hours", "on_demand_price",
                 "region_price_spread"):
        if getattr(before, name) != getattr(after, name):
            raise ValueError(f"shift_market: before.{name} = {getattr(before, name)!r} but "
                             f"after.{name} = {getattr(after, name)!r}; they must be equal")
    if not (isinstance(shift_hours, (int, float)) and math.isfinite(shift_hours)
            and 0.0 < shift_hours < before.hours):
        raise ValueError(f"shift_market: shift_hours = {shift_hours!r} must be in (0, "
                         f"{before.hours:g}) (the market's hours)")
    avail, price, base = _regime_arrays(before, seed)
    avail2, price2, _ = _regime_arrays(after, seed + SHIFT_SEED_OFFSET, region_base=base)
    k = int(shift_hours / (before.gap_seconds / 3600.0))
    if not 0 < k < avail.shape[1]:
        raise ValueError(f"shift_market: shift_hours = {shift_hours!r} falls outside the "
                         f"market's ticks")
    avail[:, k:] = avail2[:, k:]
    price[:, k:] = price2[:, k:]
    return _market(before, avail, price, base)
