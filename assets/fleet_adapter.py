"""The smallest adapters between the pipeline config / asset values and fleet/: the
market's traces and prices, the zone statistics the planner scores, the stage plan.

Everything here only translates; the logic lives in fleet/ (the provider registry and
the wire format in fleet/providers/, the market in fleet/market/config.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from fleet.market.config import MarketConfig
from fleet.market.traces import Trace

if TYPE_CHECKING:
    from fleet.planning.planner import FleetPlan
    from fleet.stats.forecast import SessionEvidence
    from fleet.stats.preemption import ZoneStats
    from pipelines.config import StageConfig

def market_traces(market: MarketConfig | dict[str, Any], part: str = "history",
                  cache_dir: Any = None) -> list[Trace]:
    """The pipeline's market traces (``MarketConfig.traces``): ``history`` or ``all``
    (``cache_dir``: where the generated synthetic market is kept for the node runners)."""
    return _market(market).traces(part, cache_dir=cache_dir)  # type: ignore[arg-type]


def on_demand_price(market: MarketConfig | dict[str, Any]) -> float:
    """On-demand $/h for the node type of a local-fleet pipeline."""
    return _market(market).on_demand_price_per_hour


def _market(market: MarketConfig | dict[str, Any]) -> MarketConfig:
    return market if isinstance(market, MarketConfig) else MarketConfig.model_validate(market)


def _check_records(stats: Sequence[Any]) -> None:
    from fleet.stats.preemption import ZoneStats

    bad = next((s for s in stats if not isinstance(s, ZoneStats)), None)
    if bad is not None:
        raise TypeError(f"preemption_stats holds a {type(bad).__name__}, not ZoneStats records (a value "
                        "stored before preemption_stats became list[ZoneStats]?); re-materialize "
                        "preemption_stats")


def _sessions_on_market_zones(stats: Sequence[ZoneStats]) -> list[ZoneStats]:
    """The session records of ``stats`` under the key of the market zone they ran in:
    local-fleet records (cloud ``local``) take the cloud of the trace record with their
    (region, zone, instance type); local records of zones the market does not know are
    left out. Their times are market seconds already (the local provider converts its
    compressed clock before its sessions leave it): nothing is rescaled here."""
    import dataclasses

    cloud_of = {(st.region, st.zone, st.instance_type): st.cloud for st in stats if st.source == "trace"}
    out = []
    for st in stats:
        if st.source != "sessions":
            continue
        if st.cloud == "local":
            cloud = cloud_of.get((st.region, st.zone, st.instance_type))
            if cloud is None:
                continue
            st = dataclasses.replace(st, cloud=cloud)
        out.append(st)
    return out


def session_evidence(stats: Sequence[ZoneStats]) -> dict[tuple[str, str, str, str], SessionEvidence]:
    """The forecast's session evidence (``fleet.stats.forecast.SessionEvidence``) per zone
    key from the ``preemption_stats`` records: the spot preemptions and spot held hours
    (market hours) of each zone's recorded sessions, local-fleet records matched to their
    market zone as for R (``planning_zone_stats``). Zones without spot held time are left
    out (nothing to update with)."""
    from fleet.stats.forecast import SessionEvidence

    _check_records(stats)
    out = {}
    for st in _sessions_on_market_zones(stats):
        held = st.spot_held_hours
        if held is None or held <= 0:  # no spot exposure (or a record stored before the field)
            continue
        out[st.key] = SessionEvidence(preemptions=int(st.spot_preemptions or 0), held_hours=float(held))
    return out


def planning_zone_stats(stats: Sequence[ZoneStats]) -> list[ZoneStats]:
    """The ``ZoneStats`` the planner scores: one per market zone (the ``preemption_stats``
    asset's trace records), with the restart latency measured in that zone's node sessions
    (its session records, ``fleet.stats.preemption.merge_session_latency``) as R: the
    mean over all the zone's sessions and per stage (``ZoneStats.restart_latency_for``,
    which the planner asks with the stage's name).

    The zone's preemption rate (``rate_per_hour``, and ``mttp_hours`` = its inverse) is the
    trace's rate updated by the spot preemptions and held hours of the zone's sessions with
    the same Gamma-Poisson step as the forecast (``fleet.stats.forecast.posterior_up_rate``,
    prior worth ``SESSION_PRIOR_HELD_HOURS``): the planner blends this history rate with the
    forecast's, so the sessions reach both terms. Until 2026-11-28 the history term was the
    trace's alone and the sessions reached the plan at the forecast's weight only (half).
    ``rate_ci`` / ``mttp_ci`` stay the trace's intervals.

    Session records of the local fleet (cloud ``local``) ran in the market's emulated
    zones: they are matched by (region, zone, instance type); their latency is already in
    market seconds (the local provider reports its sessions in market time). Session
    records of zones the market does not know are left out.
    """
    import dataclasses

    from fleet.stats.forecast import SESSION_PRIOR_HELD_HOURS, posterior_up_rate
    from fleet.stats.preemption import merge_session_latency

    _check_records(stats)
    traces = [st for st in stats if st.source == "trace"]
    measured = [st for st in _sessions_on_market_zones(stats) if st.restart_latency_s is not None]
    merged = [st for st in merge_session_latency(traces + measured) if st.source == "trace"]
    evidence = session_evidence(stats)
    out = []
    for st in merged:
        ev = evidence.get(st.key)
        if ev is not None and math.isfinite(st.rate_per_hour):
            rate = posterior_up_rate(st.rate_per_hour, ev, SESSION_PRIOR_HELD_HOURS)
            st = dataclasses.replace(st, rate_per_hour=rate, mttp_hours=1.0 / rate if rate > 0 else math.inf)
        out.append(st)
    return out


def measured_checkpoint_hours(checkpoints) -> float | None:
    """Checkpoint time C measured in the statistics DB, in market hours for the planner:
    ``fleet.contract.measured_checkpoint_seconds`` over the ``checkpoints`` table (the DB
    holds market seconds, whatever the provider). None when nothing was measured."""
    from fleet.contract import measured_checkpoint_seconds

    if checkpoints is None or len(checkpoints) == 0 or "stall_seconds" not in checkpoints:
        return None
    kinds = checkpoints["kind"] if "kind" in checkpoints else [None] * len(checkpoints)
    c = measured_checkpoint_seconds(zip(kinds, checkpoints["stall_seconds"], strict=True))
    return None if c is None else c / 3600.0


def pipeline_price_book(provider: str, market: MarketConfig | dict[str, Any],
                        accelerators: Sequence[str], cloud: str = "aws"):
    """The prices of a pipeline's stages on ONE cloud (what ``pipeline_stage_prices`` builds
    for each of a stage's clouds).

    The local fleet bills its market's prices (``MarketConfig.price_book``). A SkyPilot
    pipeline runs on the cloud's instance types, so it is priced from the SkyPilot catalog
    validation reads (``pipelines.validation.find_catalog_dir``: ``$SPOTFLEET_CATALOG_DIR``,
    ``~/.sky/catalogs/v8``, ``../shared/data/skypilot-catalog-v8``; read offline), its
    stages' accelerators only, with the market's p3.2xlarge prices kept as overrides.
    Until 2026-11-28 a SkyPilot pipeline was planned with the built-in V100 table alone:
    every zone of an A10G stage was rejected for "no price" and the plan (0 spot + N
    on-demand) turned the ``spot: true`` stage into an all on-demand launch (user audit).
    Without a catalog folder it is the market's book, as before.
    """
    m = _market(market)
    if provider != "skypilot":
        return m.price_book()
    from pipelines.validation import find_catalog_dir

    catalog = find_catalog_dir()
    if catalog is None:
        return m.price_book()
    return _catalog_book(catalog, cloud, accelerators, m)


def _catalog_book(catalog, cloud: str, accelerators: Sequence[str], m: MarketConfig):
    from fleet.market.prices import PriceBook

    return PriceBook.from_skypilot(catalog, cloud=cloud, accelerators=sorted(set(accelerators)), overrides={
        "spot": {"p3.2xlarge": {"*": m.spot_price_per_hour}},
        "on_demand": {"p3.2xlarge": {"*": m.on_demand_price_per_hour}}})


def pipeline_stage_prices(provider: str, market: MarketConfig | dict[str, Any],
                          stages: Sequence[StageConfig]) -> dict[str, tuple[Any, list[str]]]:
    """Per stage: the price book its plan scores zones with, and notes for its plan.

    A SkyPilot stage is priced from the catalog of EACH of its ``resources.clouds`` (one
    book per cloud and accelerator, merged for a stage that lists several clouds), so a
    pipeline whose stages run on different clouds prices every stage on its own cloud.
    Until 2026-11-28 the whole pipeline was priced from the first stage's cloud: a stage on
    another cloud had no spot price in any zone and its plan turned it all on-demand
    without a word.

    A cloud the catalog folder has no ``<cloud>/vms.csv`` for prices nothing: a stage
    with another cloud that has one is planned on that one, its plan noting the cloud left
    out; a stage none of whose clouds has a catalog file raises ValueError naming the
    stage, the clouds and the file to add (a silent all on-demand plan before). The local
    fleet, and a SkyPilot pipeline without a catalog folder, use the market's book as
    ``pipeline_price_book`` does.
    """
    m = _market(market)
    catalog = None
    if provider == "skypilot":
        from pipelines.validation import find_catalog_dir

        catalog = find_catalog_dir()
    if catalog is None:
        book = pipeline_price_book(provider, m, [s.resources.accelerator for s in stages])
        return {s.name: (book, []) for s in stages}
    from pathlib import Path

    from fleet.market.prices import PriceBook

    cache: dict[tuple[str, str], Any] = {}
    out: dict[str, tuple[Any, list[str]]] = {}
    for s in stages:
        acc = s.resources.accelerator
        clouds = list(dict.fromkeys(s.resources.clouds))
        missing = [c for c in clouds if not (Path(catalog) / c / "vms.csv").is_file()]
        have = [c for c in clouds if c not in missing]
        if not have:
            raise ValueError(
                f"stage {s.name!r} runs on {', '.join(clouds)} but the SkyPilot catalog {catalog} "
                f"has no {' or '.join(f'{c}/vms.csv' for c in missing)}: its zones have no spot "
                "price, so its plan could only be all on-demand; add the cloud's catalog files "
                "(a copy of SkyPilot's catalogs/v8/<cloud>/) to that folder or point "
                "SPOTFLEET_CATALOG_DIR at a catalog that has them")
        books = []
        for c in have:
            if (c, acc) not in cache:
                cache[(c, acc)] = _catalog_book(catalog, c, [acc], m)
            books.append(cache[(c, acc)])
        notes = [f"prices: no SkyPilot catalog for cloud {c} ({Path(catalog) / c / 'vms.csv'} is "
                 f"missing): stage {s.name}'s {c} zones have no price and are not planned on spot"
                 for c in missing]
        out[s.name] = (books[0] if len(books) == 1 else PriceBook.merged(books), notes)
    return out


def plan_for_stage(stage: StageConfig, stats: list[ZoneStats], forecasts: list[Any],
                   market: MarketConfig | dict[str, Any], deadline_hours: float | None,
                   on_demand_fallback: bool, ckpt_hours: float | None = None,
                   prices: Any = None) -> FleetPlan:
    """The fleet plan of one stage (``fleet.planning.planner.plan_stage``), typed.

    The train asset applies it to the stage's StageSpec (``FleetPlan.apply``): failover
    order, spot or not, and the priors (MTTP per zone, R, checkpoint time, interval).
    ``ckpt_hours``: the checkpoint time measured in the statistics DB, None when nothing
    was (the plan then scores with the default and exports no checkpoint-time prior).
    ``prices``: the pipeline's ``pipeline_price_book`` (default: the market's book).
    """
    from fleet.planning.planner import StageRequest, plan_stage

    r = stage.resources
    req = StageRequest(
        work_hours=float(stage.work_hours), deadline_hours=deadline_hours, name=stage.name,
        accelerator=r.accelerator, accelerator_count=r.count, num_nodes=r.nodes,
        candidate_zones=tuple(r.zones), allow_on_demand=on_demand_fallback,
        **({"ckpt_hours": ckpt_hours} if ckpt_hours else {}))
    plan = plan_stage(req, stats, forecasts, prices if prices is not None else _market(market).price_book())
    plan.checkpoint_measured = bool(ckpt_hours)
    return plan
