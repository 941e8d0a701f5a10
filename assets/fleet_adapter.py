"""The smallest adapters between the pipeline config and fleet/: market, provider, prices.

Everything here only translates configuration into the fleet's own objects; the
logic (market generation, injection, relaunch, pricing) lives in fleet/.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from fleet.market.traces import Trace
from fleet.providers.base import FleetProvider

DEFAULT_ON_DEMAND = 3.06  # $/h, p3.2xlarge (V100) on-demand, the figure used with the public traces
DEFAULT_SPOT = 0.918  # $/h, p3.2xlarge spot


def market_traces(market: dict[str, Any], part: str = "history") -> list[Trace]:
    """The market a pipeline runs on: the synthetic default for a seed, or a trace folder.

    ``part="history"``: the first ``hours`` hours (what statistics and forecasts see);
    ``part="all"``: history followed by ``future_hours`` more (the local fleet replays
    the future, starting where the history ends, so the forecast is about what the
    fleet then lives through).
    """
    import dataclasses

    hours = float(market.get("hours", 72.0))
    if market.get("kind") == "traces":
        from fleet.market.traces import load_trace_dir

        traces = load_trace_dir(market["trace_dir"])
    else:
        from fleet.market.synthetic import default_market_config, generate_market

        total = hours + float(market.get("future_hours", 48.0))
        traces = generate_market(default_market_config(n_zones=int(market.get("n_zones", 3))),
                                 total, int(market.get("seed", 0)))
    if part == "all":
        return traces
    out = []
    for t in traces:
        n = max(1, min(t.n_ticks, int(round(hours * 3600.0 / t.gap_seconds))))
        out.append(dataclasses.replace(t, available=t.available[:n]))
    return out


def history_seconds(market: dict[str, Any]) -> float:
    """Market seconds of history before the fleet's replay starts."""
    return float(market.get("hours", 72.0)) * 3600.0


def build_provider(kind: str, options: dict[str, Any]) -> FleetProvider:
    """A fleet provider from JSON-able options (the node runner builds it in its process).

    ``options``: ``market`` (MarketConfig as a dict), ``workdir``, ``on_demand_fallback``,
    ``extra_env``, ``market_clock_start_unix`` (when the run's market clock started).
    """
    if kind == "local":

        from fleet.emulation.injector import CapacitySchedule, TimeScale
        from fleet.providers.local.provider import LocalFleetConfig, LocalFleetProvider
        from fleet.providers.local.relaunch import RelaunchPolicy

        m = options.get("market") or {}
        wall_per_hour = float(m.get("wall_seconds_per_market_hour", 10.0))
        # replay the market's future from where the history ends, advanced by the wall time
        # since the Dagster run started (a retry or a later stage sees a later market)
        elapsed = max(0.0, time.time() - float(options.get("market_clock_start_unix") or time.time()))
        offset = history_seconds(m) + elapsed * 3600.0 / wall_per_hour
        cfg = LocalFleetConfig(
            schedule=CapacitySchedule(market_traces(m, "all"), offset_seconds=offset),
            time_scale=TimeScale(wall_seconds_per_trace_hour=wall_per_hour),
            cloud=m.get("cloud", "signal"),
            grace_seconds=m.get("grace_seconds"),
            policy=RelaunchPolicy(on_demand_fallback=bool(options.get("on_demand_fallback", True)),
                                  block_seconds=float(options.get("block_seconds", 5.0))),
            prices=price_book(m),
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
    """Fault injection: notice + kill one node of a running stage now.

    Uses the provider's public ``preempt_now`` (the local fleet has one). Returns False
    when the provider cannot inject (no such method, stage or node not running).
    """
    preempt = getattr(provider, "preempt_now", None)
    if preempt is None:
        return False
    return bool(preempt(stage, node_id))


def on_demand_price(market: dict[str, Any]) -> float:
    """On-demand $/h for the node type of a local-fleet pipeline."""
    return float(market.get("on_demand_price_per_hour", DEFAULT_ON_DEMAND))


def price_book(market: dict[str, Any]):
    """The pipeline's prices: the fleet's PriceBook with the config's spot/on-demand $/h."""
    from fleet.market.prices import PriceBook

    sp = float(market.get("spot_price_per_hour", DEFAULT_SPOT))
    od = float(market.get("on_demand_price_per_hour", DEFAULT_ON_DEMAND))
    return PriceBook.default(overrides={"spot": {"p3.2xlarge": {"*": sp}},
                                        "on_demand": {"p3.2xlarge": {"*": od}}})


def market_seconds_per_wall_second(market: dict[str, Any]) -> float:
    """How many market seconds one wall second of the local fleet stands for."""
    return 3600.0 / float(market.get("wall_seconds_per_market_hour", 10.0))


def zone_stats_from_frame(df, local_time_factor: float = 1.0) -> list[Any]:
    """``ZoneStats`` of the market's zones from the preemption_stats table.

    One object per trace row; its ``restart_latency_s`` is the restart latency measured
    in the node sessions of that zone (``fleet.stats.preemption.merge_session_latency``),
    which the planner then uses as R. Session rows of the local fleet (cloud ``local``)
    ran in the market's emulated zones, on a compressed clock: they are matched by
    (region, zone, instance type) and their latency is multiplied by
    ``local_time_factor`` (market seconds per wall second, see
    ``market_seconds_per_wall_second``). Session rows of zones the market does not know
    are left out.

    The table mixes trace and session rows, so pandas turns missing values into NaN:
    NaN and None become None again, and None rates / MTTPs (non-finite when written)
    become ``inf``.
    """
    import dataclasses

    from fleet.stats.preemption import ZoneStats, merge_session_latency

    def missing(v: Any) -> bool:
        return v is None or (isinstance(v, float) and math.isnan(v))

    names = {f.name for f in dataclasses.fields(ZoneStats)}
    rows = []
    for row in df.to_dict("records"):
        kw: dict[str, Any] = {}
        for k, v in row.items():
            if k not in names:
                continue
            if isinstance(v, (list, tuple)):
                v = tuple(math.inf if missing(x) else x for x in v)
            elif missing(v):
                v = math.inf if k in ("mttp_hours", "rate_per_hour") else None
            kw[k] = v
        for k in ("count", "preemptions", "regain_samples"):
            if k in kw and kw[k] is not None:
                kw[k] = int(kw[k])
        rows.append(ZoneStats(**kw))
    traces = [st for st in rows if st.source == "trace"]
    cloud_of = {(st.region, st.zone, st.instance_type): st.cloud for st in traces}
    measured = []
    for st in rows:
        if st.source != "sessions" or st.restart_latency_s is None:
            continue
        if st.cloud == "local":
            cloud = cloud_of.get((st.region, st.zone, st.instance_type))
            if cloud is None:
                continue
            st = dataclasses.replace(st, cloud=cloud,
                                     restart_latency_s=st.restart_latency_s * local_time_factor)
        measured.append(st)
    return [st for st in merge_session_latency(traces + measured) if st.source == "trace"]


def plan_for_stage(stage: dict[str, Any], stats: list[Any], forecasts: list[Any],
                   market: dict[str, Any], deadline_hours: float | None,
                   on_demand_fallback: bool) -> dict[str, Any]:
    """The fleet plan of one stage (``fleet.planning.planner.plan_stage``) as a JSON-able dict.

    Adds the keys the train asset reads: ``zones`` (failover order), ``use_spot``,
    ``on_demand_fallback``, ``reason`` (one line); the planner's per-zone choices
    (with the restart hours R each used) move to ``zone_choices``.
    """
    from fleet.planning.planner import StageRequest, plan_stage

    req = StageRequest(
        work_hours=float(stage.get("work_hours", 1.0)), deadline_hours=deadline_hours,
        name=stage["name"], accelerator=str(stage.get("accelerator", "V100")),
        accelerator_count=int(stage.get("count", 1)), num_nodes=int(stage.get("nodes", 1)),
        candidate_zones=tuple(stage.get("zones") or ()), allow_on_demand=on_demand_fallback)
    plan = plan_stage(req, stats, forecasts, price_book(market))
    d = json_safe(plan.to_dict())
    d["zone_choices"] = d["zones"]  # per zone: rate, c_eff, restart_hours (R) the plan used
    order = list(plan.failover_order) or list(stage.get("zones") or [])
    d["zones"] = order
    d["use_spot"] = bool(stage.get("spot", True)) and plan.spot_nodes > 0
    d["on_demand_fallback"] = on_demand_fallback
    d["explain"] = plan.explain()
    d["reason"] = (f"{plan.spot_nodes} spot + {plan.on_demand_nodes} on-demand, failover "
                   f"{' -> '.join(order) or '-'}; expected ${plan.expected_cost:.2f} vs on-demand "
                   f"${plan.on_demand_cost:.2f}" + (f"; switch to on-demand when slack < "
                                                    f"{plan.fallback_slack_hours:.2f} h"
                                                    if plan.fallback_slack_hours is not None else ""))
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
