"""The smallest adapters between the pipeline config and fleet/: market, provider, prices.

Everything here only translates configuration into the fleet's own objects; the
logic (market generation, injection, relaunch, pricing) lives in fleet/.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from fleet.market.traces import Trace
from fleet.providers.base import FleetProvider

DEFAULT_ON_DEMAND = 3.06  # $/h, p3.2xlarge (V100) on-demand, the figure used with the public traces
DEFAULT_SPOT = 0.918  # $/h, p3.2xlarge spot


def market_traces(market: dict[str, Any]) -> list[Trace]:
    """The market a pipeline runs on: the synthetic default for a seed, or a trace folder."""
    if market.get("kind") == "traces":
        from fleet.market.traces import load_trace_dir

        return load_trace_dir(market["trace_dir"])
    from fleet.market.synthetic import default_market_config, generate_market

    return generate_market(default_market_config(n_zones=int(market.get("n_zones", 3))),
                           float(market.get("hours", 72.0)), int(market.get("seed", 0)))


def build_provider(kind: str, options: dict[str, Any]) -> FleetProvider:
    """A fleet provider from JSON-able options (the node runner builds it in its process).

    ``options``: ``market`` (MarketConfig as a dict), ``workdir``, ``on_demand_fallback``,
    ``extra_env``.
    """
    if kind == "local":
        from fleet.emulation.injector import CapacitySchedule, TimeScale
        from fleet.providers.local.pricing import FlatPrices
        from fleet.providers.local.provider import LocalFleetConfig, LocalFleetProvider
        from fleet.providers.local.relaunch import RelaunchPolicy

        m = options.get("market") or {}
        cfg = LocalFleetConfig(
            schedule=CapacitySchedule(market_traces(m)),
            time_scale=TimeScale(wall_seconds_per_trace_hour=float(m.get("wall_seconds_per_market_hour", 10.0))),
            cloud=m.get("cloud", "signal"),
            grace_seconds=m.get("grace_seconds"),
            policy=RelaunchPolicy(on_demand_fallback=bool(options.get("on_demand_fallback", True)),
                                  block_seconds=float(options.get("block_seconds", 5.0))),
            prices=FlatPrices(spot=float(m.get("spot_price_per_hour", DEFAULT_SPOT)),
                              on_demand=float(m.get("on_demand_price_per_hour", DEFAULT_ON_DEMAND))),
            workdir=Path(options["workdir"]) if options.get("workdir") else None,
            extra_env=dict(options.get("extra_env") or {}),
        )
        return LocalFleetProvider(cfg)
    if kind == "skypilot":
        from fleet.providers import skypilot as sky_provider

        cls = getattr(sky_provider, "SkyPilotProvider", None)
        if cls is None:  # pragma: no cover - depends on fleet/providers/skypilot
            raise ValueError("fleet.providers.skypilot has no SkyPilotProvider; use provider: local")
        return cls(**(options.get("skypilot") or {}))
    raise ValueError(f"unknown provider {kind!r}; use 'local' or 'skypilot'")


def preempt_node_now(provider: FleetProvider, stage: str, node_id: str) -> bool:
    """Fault injection on the local fleet: notice + kill one node of a running stage now.

    Returns False when the provider cannot inject (not the local fleet, stage not running).
    """
    runs = getattr(provider, "_runs", None)
    run = runs.get(stage) if isinstance(runs, dict) else None
    injector = getattr(run, "injector", None)
    if injector is None:
        return False
    injector.preempt_now(node_id)
    return True


def on_demand_price(market: dict[str, Any]) -> float:
    """On-demand $/h for the node type of a local-fleet pipeline."""
    return float(market.get("on_demand_price_per_hour", DEFAULT_ON_DEMAND))


def plan_for_stage(stage: dict[str, Any], stats: list[Any], forecasts: list[Any],
                   market: dict[str, Any], deadline_hours: float, on_demand_fallback: bool) -> dict[str, Any]:
    """The fleet plan of one stage as a JSON-able dict.

    Calls ``fleet.planning.plan_stage`` when the planner is available; otherwise (the
    smallest stand-in) orders the candidate zones by forecast preemptions, keeps spot
    when the forecast rate is below the playbook break-even rate, and records why.
    Keys: zones, use_spot, on_demand_fallback, expected_cost_usd, expected_hours, reason, planner.
    """
    try:
        from fleet import planning

        plan_stage = getattr(planning, "plan_stage", None)
    except ImportError:  # pragma: no cover
        plan_stage = None
    if plan_stage is not None:
        try:
            plan = _call_planner(plan_stage, stage, stats, forecasts, market, deadline_hours, on_demand_fallback)
            if plan is not None:
                return plan
        except (TypeError, ValueError) as exc:  # planner signature moved: fall back, say so
            fallback_note = f"fleet.planning.plan_stage failed ({exc}); used the zone-ranking stand-in"
        else:
            fallback_note = "fleet.planning.plan_stage returned nothing; used the zone-ranking stand-in"
    else:
        fallback_note = "fleet.planning.plan_stage not available; used the zone-ranking stand-in"
    from checkpointing import costmodel

    candidates = list(stage.get("zones") or [f.zone for f in forecasts])
    by_zone = {f.zone: f for f in forecasts}
    ranked = sorted(candidates, key=lambda z: (getattr(by_zone.get(z), "rate_per_held_hour", math.inf)
                                               if z in by_zone else math.inf, candidates.index(z)))
    sp = float(market.get("spot_price_per_hour", DEFAULT_SPOT))
    od = float(market.get("on_demand_price_per_hour", DEFAULT_ON_DEMAND))
    be = costmodel.break_even_rate_per_hour(on_demand_price=od, spot_price=sp, ckpt_hours=1 / 60,
                                            restart_hours=0.1, interval="optimal", step_per_hour=None)
    best = by_zone.get(ranked[0]) if ranked else None
    rate = float(getattr(best, "rate_per_held_hour", 0.0) or 0.0)
    use_spot = bool(stage.get("spot", True)) and rate < be
    work = float(stage.get("work_hours", 1.0))
    if use_spot and rate > 0 and rate * 0.1 < 1:
        t = costmodel.optimal_interval_hours(1 / 60, rate, 0.1)
        c_eff = costmodel.effective_cost_per_useful_hour(sp, 1 / 60, t, rate, 0.1)
    else:
        c_eff = sp if use_spot else od
    return {
        "zones": ranked, "use_spot": use_spot, "on_demand_fallback": on_demand_fallback,
        "expected_cost_usd": c_eff * work * int(stage.get("nodes", 1)),
        "expected_hours": work * (c_eff / sp if use_spot else 1.0),
        "forecast_rate_per_hour": rate, "break_even_rate_per_hour": be,
        "reason": (f"zones ordered by forecast preemptions; best {ranked[0] if ranked else '-'} at "
                   f"{rate:.3f}/h vs break-even {be:.3f}/h -> {'spot' if use_spot else 'on-demand'}; "
                   f"on-demand fallback {'on' if on_demand_fallback else 'off'} if the "
                   f"{deadline_hours:g} h deadline needs it. ({fallback_note})"),
        "planner": "assets.fleet_adapter stand-in",
    }


def _call_planner(plan_stage, stage, stats, forecasts, market, deadline_hours, on_demand_fallback):
    import dataclasses
    import inspect

    params = inspect.signature(plan_stage).parameters
    kwargs: dict[str, Any] = {}
    candidates = {
        "stats": stats, "zone_stats": stats, "forecasts": forecasts, "forecast": forecasts,
        "work_hours": float(stage.get("work_hours", 1.0)), "deadline_hours": deadline_hours,
        "nodes": int(stage.get("nodes", 1)), "num_nodes": int(stage.get("nodes", 1)),
        "zones": list(stage.get("zones") or []), "candidate_zones": list(stage.get("zones") or []),
        "allow_spot": bool(stage.get("spot", True)), "use_spot": bool(stage.get("spot", True)),
        "on_demand_price": float(market.get("on_demand_price_per_hour", DEFAULT_ON_DEMAND)),
        "spot_price": float(market.get("spot_price_per_hour", DEFAULT_SPOT)),
        "accelerator": stage.get("accelerator", "V100"),
        "on_demand_fallback": on_demand_fallback,
    }
    for name, p in params.items():
        if name in candidates:
            kwargs[name] = candidates[name]
        elif p.default is inspect.Parameter.empty and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
            return None  # a required argument we cannot supply
    plan = plan_stage(**kwargs)
    d = plan.to_dict() if hasattr(plan, "to_dict") else (
        dataclasses.asdict(plan) if dataclasses.is_dataclass(plan) else dict(plan))
    d = json_safe(d)
    d.setdefault("zones", list(stage.get("zones") or []))
    d.setdefault("use_spot", bool(stage.get("spot", True)))
    d.setdefault("on_demand_fallback", on_demand_fallback)
    d["planner"] = "fleet.planning.plan_stage"
    return d


def json_safe(obj: Any) -> Any:
    """Round-trip through JSON (tuples -> lists, inf/nan -> None, objects -> str)."""
    import json

    def clean(o: Any) -> Any:
        if isinstance(o, float) and not math.isfinite(o):
            return None
        if isinstance(o, dict):
            return {str(k): clean(v) for k, v in o.items()}
        if isinstance(o, (list, tuple)):
            return [clean(v) for v in o]
        return o

    return json.loads(json.dumps(clean(obj), default=str))
