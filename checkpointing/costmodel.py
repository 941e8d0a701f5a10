"""The spot-vs-on-demand cost model of the spot-training playbook (section 3 and exercises).

Pure functions. Units: prices in $/node-hour; durations in HOURS (names end in
``_hours``); preemption rates ``lambda`` in preemptions per hour (``rate_per_hour``).

Model (playbook section 3): preemptions arrive as a Poisson process at rate lambda; a
checkpoint costs C hours and is written every T hours of useful work; a preemption
re-does on average T/2 of work and (exercise 2) pays a fixed restore-and-rejoin cost R.
For H useful hours the self-consistent wall clock W satisfies
W = H (1 + C/T) + lambda W (T/2 + R), so

    W = H (1 + C/T) / (1 - lambda (T/2 + R))        valid while lambda (T/2 + R) < 1
    c_eff = c_sp W / H = c_sp (1 + C/T) / (1 - lambda (T/2 + R))

Closed forms used below (derivations in docs/cost-model.md):

* the optimum T solves T^2 + 2 C T - 2 C (1 - lambda R)/lambda = 0, i.e.
  ``T_opt = -C + sqrt(C^2 + 2 C (1 - lambda R)/lambda)``;
* at that optimum ``c_eff = c_sp (1 + 2C/T_opt) / (1 - lambda R)``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "CostRow",
    "SpotRun",
    "ZoneLossStats",
    "break_even_rate_per_hour",
    "cost_table",
    "effective_cost_per_useful_hour",
    "optimal_interval_hours",
    "spot_run",
    "wasted_fraction",
    "young_interval_hours",
    "zone_loss_stats",
]

IntervalRule = Literal["young", "optimal"]
PLAYBOOK_SEARCH_STEP_PER_HOUR = 0.005
"""Grid step (preemptions/hour) that reproduces the playbook's break-even line exactly:
scanning lambda = 0.005, 0.010, ... the highest rate where spot still wins is 1.245/h,
printed as "~1.25" with a mean lifetime of 60/1.245 = 48.19 -> "~48.2 min". A 0.01 grid
gives 1.24 / 48.4 (does not match); any grid of 0.005 or finer, or the exact root
(1.24567/h), prints the same two numbers."""


def _check(name: str, value: float, *, positive: bool = False) -> float:
    ok = isinstance(value, int | float) and math.isfinite(value)
    ok = ok and (value > 0 if positive else value >= 0)
    if not ok:
        bound = "> 0" if positive else ">= 0"
        raise ValueError(f"{name} must be a finite number {bound}, got {value!r}")
    return float(value)


def young_interval_hours(ckpt_hours: float, rate_per_hour: float) -> float:
    """Young/Daly interval the playbook's demo uses: ``sqrt(2 C / lambda)`` hours."""
    c = _check("ckpt_hours", ckpt_hours, positive=True)
    lam = _check("rate_per_hour", rate_per_hour, positive=True)
    return math.sqrt(2.0 * c / lam)


def optimal_interval_hours(
    ckpt_hours: float, rate_per_hour: float, restart_hours: float = 0.0
) -> float:
    """Interval T (hours) that minimises c_eff exactly, restore cost R included.

    ``T_opt = -C + sqrt(C^2 + 2 C (1 - lambda R) / lambda)``. Raises ValueError when
    ``lambda R >= 1`` (restores alone eat all the time: no interval makes progress).
    """
    c = _check("ckpt_hours", ckpt_hours, positive=True)
    lam = _check("rate_per_hour", rate_per_hour, positive=True)
    r = _check("restart_hours", restart_hours)
    a = 1.0 - lam * r
    if a <= 0:
        raise ValueError(
            f"rate_per_hour * restart_hours = {lam * r:.3g} >= 1: restores alone consume all "
            "wall-clock time; lower the restart cost or the preemption rate"
        )
    return -c + math.sqrt(c * c + 2.0 * c * a / lam)


def effective_cost_per_useful_hour(
    spot_price: float,
    ckpt_hours: float,
    interval_hours: float,
    rate_per_hour: float,
    restart_hours: float = 0.0,
) -> float:
    """``c_eff = c_sp (1 + C/T) / (1 - lambda (T/2 + R))`` in $ per useful node-hour.

    Returns ``math.inf`` when ``lambda (T/2 + R) >= 1`` (the job thrashes).
    """
    sp = _check("spot_price", spot_price)
    c = _check("ckpt_hours", ckpt_hours)
    t = _check("interval_hours", interval_hours, positive=True)
    lam = _check("rate_per_hour", rate_per_hour)
    r = _check("restart_hours", restart_hours)
    denom = 1.0 - lam * (t / 2.0 + r)
    if denom <= 0:
        return math.inf
    return sp * (1.0 + c / t) / denom


@dataclass(frozen=True)
class SpotRun:
    """One spot run of ``useful_hours`` of work (all fields in hours or $/useful hour)."""

    wall_clock_hours: float
    redone_hours: float
    restore_hours: float
    ckpt_hours_total: float
    eff_cost_per_useful_hour: float
    wasted_fraction: float


def spot_run(
    *,
    spot_price: float,
    ckpt_hours: float,
    interval_hours: float,
    rate_per_hour: float,
    restart_hours: float = 0.0,
    useful_hours: float = 100.0,
) -> SpotRun:
    """Self-consistent wall clock of a spot run (the playbook's Code 18.6.2, plus R).

    ``W = H (1 + C/T) / (1 - lambda (T/2 + R))``; redone work ``lambda W T/2``;
    restores ``lambda W R``; checkpoint time ``H C/T``. The wasted fraction is
    (redone + restores + checkpoints) / W. A thrashing job returns W = inf, waste = 1.
    """
    h = _check("useful_hours", useful_hours, positive=True)
    eff = effective_cost_per_useful_hour(
        spot_price, ckpt_hours, interval_hours, rate_per_hour, restart_hours
    )
    ckpt_total = h * ckpt_hours / interval_hours
    if math.isinf(eff):
        return SpotRun(math.inf, math.inf, math.inf, ckpt_total, math.inf, 1.0)
    w = (
        h
        * (1.0 + ckpt_hours / interval_hours)
        / (1.0 - rate_per_hour * (interval_hours / 2.0 + restart_hours))
    )
    redone = rate_per_hour * w * interval_hours / 2.0
    restores = rate_per_hour * w * restart_hours
    return SpotRun(
        wall_clock_hours=w,
        redone_hours=redone,
        restore_hours=restores,
        ckpt_hours_total=ckpt_total,
        eff_cost_per_useful_hour=eff,
        wasted_fraction=(redone + restores + ckpt_total) / w,
    )


def wasted_fraction(
    ckpt_hours: float, interval_hours: float, rate_per_hour: float, restart_hours: float = 0.0
) -> float:
    """Fraction of wall clock not spent on useful work (independent of H and prices)."""
    return spot_run(
        spot_price=1.0,
        ckpt_hours=ckpt_hours,
        interval_hours=interval_hours,
        rate_per_hour=rate_per_hour,
        restart_hours=restart_hours,
    ).wasted_fraction


def _interval(rule: IntervalRule, ckpt_hours: float, rate: float, restart_hours: float) -> float:
    if rule == "young":
        return young_interval_hours(ckpt_hours, rate)
    if rule == "optimal":
        return optimal_interval_hours(ckpt_hours, rate, restart_hours)
    raise ValueError(f"interval rule must be 'young' or 'optimal', got {rule!r}")


def _cost_at(
    rate: float, spot_price: float, ckpt_hours: float, restart_hours: float, rule: IntervalRule
) -> float:
    if rate * restart_hours >= 1.0:
        return math.inf
    t = _interval(rule, ckpt_hours, rate, restart_hours)
    return effective_cost_per_useful_hour(spot_price, ckpt_hours, t, rate, restart_hours)


def break_even_rate_per_hour(
    *,
    on_demand_price: float,
    spot_price: float,
    ckpt_hours: float,
    restart_hours: float = 0.0,
    interval: IntervalRule = "young",
    step_per_hour: float | None = PLAYBOOK_SEARCH_STEP_PER_HOUR,
    max_rate_per_hour: float = 1000.0,
) -> float:
    """Highest preemption rate (per hour) at which spot still beats on-demand.

    ``interval="young"`` evaluates c_eff at T* = sqrt(2C/lambda) (the playbook demo);
    ``"optimal"`` at the exact optimum T. With ``step_per_hour`` set, scans the grid
    lambda = k * step (k = 1, 2, ...) and returns the highest grid point where
    c_eff < c_od (the playbook's search; see PLAYBOOK_SEARCH_STEP_PER_HOUR); with
    ``step_per_hour=None`` returns the exact root (bisection, 1e-12 relative).
    Returns 0.0 when spot never wins (c_sp >= c_od) and ``max_rate_per_hour`` when it
    still wins there.
    """
    od = _check("on_demand_price", on_demand_price, positive=True)
    sp = _check("spot_price", spot_price, positive=True)
    c = _check("ckpt_hours", ckpt_hours, positive=True)
    r = _check("restart_hours", restart_hours)

    def wins(lam: float) -> bool:
        return _cost_at(lam, sp, c, r, interval) < od

    if sp >= od:
        return 0.0
    if wins(max_rate_per_hour):
        return max_rate_per_hour
    # c_eff rises monotonically with lambda: bracket the crossing, then refine.
    lo, hi = 0.0, max_rate_per_hour
    while hi - lo > 1e-12 * max(1.0, hi):
        mid = 0.5 * (lo + hi)
        if mid > 0 and wins(mid):
            lo = mid
        else:
            hi = mid
    if step_per_hour is None:
        return lo
    step = _check("step_per_hour", step_per_hour, positive=True)
    k = math.floor(lo / step) + 1
    while k > 0 and not wins(k * step):  # integer grid points: no float drift
        k -= 1
    return k * step


@dataclass(frozen=True)
class CostRow:
    """One row of the playbook's Output 18.6.2 (hours, $/useful hour, fraction)."""

    rate_per_hour: float
    interval_hours: float
    eff_cost_per_useful_hour: float
    wasted_fraction: float
    spot_wins: bool


def cost_table(
    *,
    on_demand_price: float,
    spot_price: float,
    ckpt_hours: float,
    rates_per_hour: Iterable[float],
    restart_hours: float = 0.0,
    interval: IntervalRule = "young",
) -> list[CostRow]:
    """Rows of the playbook table for each preemption rate (interval rule selectable)."""
    od = _check("on_demand_price", on_demand_price, positive=True)
    rows = []
    for lam in rates_per_hour:
        _check("rate_per_hour", lam, positive=True)
        t = _interval(interval, ckpt_hours, lam, restart_hours) if lam * restart_hours < 1 else 0
        if t <= 0:
            rows.append(CostRow(lam, math.nan, math.inf, 1.0, False))
            continue
        run = spot_run(
            spot_price=spot_price,
            ckpt_hours=ckpt_hours,
            interval_hours=t,
            rate_per_hour=lam,
            restart_hours=restart_hours,
        )
        rows.append(
            CostRow(
                rate_per_hour=lam,
                interval_hours=t,
                eff_cost_per_useful_hour=run.eff_cost_per_useful_hour,
                wasted_fraction=run.wasted_fraction,
                spot_wins=run.eff_cost_per_useful_hour < od,
            )
        )
    return rows


@dataclass(frozen=True)
class ZoneLossStats:
    """Workers lost per hour when whole zones are reclaimed (counts per hour)."""

    workers: int
    zones: int
    zone_reclaim_prob_per_hour: float
    mean_lost_per_hour: float
    variance_lost_per_hour: float
    std_lost_per_hour: float
    prob_lose_all_per_hour: float
    variance_poisson: float
    """Variance if zone reclaims are Poisson events at rate p per hour instead."""


def zone_loss_stats(workers: int, zones: int, p_per_hour: float) -> ZoneLossStats:
    """K workers spread evenly over z zones; each zone is reclaimed whole with prob p/hour.

    Workers lost in an hour L = (K/z) * B with B ~ Binomial(z, p) (zones independent):
    ``E[L] = K p`` (independent of z), ``Var[L] = K^2 p (1 - p) / z``, and all K are
    lost together with probability ``p**z``. If reclaims are Poisson at rate p per
    zone instead, ``Var[L] = K^2 p / z``.
    """
    if not isinstance(workers, int) or workers <= 0:
        raise ValueError(f"workers must be a positive integer, got {workers!r}")
    if not isinstance(zones, int) or zones <= 0:
        raise ValueError(f"zones must be a positive integer, got {zones!r}")
    if workers % zones:
        raise ValueError(
            f"workers ({workers}) must split evenly over zones ({zones}); pick a multiple"
        )
    p = _check("p_per_hour", p_per_hour)
    if p > 1:
        raise ValueError(f"p_per_hour is a probability per hour and must be <= 1, got {p}")
    per_zone = workers / zones
    var = per_zone**2 * zones * p * (1.0 - p)
    return ZoneLossStats(
        workers=workers,
        zones=zones,
        zone_reclaim_prob_per_hour=p,
        mean_lost_per_hour=workers * p,
        variance_lost_per_hour=var,
        std_lost_per_hour=math.sqrt(var),
        prob_lose_all_per_hour=p**zones,
        variance_poisson=per_zone**2 * zones * p,
    )
