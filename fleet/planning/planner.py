"""Plan one stage: which zones, which instance type, how many spot / on-demand nodes, and why.

Inputs: a ``StageRequest`` (work W in hours per node, optional deadline D, checkpoint
cost C, restart cost R), per-zone ``ZoneStats`` (history), optional ``ZoneForecast``
(the next hours) and a ``PriceBook``.

For every candidate zone the planner computes, with the playbook cost model in
``checkpointing.costmodel``:

* lambda: preemptions per held hour. With a forecast it blends the forecast rate with
  the history (``forecast_weight``), otherwise the history alone. In the pipeline both
  terms carry the fleet's own recorded sessions: the forecast's up-run law and the
  history's rate are each updated by them (Gamma-Poisson, ``assets.fleet_adapter.
  planning_zone_stats``);
* a: the availability (forecast mean when given);
* R: the restart latency measured in that zone's node sessions of the request's stage
  (``ZoneStats.restart_latency_for(request.name)``: the stage's own sessions, else all the
  zone's sessions, every stage), else the request's ``restart_hours``
  (``ZoneChoice.restart_source`` says which: ``stage``, ``zone`` or ``default``);
* ``T_opt`` (optimal checkpoint interval, R included) and
  ``c_eff = c_sp (1 + C/T) / (1 - lambda (T/2 + R))``, the $ per useful node-hour;
* whether spot beats on-demand there: ``lambda < break-even rate``.

Zones where spot loses are rejected (with the reason). The rest are ranked by c_eff
(ties broken by availability). One node gets an ordered failover list; K nodes are
spread over the ``z`` best zones whose c_eff is within ``diversify_tolerance`` of the
best (the playbook's zone exercise: with whole-zone reclaims of probability p per hour
the expected loss K p does not depend on z, but its variance K^2 p (1-p) / z does).

Deadline: expected elapsed time = W x (c_eff / c_sp) / A, with A the probability that
at least one chosen zone has capacity (pairwise correlation from ``zone_correlation``
corrects the independence product). The on-demand fallback threshold is the slack
(time left minus work left) below which the job must switch to on-demand to finish by
D: ``R + C + safety``. If the expected spot time does not fit in D, the plan mixes:
spot until the latest switch hour, then on-demand.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING

from checkpointing.costmodel import (
    break_even_rate_per_hour,
    effective_cost_per_useful_hour,
    optimal_interval_hours,
)
from checkpointing.intervals import thesis_optimum_seconds
from fleet.contract import DEFAULT_CHECKPOINT_SECONDS, DEFAULT_RESTART_SECONDS, RunPriors
from fleet.market.prices import PriceBook
from fleet.stats.forecast import ZoneForecast
from fleet.stats.preemption import ZoneStats, merge_session_latency

if TYPE_CHECKING:
    from fleet.providers.base import StageSpec


@dataclass(frozen=True)
class StageRequest:
    """What the stage needs. Hours throughout; ``work_hours`` is per node, failure-free."""

    work_hours: float
    deadline_hours: float | None = None
    name: str = "stage"
    accelerator: str = "V100"
    accelerator_count: int = 1
    num_nodes: int = 1
    ckpt_hours: float = DEFAULT_CHECKPOINT_SECONDS / 3600.0
    restart_hours: float = DEFAULT_RESTART_SECONDS / 3600.0
    candidate_zones: tuple[str, ...] = ()
    max_zones: int | None = None
    on_demand_core: int = 0
    allow_on_demand: bool = True
    diversify_tolerance: float = 0.25
    forecast_weight: float = 0.5
    safety_hours: float = 0.25
    elastic: bool = True  # survivors keep training when a zone is reclaimed (playbook 18.4)
    proxy_stats: bool = True  # no stats for the wanted type: use the zone's other stats

    def __post_init__(self) -> None:
        if not self.work_hours > 0:
            raise ValueError(f"work_hours must be > 0 hours, got {self.work_hours}")
        if self.deadline_hours is not None and self.deadline_hours < self.work_hours:
            raise ValueError(f"deadline_hours ({self.deadline_hours}) is shorter than work_hours "
                             f"({self.work_hours}): even on-demand cannot finish; extend the deadline")
        if self.num_nodes < 1:
            raise ValueError(f"num_nodes must be >= 1, got {self.num_nodes}")
        if not 0 <= self.on_demand_core <= self.num_nodes:
            raise ValueError(f"on_demand_core must be in 0..num_nodes ({self.num_nodes})")
        if self.ckpt_hours <= 0 or self.restart_hours < 0:
            raise ValueError("ckpt_hours must be > 0 and restart_hours >= 0 (hours)")


@dataclass(frozen=True)
class ZoneChoice:
    """One candidate zone as the planner scored it ($/h, hours, per hour)."""

    zone: str
    region: str
    instance_type: str
    spot_price: float
    on_demand_price: float
    rate_per_hour: float
    availability: float
    interval_hours: float
    c_eff: float
    break_even_rate: float
    restart_hours: float = 0.0
    nodes: int = 0
    rank: int = 0
    #: where ``restart_hours`` came from (``ZoneStats.restart_latency_for``): ``stage`` (this
    #: stage's sessions in the zone), ``zone`` (the zone's sessions, all stages) or
    #: ``default`` (``StageRequest.restart_hours``, nothing measured)
    restart_source: str = "default"


@dataclass
class FleetPlan:
    """The plan for one stage; ``to_dict`` / ``to_json`` for the Dagster asset and CLI."""

    stage: str
    accelerator: str
    instance_type: str
    num_nodes: int
    spot_nodes: int
    on_demand_nodes: int
    zones: list[ZoneChoice]
    failover_order: list[str]
    on_demand_region: str | None
    on_demand_price: float
    checkpoint_interval_hours: float
    expected_cost: float
    on_demand_cost: float
    savings_fraction: float
    expected_completion_hours: float
    p_any_zone_up: float
    meets_deadline: bool | None
    fallback_slack_hours: float | None
    latest_switch_hour: float | None
    mean_nodes_lost_per_hour: float
    variance_nodes_lost_per_hour: float
    variance_by_zone_count: dict[int, float]
    rejected: list[dict] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    work_hours: float | None = None
    checkpoint_hours: float = DEFAULT_CHECKPOINT_SECONDS / 3600.0
    restart_hours: float = DEFAULT_RESTART_SECONDS / 3600.0  # R the plan used (measured if known)
    #: checkpoint_hours was measured in the statistics DB (not the default): only then do the
    #: priors carry it to the training process as its delta prior
    checkpoint_measured: bool = False
    #: where the prices came from (``PriceBook.source``): trace files, a catalog, fallback
    price_source: str = ""

    # -- the run contract ------------------------------------------------------------------
    def insurance_interval_seconds(self, zone: str | None = None) -> float | None:
        """The insurance interval the training process should arrive at in ``zone`` (s):
        Algorithm 1's ``tau = sqrt(2 C (MTTP + R))`` (``checkpointing.intervals``) with
        this plan's C, R and the zone's MTTP = 1 / rate. (``ZoneChoice.interval_hours`` is
        the c_eff-optimal T the planner scores zones with; it is smaller by about
        ``sqrt((MTTP - R) / (MTTP + R))``.)"""
        choice = next((z for z in self.zones if z.zone == zone), self.zones[0] if self.zones else None)
        if choice is None or not (math.isfinite(choice.rate_per_hour) and choice.rate_per_hour > 1e-5):
            return None
        return thesis_optimum_seconds(self.checkpoint_hours * 3600.0, 3600.0 / choice.rate_per_hour,
                                      self.restart_hours * 3600.0)

    def priors(self, notice_seconds: float = 0.0) -> RunPriors:
        """The plan's statistics in SECONDS (fleet/contract.py): per-zone MTTP = 1 / the
        preemption rate the plan scored the zone with, R (measured in the statistics DB
        when known), checkpoint time (measured when known), the insurance interval of the
        first zone (``insurance_interval_seconds``), the work and the prices."""
        mttp = {z.zone: 3600.0 / z.rate_per_hour for z in self.zones
                if math.isfinite(z.rate_per_hour) and z.rate_per_hour > 1e-5}
        return RunPriors(
            mttp_seconds=mttp, restart_seconds=self.restart_hours * 3600.0,
            checkpoint_seconds=self.checkpoint_hours * 3600.0 if self.checkpoint_measured else None,
            interval_seconds=self.insurance_interval_seconds(),
            work_seconds=self.work_hours * 3600.0 if self.work_hours else None,
            notice_seconds=notice_seconds,
            spot_price_per_hour={z.zone: z.spot_price for z in self.zones},
            availability={z.zone: z.availability for z in self.zones},
            on_demand_price_per_hour=(self.on_demand_price if math.isfinite(self.on_demand_price)
                                      else None))

    def placement(self) -> dict[str, int]:
        """Spot nodes per zone of a multi-node stage (the K-over-z spread), zones in use only."""
        return {z.zone: z.nodes for z in self.zones if z.nodes}

    def apply(self, spec: StageSpec) -> StageSpec:
        """``spec`` as this plan runs it: zones in failover order, spot only when the plan
        has spot nodes -- or when on-demand is ruled out (``spec.on_demand_allowed`` False: a
        plan that finds no zone where spot beats on-demand does not turn a spot-only stage
        into an on-demand one) -- and the plan's priors (the spec's notice window is kept). A
        multi-node stage also gets the plan's spread (``SPOTFLEET_PLACEMENT``,
        ``zone:nodes,...``) and on-demand core (``SPOTFLEET_ON_DEMAND_NODES``), which the
        elastic controller places by (docs/elastic.md)."""
        env = spec.env
        if spec.num_nodes > 1 and self.spot_nodes > 0:
            env = {**spec.env, "SPOTFLEET_PLACEMENT": ",".join(
                       f"{z}:{n}" for z, n in self.placement().items()),
                   "SPOTFLEET_ON_DEMAND_NODES": str(self.on_demand_nodes)}
        return replace(spec, zones=tuple(self.failover_order) or spec.zones,
                       use_spot=spec.use_spot and (self.spot_nodes > 0 or not spec.on_demand_allowed),
                       priors=self.priors(spec.priors.notice_seconds), env=env)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["variance_by_zone_count"] = {str(k): v for k, v in self.variance_by_zone_count.items()}

        def clean(x):
            if isinstance(x, float) and not math.isfinite(x):
                return None
            if isinstance(x, dict):
                return {k: clean(v) for k, v in x.items()}
            if isinstance(x, list):
                return [clean(v) for v in x]
            return x

        return clean(d)

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def summary(self) -> str:
        """One line: the mix, the failover order, expected vs on-demand cost, the fallback."""
        order = " -> ".join(self.failover_order) or "-"
        out = (f"{self.spot_nodes} spot + {self.on_demand_nodes} on-demand, failover {order}; "
               f"expected ${self.expected_cost:.2f} vs on-demand ${self.on_demand_cost:.2f}")
        if self.fallback_slack_hours is not None:
            out += f"; switch to on-demand when slack < {self.fallback_slack_hours:.2f} h"
        return out

    def explain(self) -> str:
        """Human-readable summary: the zones, the numbers and the reasons."""
        lines = [f"Plan for {self.stage}: {self.spot_nodes} spot + {self.on_demand_nodes} on-demand "
                 f"x {self.instance_type} ({self.accelerator})"]
        for z in self.zones:
            if z.nodes:
                lines.append(f"  {z.zone:<12} {z.nodes} node(s)  spot {z.spot_price:.3f} $/h  "
                             f"rate {z.rate_per_hour:.3f}/h  avail {z.availability:.2f}  "
                             f"c_eff {z.c_eff:.3f} $/useful h")
        lines.append(f"  failover order: {', '.join(self.failover_order) or '-'}")
        if math.isfinite(self.expected_cost) and math.isfinite(self.on_demand_cost):
            lines.append(f"  expected cost {self.expected_cost:.2f} $ vs on-demand "
                         f"{self.on_demand_cost:.2f} $ (saves {100 * self.savings_fraction:.0f}%); "
                         f"expected completion {self.expected_completion_hours:.1f} h")
        else:  # no price (printed `inf $` until 2026-11-27): the reasons below say which
            lines.append(f"  expected cost unknown (no price); expected completion "
                         f"{self.expected_completion_hours:.1f} h")
        if self.fallback_slack_hours is not None:
            lines.append(f"  switch to on-demand when slack < {self.fallback_slack_hours:.2f} h "
                         f"(latest switch at hour {self.latest_switch_hour:.1f} with no progress)")
        if self.price_source:
            lines.append(f"  prices: {self.price_source}")
        lines += [f"  - {r}" for r in self.reasons]
        return "\n".join(lines)


# --------------------------------------------------------------------------- helpers


def _p_all_down(q: Sequence[float], zones: Sequence[str], correlation) -> float:
    """P(every zone down): independence product, corrected by the most correlated pair."""
    prod = math.prod(q)
    if correlation is None or len(q) < 2:
        return prod
    best = prod
    for i in range(len(q)):
        for j in range(i + 1, len(q)):
            try:
                rho = float(correlation.loc[zones[i], zones[j]])
            except (KeyError, AttributeError):
                continue
            if not math.isfinite(rho):
                continue
            pij = q[i] * q[j] + rho * math.sqrt(q[i] * (1 - q[i]) * q[j] * (1 - q[j]))
            pij = min(max(pij, 0.0), min(q[i], q[j]))
            rest = math.prod(q[k] for k in range(len(q)) if k not in (i, j))
            best = max(best, pij * rest)
    return best


def _score_zone(st: ZoneStats, fc: ZoneForecast | None, req: StageRequest, prices: PriceBook,
                itype: str) -> ZoneChoice | str:
    try:
        sp = prices.spot_price(itype, st.zone)
        od = prices.on_demand_price(itype, st.region)
    except KeyError as exc:
        return f"no price: {exc.args[0]}"
    lam = st.rate_per_hour if math.isfinite(st.rate_per_hour) else math.inf
    avail = st.availability
    if fc is not None:
        w = req.forecast_weight
        lam = (1 - w) * lam + w * fc.rate_per_held_hour if math.isfinite(lam) else lam
        avail = (1 - w) * avail + w * fc.availability_mean
    if avail <= 0 or not math.isfinite(lam):
        return "never available in the data"
    lam = max(lam, 1e-6)
    # restart latency measured in this zone (this stage's sessions, else every stage's)
    # beats the request's assumption
    r_s, r_source = st.restart_latency_for(req.name)
    r = r_s / 3600.0 if r_s is not None else req.restart_hours
    try:
        t = optimal_interval_hours(req.ckpt_hours, lam, r)
    except ValueError as exc:
        return str(exc)
    ceff = effective_cost_per_useful_hour(sp, req.ckpt_hours, t, lam, r)
    be = break_even_rate_per_hour(on_demand_price=od, spot_price=sp, ckpt_hours=req.ckpt_hours,
                                  restart_hours=r, interval="optimal", step_per_hour=None)
    return ZoneChoice(zone=st.zone, region=st.region, instance_type=itype, spot_price=sp,
                      on_demand_price=od, rate_per_hour=lam, availability=avail,
                      interval_hours=t, c_eff=ceff, break_even_rate=be, restart_hours=r,
                      restart_source=r_source)


def _nodes_lost(alloc: Sequence[tuple[int, float]]) -> tuple[float, float]:
    """Mean and variance of nodes lost per hour: zone i loses all n_i w.p. p_i = 1-e^-lambda."""
    mean = var = 0.0
    for n, lam in alloc:
        p = 1.0 - math.exp(-lam)
        mean += n * p
        var += n * n * p * (1 - p)
    return mean, var


# --------------------------------------------------------------------------- planner


def plan_stage(request: StageRequest, stats: Sequence[ZoneStats],
               forecasts: Sequence[ZoneForecast] | Mapping[str, ZoneForecast] | None,
               prices: PriceBook, correlation=None) -> FleetPlan:
    """Choose zones, instance type and the spot / on-demand mix for one stage."""
    req = request
    stats = merge_session_latency(stats)
    fmap: dict[str, ZoneForecast] = {}
    if isinstance(forecasts, Mapping):
        fmap = dict(forecasts)
    elif forecasts:
        fmap = {f.zone: f for f in forecasts}
    types = prices.instance_types_for(req.accelerator, req.accelerator_count)
    reasons: list[str] = []
    rejected: list[dict] = []
    matching = [st for st in stats if not types or st.instance_type in types]
    proxy = bool(types) and not matching and req.proxy_stats and bool(stats)
    if not stats:
        reasons.append("no preemption statistics for any zone (the statistics asset or table is "
                       "empty): the plan can only run on-demand; rebuild preemption_stats from the "
                       "market's traces, or check that the market config names trace files")
    if proxy:
        seen = sorted({st.instance_type for st in stats})
        reasons.append(f"no statistics for {req.accelerator}:{req.accelerator_count} "
                       f"({', '.join(types)}): each zone's {', '.join(seen)} statistics stand "
                       "in for its availability and preemption rate")
    by_zone: dict[str, ZoneChoice] = {}
    for st in stats:
        if req.candidate_zones and st.zone not in req.candidate_zones:
            continue
        if not types and st.accelerator and st.accelerator.upper() != req.accelerator.upper():
            # no type known for the accelerator: never price these statistics' type (e.g.
            # the a3-highgpu-8g of H100 trace files) as if it carried the one asked for
            rejected.append({"zone": st.zone, "reason": f"no price: no instance type with "
                             f"{req.accelerator}:{req.accelerator_count} in the prices; the "
                             f"statistics are for {st.accelerator} ({st.instance_type})"})
            continue
        if types and st.instance_type not in types and not proxy:
            rejected.append({"zone": st.zone, "reason": f"statistics are for {st.instance_type}, "
                             f"not a {req.accelerator}:{req.accelerator_count} type {types}"})
            continue
        options = types if proxy else [st.instance_type]
        scored = [_score_zone(st, fmap.get(st.zone), req, prices, t) for t in options]
        good = [r for r in scored if not isinstance(r, str)]
        if not good:
            rejected.append({"zone": st.zone, "reason": str(scored[0])})
            continue
        r = min(good, key=lambda c: c.c_eff)
        if r.rate_per_hour >= r.break_even_rate:
            rejected.append({"zone": st.zone, "reason": f"spot loses here: {r.rate_per_hour:.3f} "
                             f"preemptions/h >= break-even {r.break_even_rate:.3f}/h "
                             f"(c_eff {r.c_eff:.3f} vs on-demand {r.on_demand_price:.3f} $/h)"})
            continue
        if st.zone not in by_zone or r.c_eff < by_zone[st.zone].c_eff:
            by_zone[st.zone] = r  # several instance types in one zone: the cheapest per useful h
    cands = list(by_zone.values())
    cands.sort(key=lambda c: (c.c_eff, -c.availability))
    itype = cands[0].instance_type if cands else (types[0] if types else req.accelerator)
    od_prices = {}
    for st in stats:
        try:
            od_prices[st.region] = prices.on_demand_price(itype, st.region)
        except KeyError:
            continue
    od_region = min(od_prices, key=od_prices.get) if od_prices else None
    od_price = od_prices.get(od_region, math.inf) if od_region else math.inf
    n_spot_wanted = req.num_nodes - req.on_demand_core
    on_demand_cost = req.work_hours * req.num_nodes * od_price

    # candidate zones no statistics record describes are not scored, so they are in no
    # failover order: say so (a SkyPilot stage listing catalog zones its market lacks ran in
    # the others only, without a word in the plan, until 2026-11-28)
    known = {st.zone for st in stats}
    unseen = [f"not planned {z}: no preemption statistics for this zone (neither the market's "
              "traces nor recorded sessions); it is left out of the failover order"
              for z in req.candidate_zones if z not in known]
    if not cands:
        if rejected and all(r["reason"].startswith("no price") for r in rejected):
            reasons.append(f"no zone has a spot price for {req.accelerator} (every zone rejected "
                           "for 'no price', below): give prices (--catalog or the config's "
                           "prices) for this accelerator")
        else:
            reasons.append("no zone where spot beats on-demand: run on-demand")
        if not math.isfinite(od_price) and stats:
            reasons.append(f"no on-demand price for {itype} in any region of the traces: the "
                           "cost of this plan is unknown")
        reasons += [f"rejected {r['zone']}: {r['reason']}" for r in rejected] + unseen
        return FleetPlan(
            stage=req.name, accelerator=req.accelerator, instance_type=itype,
            num_nodes=req.num_nodes, spot_nodes=0, on_demand_nodes=req.num_nodes, zones=[],
            failover_order=[], on_demand_region=od_region, on_demand_price=od_price,
            checkpoint_interval_hours=math.inf, expected_cost=on_demand_cost,
            on_demand_cost=on_demand_cost, savings_fraction=0.0,
            expected_completion_hours=req.work_hours, p_any_zone_up=0.0,
            meets_deadline=True if req.deadline_hours else None, fallback_slack_hours=None,
            latest_switch_hour=None, mean_nodes_lost_per_hour=0.0,
            variance_nodes_lost_per_hour=0.0, variance_by_zone_count={},
            rejected=rejected, reasons=reasons, work_hours=req.work_hours,
            checkpoint_hours=req.ckpt_hours, restart_hours=req.restart_hours,
            price_source=prices.describe())

    best = cands[0]
    ok = [c for c in cands if c.c_eff <= best.c_eff * (1 + req.diversify_tolerance)]
    zmax = min(len(ok), max(1, n_spot_wanted))
    if req.max_zones:
        zmax = min(zmax, req.max_zones)
    # variance of nodes lost per hour for z = 1..len(cands) (best zones first, even split)
    var_by_z: dict[int, float] = {}
    mean_by_z: dict[int, float] = {}
    for z in range(1, min(len(cands), max(1, n_spot_wanted)) + 1):
        share = [n_spot_wanted // z + (1 if i < n_spot_wanted % z else 0) for i in range(z)]
        mean_by_z[z], var_by_z[z] = _nodes_lost([(share[i], cands[i].rate_per_hour)
                                                 for i in range(z)])
    chosen = ok[:zmax]
    alloc = [n_spot_wanted // zmax + (1 if i < n_spot_wanted % zmax else 0) for i in range(zmax)]
    zones = [ZoneChoice(**{**asdict(c), "nodes": alloc[i] if i < len(alloc) else 0, "rank": i + 1})
             for i, c in enumerate(chosen)]
    zones += [ZoneChoice(**{**asdict(c), "rank": len(chosen) + i + 1})
              for i, c in enumerate(cands[len(chosen):])]
    mean_lost, var_lost = _nodes_lost([(z.nodes, z.rate_per_hour) for z in zones if z.nodes])

    # progress: the slowest chosen zone paces a synchronous stage; failover zones help
    failover = [z.zone for z in zones]
    in_use = [z for z in zones if z.nodes] or zones[:1]
    pool = zones if req.num_nodes == 1 else in_use
    p_all_down = _p_all_down([1 - z.availability for z in pool], [z.zone for z in pool],
                             correlation)
    if req.num_nodes > 1 and req.elastic:  # progress ~ expected fraction of nodes held
        p_up = sum(z.nodes * z.availability for z in in_use) / max(1, n_spot_wanted)
        reasons.append(f"{len(in_use)} zone(s) in use; an elastic stage of {req.num_nodes} nodes "
                       f"progresses with the nodes it holds (expected fraction {p_up:.2f})")
    elif req.num_nodes > 1:  # rigid stage: every used zone must be up
        p_up = math.prod(z.availability for z in in_use)
        reasons.append(f"{len(in_use)} zone(s) in use; a rigid stage of {req.num_nodes} nodes "
                       f"progresses only when all have capacity (P = {p_up:.2f})")
    else:
        p_up = 1.0 - p_all_down
    worst = max(in_use, key=lambda z: z.c_eff)
    inflation = worst.c_eff / worst.spot_price  # wall clock per useful hour while held
    t_spot = req.work_hours * inflation / max(p_up, 1e-6)
    spot_cost = sum(z.nodes * z.c_eff for z in in_use) * req.work_hours
    core_cost = req.on_demand_core * od_price * t_spot
    expected_cost = spot_cost + core_cost
    t_expected = t_spot
    # R of the zones in use as measured in the statistics DB (else the request's prior):
    # the same R reaches the deadline rule, the fleet policy and the training process
    r_plan = sum(z.restart_hours for z in in_use) / len(in_use)
    meets = None
    slack_threshold = latest_switch = None
    spot_nodes, od_nodes = n_spot_wanted, req.on_demand_core
    if req.deadline_hours is not None:
        slack_threshold = r_plan + req.ckpt_hours + req.safety_hours
        latest_switch = req.deadline_hours - req.work_hours - slack_threshold
        if t_spot <= req.deadline_hours - slack_threshold:
            meets = True
            reasons.append(f"expected spot completion {t_spot:.1f} h fits the {req.deadline_hours:.1f} h "
                           f"deadline; the fallback to on-demand covers bad luck")
        elif req.allow_on_demand and latest_switch > 0:
            # spot until the latest switch hour, then on-demand for the rest
            done = min(req.work_hours, latest_switch * max(p_up, 1e-6) / inflation)
            frac = done / req.work_hours
            expected_cost = frac * spot_cost + (1 - frac) * req.work_hours * req.num_nodes * od_price \
                + core_cost * frac
            t_expected = latest_switch + (req.work_hours - done) + r_plan
            meets = True
            reasons.append(f"expected spot time {t_spot:.1f} h exceeds the deadline: plan spot until "
                           f"hour {latest_switch:.1f} ({100 * frac:.0f}% of the work), then on-demand")
        elif req.allow_on_demand:
            spot_nodes, od_nodes = 0, req.num_nodes
            expected_cost, t_expected, meets = on_demand_cost, req.work_hours, True
            reasons.append("deadline leaves no slack for spot: run on-demand from the start")
        else:
            meets = False
            reasons.append("spot alone is not expected to meet the deadline and on-demand is not allowed")
    if spot_nodes:
        reasons.append(f"{best.zone} is cheapest per useful hour: c_eff {best.c_eff:.3f} $/h at "
                       f"{best.rate_per_hour:.3f} preemptions/h (break-even "
                       f"{best.break_even_rate:.3f}/h), checkpoint every {60 * best.interval_hours:.0f} min")
        if len(in_use) > 1:
            reasons.append(f"spread over {len(in_use)} zones: variance of nodes lost per hour "
                           f"{var_by_z.get(1, float('nan')):.3f} with all in {best.zone} -> "
                           f"{var_lost:.3f} (mean {mean_by_z.get(1, float('nan')):.3f} -> "
                           f"{mean_lost:.3f}; with equal zones the mean would not change)")
        if len(zones) > len(in_use):
            reasons.append(f"{len(zones) - len(in_use)} more zone(s) where spot wins are kept as "
                           "failover targets, cheapest c_eff first")
    for r in rejected:
        reasons.append(f"rejected {r['zone']}: {r['reason']}")
    reasons += unseen
    return FleetPlan(
        stage=req.name, accelerator=req.accelerator, instance_type=best.instance_type,
        num_nodes=req.num_nodes, spot_nodes=spot_nodes, on_demand_nodes=od_nodes,
        zones=zones if spot_nodes else [], failover_order=failover if spot_nodes else [],
        on_demand_region=od_region, on_demand_price=od_price,
        checkpoint_interval_hours=best.interval_hours, expected_cost=expected_cost,
        on_demand_cost=on_demand_cost,
        savings_fraction=1 - expected_cost / on_demand_cost if on_demand_cost > 0 else 0.0,
        expected_completion_hours=t_expected, p_any_zone_up=p_up, meets_deadline=meets,
        fallback_slack_hours=slack_threshold, latest_switch_hour=latest_switch,
        mean_nodes_lost_per_hour=mean_lost, variance_nodes_lost_per_hour=var_lost,
        variance_by_zone_count=var_by_z, rejected=rejected, reasons=reasons,
        work_hours=req.work_hours, checkpoint_hours=req.ckpt_hours, restart_hours=r_plan,
        price_source=prices.describe())
