"""A synthetic spot market: the embedded default when no real traces are at hand.

Model (per zone, per instance slot; one tick = ``gap_seconds``)::

    up   --(time to preemption T_up)-->  down --(time to regain T_down)-->  up

* ``T_up`` is drawn in *operational* hours: a lognormal with mean
  ``1 / base_hazard_per_hour`` and log-sd ``uptime_sigma`` (0 = exponential). Each held
  tick consumes ``hour_profile[h] * gap`` operational hours, so the hazard follows the
  UTC hour-of-day profile ``h`` (24 multipliers, mean 1). Real up-runs are heavy-tailed
  (coefficient of variation 1.5-2.6 in the 2023 AWS V100 traces), hence lognormal.
* ``T_down`` (time to regain capacity) is lognormal with mean ``regain_mean_hours`` and
  log-sd ``regain_sigma``, at least one tick.
* Correlated reclaims: each region has reclaim events at ``region_reclaim_rate`` per hour;
  an event hits each zone of the region with probability ``region_reclaim_prob`` and
  takes every slot of a hit zone down, with one shared standard-normal draw for the
  down-times (zones recover together, scaled to their own mean).
* Market-wide events (``global_reclaim_rate``, hit probability ``global_reclaim_prob``
  per zone) correlate zones of different regions the same way.
* Several nodes per zone (``nodes_per_zone``): slots preempt independently, except a
  fraction ``zone_wide_fraction`` of zone-local preemptions takes the whole zone down.

The generated ``Trace`` has ``count = nodes_per_zone`` and ``available`` in
``0..nodes_per_zone`` (a job needing all nodes is "up" only when all are available).

``default_market_config`` embeds parameters calibrated on the public 2023 AWS
p3.2xlarge availability traces (see docs/market-and-statistics.md for the comparison).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from fleet.market.traces import Trace


def _flat_profile() -> list[float]:
    return [1.0] * 24


class ZoneMarketConfig(BaseModel):
    """One emulated zone. Rates per hour, durations in hours."""

    model_config = ConfigDict(extra="forbid")

    zone: str = Field(description="zone name, e.g. us-east-1f; the region is the zone without its last letter")
    base_hazard_per_hour: float = Field(gt=0, description="zone-local preemptions per held hour")
    uptime_sigma: float = Field(default=1.2, ge=0, le=4, description="log-sd of time to preemption (0 = exponential)")
    regain_mean_hours: float = Field(gt=0, description="mean time to regain capacity after a preemption, hours")
    regain_sigma: float = Field(default=1.2, ge=0, le=4, description="log-sd of time to regain capacity")
    hour_profile: list[float] = Field(default_factory=_flat_profile,
                                      description="24 hazard multipliers by UTC hour (normalised to mean 1)")

    @field_validator("hour_profile")
    @classmethod
    def _profile(cls, v: list[float]) -> list[float]:
        if len(v) != 24:
            raise ValueError(f"hour_profile needs 24 values (one per UTC hour), got {len(v)}")
        if any(x < 0 for x in v) or sum(v) <= 0:
            raise ValueError("hour_profile values must be >= 0 and not all zero")
        m = sum(v) / 24.0
        return [x / m for x in v]

    @property
    def region(self) -> str:
        return self.zone[:-1] if self.zone and self.zone[-1].isalpha() else self.zone


class SyntheticMarketConfig(BaseModel):
    """A whole synthetic market. ``gap_seconds`` is the tick of the generated traces."""

    model_config = ConfigDict(extra="forbid")

    zones: list[ZoneMarketConfig] = Field(min_length=1)
    region_reclaim_rate: dict[str, float] = Field(
        default_factory=dict, description="region -> correlated reclaim events per hour")
    region_reclaim_prob: float = Field(default=0.6, ge=0, le=1,
                                       description="probability a region event hits a given zone")
    global_reclaim_rate: float = Field(
        default=0.0, ge=0, description="market-wide reclaim events per hour (all regions)")
    global_reclaim_prob: float = Field(default=0.3, ge=0, le=1,
                                       description="probability a market-wide event hits a given zone")
    nodes_per_zone: int = Field(default=1, ge=1, description="instance slots per zone")
    zone_wide_fraction: float = Field(default=0.5, ge=0, le=1,
                                      description="share of zone-local preemptions that hit every slot")
    gap_seconds: float = Field(default=195.0, gt=0, description="tick length of the traces, seconds")
    accelerator: str = "V100"
    cloud: str = "aws"
    start_hour_utc: float = Field(default=0.0, ge=0, lt=24)

    @model_validator(mode="after")
    def _check(self) -> SyntheticMarketConfig:
        names = [z.zone for z in self.zones]
        if len(set(names)) != len(names):
            raise ValueError(f"zone names must be unique, got {names}")
        regions = {z.region for z in self.zones}
        for r, rate in self.region_reclaim_rate.items():
            if r not in regions:
                raise ValueError(f"region_reclaim_rate names region {r!r}, but no zone is in it "
                                 f"(regions: {sorted(regions)})")
            if rate < 0:
                raise ValueError(f"region_reclaim_rate[{r!r}] must be >= 0 events/hour")
        return self

    @property
    def regions(self) -> list[str]:
        return sorted({z.region for z in self.zones})


# Calibrated on aws-02-15-2023 (p3.2xlarge, 45 days, 195 s ticks):
# ``calibrate_from_traces(traces, 0.3, 0.85, 0.1, 0.4)`` with per-region event rates
# below, then ``refine_calibration(..., hours=1092, iterations=5, n_seeds=2)``. Regional
# and market-wide events account for part of each zone's observed rate, so base hazards
# are lower than the observed rates. Order: the first three span two regions.
_CALIBRATED: tuple[dict, ...] = (
    dict(zone='us-east-1f', base_hazard_per_hour=0.1026, uptime_sigma=1.39,
         regain_mean_hours=1.346, regain_sigma=1.279,
         hour_profile=[0.54, 0.38, 0.44, 0.34, 0.35, 0.32, 0.44, 0.63, 0.67, 0.70, 0.76, 0.80, 0.97, 1.01, 1.27, 1.15, 1.61, 1.63, 1.94, 1.79, 1.95, 1.92, 1.47, 0.92]),
    dict(zone='us-east-1c', base_hazard_per_hour=0.3506, uptime_sigma=1.203,
         regain_mean_hours=1.425, regain_sigma=1.268,
         hour_profile=[0.77, 0.70, 0.68, 0.66, 0.73, 0.73, 0.62, 0.55, 0.72, 0.77, 1.03, 1.17, 1.48, 1.53, 1.43, 1.29, 1.02, 1.22, 1.09, 1.32, 1.23, 1.32, 1.12, 0.81]),
    dict(zone='us-west-2b', base_hazard_per_hour=0.0004, uptime_sigma=1.904,
         regain_mean_hours=0.908, regain_sigma=1.061,
         hour_profile=[1.63, 1.67, 1.78, 1.18, 1.22, 1.17, 0.98, 1.04, 1.05, 1.49, 1.36, 1.37, 1.18, 0.83, 0.58, 0.26, 0.44, 0.36, 0.46, 0.54, 0.69, 0.84, 0.91, 1.00]),
    dict(zone='us-west-2a', base_hazard_per_hour=0.013, uptime_sigma=1.664,
         regain_mean_hours=0.71, regain_sigma=0.89,
         hour_profile=[1.36, 1.78, 2.13, 1.83, 1.60, 1.07, 0.91, 0.75, 0.93, 0.98, 0.93, 0.52, 0.61, 0.51, 0.47, 0.39, 0.44, 0.49, 0.60, 0.77, 1.22, 1.32, 1.21, 1.15]),
    dict(zone='us-east-2a', base_hazard_per_hour=0.0157, uptime_sigma=1.667,
         regain_mean_hours=1.574, regain_sigma=1.321,
         hour_profile=[0.81, 0.96, 1.07, 0.99, 0.84, 0.99, 1.12, 1.29, 1.18, 1.33, 1.31, 1.18, 1.08, 0.91, 0.70, 0.48, 0.60, 1.29, 1.53, 1.35, 0.71, 0.65, 0.74, 0.88]),
    dict(zone='us-east-1d', base_hazard_per_hour=0.2917, uptime_sigma=1.226,
         regain_mean_hours=1.561, regain_sigma=1.268,
         hour_profile=[0.46, 0.55, 0.66, 0.80, 0.81, 0.64, 0.53, 0.41, 0.41, 0.45, 0.63, 0.99, 1.17, 1.27, 1.39, 1.60, 1.73, 1.51, 1.29, 1.24, 1.40, 1.70, 1.35, 1.01]),
    dict(zone='us-west-2c', base_hazard_per_hour=0.0053, uptime_sigma=1.704,
         regain_mean_hours=0.672, regain_sigma=0.957,
         hour_profile=[1.26, 1.40, 1.67, 1.71, 1.58, 0.97, 0.75, 0.63, 0.97, 0.92, 1.23, 1.09, 1.28, 0.92, 0.83, 0.54, 0.38, 0.33, 0.33, 0.83, 1.09, 1.21, 1.04, 1.04]),
    dict(zone='us-east-2b', base_hazard_per_hour=0.0474, uptime_sigma=1.573,
         regain_mean_hours=1.765, regain_sigma=1.315,
         hour_profile=[0.52, 0.59, 0.78, 0.75, 0.63, 0.68, 0.62, 0.68, 0.66, 1.26, 1.66, 1.52, 1.19, 0.95, 1.22, 1.23, 1.19, 1.30, 1.20, 1.28, 1.13, 1.24, 1.02, 0.71]),
    dict(zone='us-east-1a', base_hazard_per_hour=1.2507, uptime_sigma=0.925,
         regain_mean_hours=2.443, regain_sigma=1.587,
         hour_profile=[0.70, 0.74, 0.71, 0.73, 0.70, 0.65, 0.64, 0.90, 1.08, 1.19, 1.15, 1.02, 1.04, 0.84, 0.97, 1.10, 1.50, 1.39, 1.22, 0.91, 1.26, 1.39, 1.26, 0.93]),
)
_REGION_RATES: dict[str, float] = {"us-east-1": 0.3, "us-east-2": 0.12, "us-west-2": 0.12}
_REGION_PROB = 0.85
_GLOBAL_RATE = 0.1
_GLOBAL_PROB = 0.4


def _lognormal(rng: np.random.Generator, mean: np.ndarray | float, sigma: np.ndarray | float,
               z: np.ndarray | float | None = None) -> np.ndarray:
    mean = np.asarray(mean, dtype=float)
    sigma = np.asarray(sigma, dtype=float)
    if z is None:
        z = rng.standard_normal(np.broadcast(mean, sigma).shape)
    mu = np.log(mean) - 0.5 * sigma**2
    return np.exp(mu + sigma * z)


def generate_market(config: SyntheticMarketConfig, hours: float, seed: int) -> list[Trace]:
    """Generate one ``Trace`` per zone covering ``hours`` hours (deterministic per seed)."""
    if hours <= 0:
        raise ValueError(f"hours must be positive, got {hours}")
    rng = np.random.default_rng(seed)
    gap_h = config.gap_seconds / 3600.0
    n_ticks = max(1, int(math.ceil(hours / gap_h)))
    zs = config.zones
    nz, ns = len(zs), config.nodes_per_zone
    hazard = np.array([z.base_hazard_per_hour for z in zs])
    up_sigma = np.array([z.uptime_sigma for z in zs])
    reg_mean = np.array([z.regain_mean_hours for z in zs])
    reg_sigma = np.array([z.regain_sigma for z in zs])
    profile = np.array([z.hour_profile for z in zs])  # (nz, 24)
    region_of = [z.region for z in zs]
    regions = config.regions
    zone_in_region = np.array([[region_of[i] == r for i in range(nz)] for r in regions])
    p_region = np.array([1.0 - math.exp(-config.region_reclaim_rate.get(r, 0.0) * gap_h)
                         for r in regions])
    p_global = 1.0 - math.exp(-config.global_reclaim_rate * gap_h)

    def draw_up(shape_idx: np.ndarray) -> np.ndarray:
        m = 1.0 / hazard[shape_idx]
        s = up_sigma[shape_idx]
        out = _lognormal(rng, m, s)
        expo = s == 0
        if np.any(expo):
            out[expo] = rng.exponential(m[expo])
        return out

    zone_idx = np.repeat(np.arange(nz)[:, None], ns, axis=1)  # (nz, ns)
    # start in the stationary-ish state: up with probability of the zone's availability
    avail0 = (1 / hazard) / (1 / hazard + reg_mean)
    up = rng.random((nz, ns)) < avail0[:, None]
    op_left = draw_up(zone_idx.ravel()).reshape(nz, ns) * rng.random((nz, ns))
    down_left = np.where(up, 0.0, _lognormal(rng, reg_mean[:, None] * np.ones((1, ns)),
                                             reg_sigma[:, None] * np.ones((1, ns)))
                         * rng.random((nz, ns)))
    out = np.zeros((nz, n_ticks), dtype=np.int32)
    hours_of_day = ((config.start_hour_utc + np.arange(n_ticks) * gap_h) % 24).astype(int)

    def take_down(mask: np.ndarray, z: np.ndarray | float | None) -> None:
        nonlocal up, down_left
        if not mask.any():
            return
        d = _lognormal(rng, reg_mean[:, None] * np.ones((1, ns)),
                       reg_sigma[:, None] * np.ones((1, ns)), z)
        d = np.maximum(d, gap_h)
        down_left = np.where(mask & up, d, np.where(mask, np.maximum(down_left, d), down_left))
        up = up & ~mask

    for t in range(n_ticks):
        h = hours_of_day[t]
        # 1. regional reclaim events
        if p_region.size:
            ev = rng.random(p_region.size) < p_region
            for ri in np.flatnonzero(ev):
                hit = zone_in_region[ri] & (rng.random(nz) < config.region_reclaim_prob)
                if hit.any():
                    take_down(np.repeat(hit[:, None], ns, axis=1), float(rng.standard_normal()))
        if p_global > 0 and rng.random() < p_global:
            hit = rng.random(nz) < config.global_reclaim_prob
            if hit.any():
                take_down(np.repeat(hit[:, None], ns, axis=1), float(rng.standard_normal()))
        # 2. zone-local preemptions of held slots
        op_left = np.where(up, op_left - profile[:, h][:, None] * gap_h, op_left)
        pre = up & (op_left <= 0)
        if pre.any():
            whole = pre.any(axis=1) & (rng.random(nz) < config.zone_wide_fraction) if ns > 1 \
                else np.zeros(nz, dtype=bool)
            mask = pre | np.repeat(whole[:, None], ns, axis=1)
            take_down(mask, None)
        # 3. capacity regained
        down_left = np.where(~up, down_left - gap_h, down_left)
        back = ~up & (down_left <= 0)
        if back.any():
            fresh = draw_up(zone_idx[back])
            op_left[back] = fresh
            up = up | back
        out[:, t] = up.sum(axis=1)
    return [Trace(zone=z.zone, accelerator=config.accelerator, count=ns,
                  gap_seconds=config.gap_seconds, available=out[i].copy(), cloud=config.cloud,
                  source=f"synthetic(seed={seed})") for i, z in enumerate(zs)]


# --------------------------------------------------------------------------- calibration


def calibrate_zone(trace: Trace, regional_share_per_hour: float = 0.0,
                   smooth_hours: int = 3) -> ZoneMarketConfig:
    """Fit one zone's parameters from a 1-node trace (method of moments on the runs).

    ``regional_share_per_hour`` (preemptions/hour caused by region events) is removed
    from the observed rate to get the zone-local base hazard.
    """
    from fleet.stats.preemption import runs, trace_stats

    st = trace_stats(trace)
    _, lengths, values = runs(trace.up())
    gap_h = trace.gap_seconds / 3600.0
    up_runs = lengths[values][1:-1] * gap_h if values.sum() > 2 else lengths[values] * gap_h
    down_runs = lengths[~values][1:-1] * gap_h if (~values).sum() > 2 else lengths[~values] * gap_h
    base = max(st.rate_per_hour - regional_share_per_hour, 0.05 * st.rate_per_hour)
    # circular moving average of the hourly rate, then normalised to mean 1
    r = np.asarray(st.hour_rate)
    k = max(1, smooth_hours)
    sm = np.array([np.mean([r[(h + d) % 24] for d in range(-(k // 2), k - k // 2)])
                   for h in range(24)])
    if sm.sum() <= 0:
        sm = np.ones(24)
    return ZoneMarketConfig(
        zone=trace.zone, base_hazard_per_hour=round(float(base), 4),
        uptime_sigma=round(float(np.std(np.log(up_runs))), 3) if up_runs.size > 2 else 1.0,
        regain_mean_hours=round(float(st.regain_mean_hours or gap_h), 3),
        regain_sigma=round(float(np.std(np.log(down_runs))), 3) if down_runs.size > 2 else 1.0,
        hour_profile=[round(float(x), 3) for x in sm / sm.mean()],
    )


def calibrate_from_traces(traces: Sequence[Trace], region_reclaim_rate: float = 0.3,
                          region_reclaim_prob: float = 0.85, global_reclaim_rate: float = 0.0,
                          global_reclaim_prob: float = 0.4, refine: bool = False,
                          hours: float | None = None) -> SyntheticMarketConfig:
    """Fit a market to real 1-node traces (one zone per trace, same gap).

    The event shares ``region_reclaim_rate * region_reclaim_prob`` and
    ``global_reclaim_rate * global_reclaim_prob`` are removed from each zone's observed
    rate; ``refine=True`` then runs ``refine_calibration`` over ``hours`` (default: the
    traces' length).
    """
    share = region_reclaim_rate * region_reclaim_prob + global_reclaim_rate * global_reclaim_prob
    zones = [calibrate_zone(t, share) for t in traces]
    regions = sorted({z.region for z in zones})
    cfg = SyntheticMarketConfig(
        zones=zones, region_reclaim_rate={r: region_reclaim_rate for r in regions},
        region_reclaim_prob=region_reclaim_prob, global_reclaim_rate=global_reclaim_rate,
        global_reclaim_prob=global_reclaim_prob, gap_seconds=traces[0].gap_seconds,
        accelerator=traces[0].accelerator, cloud=traces[0].cloud)
    if refine:
        cfg = refine_calibration(cfg, traces, hours or traces[0].duration_hours)
    return cfg


def default_market_config(n_zones: int = 3, nodes_per_zone: int = 1,
                          gap_seconds: float = 195.0) -> SyntheticMarketConfig:
    """The embedded default market: ``n_zones`` (1-9) zones calibrated on real traces.

    With 3 zones: us-east-1f, us-east-1c (same region, correlated) and us-west-2b.
    """
    if not 1 <= n_zones <= len(_CALIBRATED):
        raise ValueError(f"n_zones must be 1..{len(_CALIBRATED)} (calibrated zones), got {n_zones}")
    zones = [ZoneMarketConfig(**z) for z in _CALIBRATED[:n_zones]]
    regions = sorted({z.region for z in zones})
    return SyntheticMarketConfig(
        zones=zones, region_reclaim_rate={r: _REGION_RATES.get(r, 0.15) for r in regions},
        region_reclaim_prob=_REGION_PROB, global_reclaim_rate=_GLOBAL_RATE,
        global_reclaim_prob=_GLOBAL_PROB, nodes_per_zone=nodes_per_zone, gap_seconds=gap_seconds)


def refine_calibration(config: SyntheticMarketConfig, targets: Sequence[Trace],
                       hours: float = 1000.0, iterations: int = 4, seed: int = 0,
                       n_seeds: int = 3) -> SyntheticMarketConfig:
    """Simulation-based method of moments: rescale each zone's base hazard and mean time
    to regain so that generated markets (``n_seeds`` per iteration, pooled) reproduce the
    targets' preemption rate and mean time to regain (regional events and heavy tails
    bias the one-shot fit)."""
    from fleet.stats.preemption import trace_stats

    want = {t.zone: trace_stats(t) for t in targets}
    cfg = config
    for it in range(iterations):
        pre: dict[str, float] = {}
        held: dict[str, float] = {}
        reg_sum: dict[str, float] = {}
        reg_n: dict[str, int] = {}
        for k in range(n_seeds):
            for t in generate_market(cfg, hours, seed + it * n_seeds + k):
                st = trace_stats(t)
                pre[t.zone] = pre.get(t.zone, 0.0) + st.preemptions
                held[t.zone] = held.get(t.zone, 0.0) + st.held_hours
                if st.regain_mean_hours is not None:
                    reg_sum[t.zone] = reg_sum.get(t.zone, 0.0) + st.regain_mean_hours * st.regain_samples
                    reg_n[t.zone] = reg_n.get(t.zone, 0) + st.regain_samples
        zones = []
        for z in cfg.zones:
            w = want.get(z.zone)
            if w is None or not pre.get(z.zone) or not held.get(z.zone):
                zones.append(z)
                continue
            f_rate = min(max(w.rate_per_hour / (pre[z.zone] / held[z.zone]), 0.3), 3.0)
            f_reg = 1.0
            if w.regain_mean_hours and reg_n.get(z.zone):
                f_reg = min(max(w.regain_mean_hours / (reg_sum[z.zone] / reg_n[z.zone]), 0.3), 3.0)
            zones.append(z.model_copy(update={
                "base_hazard_per_hour": round(z.base_hazard_per_hour * f_rate, 4),
                "regain_mean_hours": round(z.regain_mean_hours * f_reg, 3)}))
        cfg = cfg.model_copy(update={"zones": zones})
    return cfg
