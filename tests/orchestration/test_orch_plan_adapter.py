"""The fleet_plan asset's adapter: list[ZoneStats] (the preemption_stats value) -> fleet.planning."""

from __future__ import annotations

import dataclasses
import math

import pytest

from assets import fleet_adapter
from fleet.planning.planner import StageRequest
from fleet.providers.base import NodeSession
from fleet.stats.forecast import forecast_zones
from fleet.stats.preemption import session_stats, zone_stats
from pipelines.config import EXAMPLE_PIPELINES, StageConfig, load_pipelines


def _sessions() -> list[NodeSession]:
    t = 1_700_000_000.0
    return [NodeSession(node_id=f"n{i}", stage="pretrain", attempt=1, provider="local", cloud="aws",
                        region="us-east-1", zone="us-east-1f", instance_type="p3.2xlarge", spot=True,
                        price_per_hour=0.918, launched_at=t + 100 * i, ready_at=t + 100 * i + 5,
                        ended_at=t + 100 * i + 60, end_reason="preempted" if i % 2 else "completed")
            for i in range(4)]


PLANNING_ASSETS = ("spot_market", "preemption_stats", "preemption_forecast", "fleet_plan")


def _materialize_planning(cfg, stats_db, tmp_path, instance):  # noqa: ANN001, ANN202
    """Materialize the pipeline's planning assets (:data:`PLANNING_ASSETS`) on ``stats_db``;
    returns (result, their asset keys in that order)."""
    from dagster import AssetKey, materialize

    from assets.pipeline_assets import build_pipeline_assets
    from pipelines.resources import FleetResource

    pa = build_pipeline_assets(cfg)
    keys = [AssetKey([cfg.name, n]) for n in PLANNING_ASSETS]
    result = materialize(pa.assets, selection=keys, instance=instance,
                         resources={"stats_db": stats_db, "fleet": FleetResource(var_dir=str(tmp_path / "var"))})
    assert result.success
    return result, keys


def test_recorded_sessions_update_only_their_zone_s_rate_and_latency():
    """Session records (with their missing fields) change the statistics the planner sees in
    their own zone only: R, and the rate by the forecast's Gamma-Poisson step (the history
    term of the planner's blend; until 2026-11-28 it stayed the trace's, so the sessions
    reached the plan at the forecast's half weight)."""
    from fleet.stats.forecast import SESSION_PRIOR_HELD_HOURS

    [cfg] = load_pipelines(EXAMPLE_PIPELINES)
    market = cfg.market.model_dump()
    traces = fleet_adapter.market_traces(market)
    only_traces = zone_stats(traces)
    mixed = zone_stats(traces) + session_stats(_sessions())
    a = fleet_adapter.planning_zone_stats(only_traces)
    b = fleet_adapter.planning_zone_stats(mixed)
    assert [s.zone for s in a] == [s.zone for s in b] == sorted(t.zone for t in traces)
    held_h, n = 4 * 55.0 / 3600.0, 2  # 4 spot sessions of 55 s held, 2 ended by the market
    for x, y in zip(a, b, strict=True):
        assert x.restart_latency_s is None
        if y.zone == "us-east-1f":
            post = (x.rate_per_hour * SESSION_PRIOR_HELD_HOURS + n) / (SESSION_PRIOR_HELD_HOURS + held_h)
            assert y.rate_per_hour == pytest.approx(post, rel=1e-12) and y.rate_per_hour > x.rate_per_hour
            assert y.mttp_hours == pytest.approx(1.0 / post, rel=1e-12)
        else:
            assert x.rate_per_hour == y.rate_per_hour and x.mttp_hours == y.mttp_hours
        # the sessions' measured restart latency (ready - launch = 5 s) reaches their zone only
        assert y.restart_latency_s == (5.0 if y.zone == "us-east-1f" else None)
        assert not any(isinstance(v, float) and math.isnan(v) for v in (y.regain_mean_hours, y.mttp_hours))
    fc = forecast_zones(traces, None, 12.0, n_samples=200, seed=0)
    stage = StageConfig(name="pretrain", script="x.py", work_hours=4.0)
    a = [dataclasses.replace(x, restart_latency_s=y.restart_latency_s, rate_per_hour=y.rate_per_hour,
                             mttp_hours=y.mttp_hours) for x, y in zip(a, b, strict=True)]
    pa = fleet_adapter.plan_for_stage(stage, a, fc, market, 16.0, True)
    pb = fleet_adapter.plan_for_stage(stage, b, fc, market, 16.0, True)
    assert pa.spot_nodes and pb.spot_nodes
    assert pa.failover_order == pb.failover_order and pa.expected_cost == pb.expected_cost


def test_plan_restart_hours_come_from_the_local_fleet_sessions():
    """R of a zone = latency measured in its local-fleet sessions, on the market clock."""
    [cfg] = load_pipelines(EXAMPLE_PIPELINES)
    market = cfg.market.model_dump()
    traces = fleet_adapter.market_traces(market)
    zone = traces[0]
    local = [NodeSession(node_id=f"l{i}", stage="pretrain", attempt=1, provider="local", cloud="local",
                         region=zone.region, zone=zone.zone, instance_type="p3.2xlarge", spot=True,
                         price_per_hour=0.918, launched_at=1e9 + 100 * i, ready_at=1e9 + 100 * i + 4 + 2 * i,
                         ended_at=1e9 + 100 * i + 60, end_reason="preempted") for i in range(3)]
    elsewhere = [dataclasses.replace(local[0], node_id="x", zone="nowhere-1a", region="nowhere-1")]
    records = zone_stats(traces) + session_stats(local + elsewhere)
    stats = fleet_adapter.planning_zone_stats(records)  # sessions are recorded in market seconds
    assert sorted(s.zone for s in stats) == sorted(t.zone for t in traces)  # unknown zone left out
    measured_s = 6.0  # mean of 4, 6, 8 market seconds (no rescaling: the DB holds market seconds)
    by_zone = {s.zone: s for s in stats}
    assert by_zone[zone.zone].restart_latency_s == measured_s
    assert by_zone[zone.zone].cloud == zone.cloud  # matched to the trace row, not a separate row
    fc = forecast_zones(traces, None, 12.0, n_samples=200, seed=0)
    stage = StageConfig(name="pretrain", script="x.py", work_hours=4.0,
                        resources={"zones": [t.zone for t in traces]})
    plan = fleet_adapter.plan_for_stage(stage, stats, fc, market, 16.0, True)
    r = {c.zone: c.restart_hours for c in plan.zones}
    assert r[zone.zone] == pytest.approx(measured_s / 3600.0)
    default_r = StageRequest(work_hours=1.0).restart_hours
    assert all(v == pytest.approx(default_r) for z, v in r.items() if z != zone.zone)


def test_an_on_demand_plan_does_not_overrule_a_pipeline_without_on_demand():
    """A plan with no spot node (no zone where spot beats on-demand) turns the stage to
    on-demand, unless the pipeline ruled on-demand out (``on_demand_fallback: false`` ->
    ``StageSpec.on_demand_allowed`` False): then the stage stays on spot (session 14)."""
    from fleet.providers.base import StageSpec

    [cfg] = load_pipelines(EXAMPLE_PIPELINES)
    traces = fleet_adapter.market_traces(cfg.market)
    stats = fleet_adapter.planning_zone_stats(zone_stats(traces))
    fc = forecast_zones(traces, None, 12.0, n_samples=200, seed=0)
    plan = fleet_adapter.plan_for_stage(cfg.stages[0], stats, fc, cfg.market, 16.0, True)
    od_plan = dataclasses.replace(plan, spot_nodes=0, on_demand_nodes=plan.num_nodes)
    base = StageSpec(name="pretrain", command=["python", "x.py"], checkpoint_uri="/tmp/x")
    assert od_plan.apply(base).use_spot is False
    assert od_plan.apply(dataclasses.replace(base, on_demand_allowed=False)).use_spot is True
    assert plan.apply(dataclasses.replace(base, on_demand_allowed=False)).use_spot is True


def test_plan_apply_puts_the_priors_in_seconds_into_the_stage_spec():
    """FleetPlan.apply(StageSpec): failover zones, spot, and the priors the policy and the
    training process start from (MTTP per zone = 1 / the rate the plan used, R measured)."""
    from fleet.providers.base import StageSpec

    [cfg] = load_pipelines(EXAMPLE_PIPELINES)
    traces = fleet_adapter.market_traces(cfg.market)
    stats = fleet_adapter.planning_zone_stats(zone_stats(traces))
    fc = forecast_zones(traces, None, 12.0, n_samples=200, seed=0)
    plan = fleet_adapter.plan_for_stage(cfg.stages[0], stats, fc, cfg.market, 16.0, True)
    spec = plan.apply(StageSpec(name="pretrain", command=["python", "x.py"], checkpoint_uri="/tmp/x",
                                policy="failover"))
    assert spec.zones == tuple(plan.failover_order) and spec.use_spot and spec.policy == "failover"
    pr = spec.priors
    for z in plan.zones:
        assert pr.mttp_seconds[z.zone] == pytest.approx(3600.0 / z.rate_per_hour)
    assert pr.restart_seconds == pytest.approx(plan.restart_hours * 3600.0)
    # the insurance interval the training process will compute from the same numbers
    first = plan.zones[0]
    tau = (2 * plan.checkpoint_hours * 3600.0 * (3600.0 / first.rate_per_hour + plan.restart_hours * 3600.0)) ** 0.5
    assert pr.interval_seconds == pytest.approx(tau)
    assert pr.work_seconds == pytest.approx(cfg.stages[0].work_hours * 3600.0)
    # nothing measured in the DB: no checkpoint-time prior for the training process
    assert pr.checkpoint_seconds is None and not plan.checkpoint_measured
    measured = fleet_adapter.plan_for_stage(cfg.stages[0], stats, fc, cfg.market, 16.0, True, 0.01)
    assert measured.checkpoint_measured and measured.priors().checkpoint_seconds == pytest.approx(36.0)


def test_a_stored_table_instead_of_records_names_the_fix():
    """A preemption_stats value stored before it became list[ZoneStats] (a DataFrame's rows
    iterate as column names) fails with the asset to re-materialize, not deep in the planner."""
    with pytest.raises(TypeError, match="re-materialize preemption_stats"):
        fleet_adapter.planning_zone_stats(["zone", "rate_per_hour"])


def test_assets_pass_typed_values_and_the_table_is_derived_from_them(tmp_path):
    """preemption_stats materializes list[ZoneStats] (trace and recorded-session records),
    fleet_plan dict[str, FleetPlan]; the analyst's markdown table comes from the records."""
    from dagster import DagsterInstance

    from fleet.planning.planner import FleetPlan
    from fleet.stats.preemption import ZoneStats
    from infra.db.recorder import record_attempt
    from pipelines.resources import StatsDB

    [cfg] = load_pipelines(EXAMPLE_PIPELINES)
    stats_db = StatsDB(var_dir=str(tmp_path / "var"))
    sessions = _sessions()
    record_attempt(stats_db.engine(), run_id="r1", pipeline=cfg.name, stage="pretrain", attempt=1,
                   provider="local", status="completed", sessions=sessions, events=[],
                   started_at=sessions[0].launched_at, ended_at=sessions[-1].ended_at)
    with DagsterInstance.ephemeral() as instance:
        result, keys = _materialize_planning(cfg, stats_db, tmp_path, instance)
        stats = result.asset_value(keys[1])
        plans = result.asset_value(keys[3])
        meta = instance.get_latest_materialization_event(keys[1]).asset_materialization.metadata
    assert isinstance(stats, list) and all(isinstance(s, ZoneStats) for s in stats)
    assert {s.source for s in stats} == {"trace", "sessions"}
    assert isinstance(plans, dict) and all(isinstance(p, FleetPlan) for p in plans.values())
    assert set(plans) == {s.name for s in cfg.stages}
    table = meta["table"].value
    assert "| source" in table and "us-east-1f" in table and "sessions" in table
    traced = [s.preemptions for s in stats if s.source == "trace"]
    assert meta["min_preemptions_per_zone"].value == min(traced)


def test_measured_r_and_checkpoint_time_reach_the_deadline_rule_the_policy_and_the_training_process(
        tmp_path, monkeypatch):
    """Issue 8, item 4: R and C measured in the statistics DB (market seconds) are the R and
    C of the planner's deadline rule, of the fleet policy's job spec and of the training
    process (through the provider's contract estimates and the SPOTFLEET_* variables)."""
    import pandas as pd

    from checkpointing.session import TrainingSession
    from fleet.contract import training_env
    from fleet.providers.attempt import AttemptRecord
    from fleet.providers.base import StageSpec
    from fleet.providers.decisions import PolicyDriver, Progress

    [cfg] = load_pipelines(EXAMPLE_PIPELINES)
    traces = fleet_adapter.market_traces(cfg.market)
    r_s = 240.0  # launch -> ready in every zone, recorded by the local fleet in market seconds
    local = [NodeSession(node_id=f"{t.zone}-{i}", stage="pretrain", attempt=1, provider="local",
                         cloud="local", region=t.region, zone=t.zone, instance_type="p3.2xlarge",
                         spot=True, price_per_hour=0.918, launched_at=1e9 + 1000 * i,
                         ready_at=1e9 + 1000 * i + r_s + (30.0 if i else -30.0),
                         ended_at=1e9 + 1000 * i + 900, end_reason="preempted")
             for t in traces for i in range(2)]
    stats = fleet_adapter.planning_zone_stats(zone_stats(traces) + session_stats(local))
    # the checkpoints table: an emergency save's stall is not what an insurance save costs
    ckpts = pd.DataFrame({"kind": ["periodic", "insurance", "emergency"],
                          "stall_seconds": [20.0, 40.0, 500.0]})
    c_h = fleet_adapter.measured_checkpoint_hours(ckpts)
    assert c_h == pytest.approx(30.0 / 3600.0)
    fc = forecast_zones(traces, None, 12.0, n_samples=200, seed=0)
    plan = fleet_adapter.plan_for_stage(cfg.stages[0], stats, fc, cfg.market, 16.0, True, c_h)
    assert plan.spot_nodes
    # the deadline rule: fallback slack = R + C + safety with the measured R and C
    assert plan.restart_hours == pytest.approx(r_s / 3600.0)
    safety = StageRequest(work_hours=1.0).safety_hours
    assert plan.fallback_slack_hours == pytest.approx(r_s / 3600.0 + 30.0 / 3600.0 + safety)
    # the fleet policy's job spec
    spec = plan.apply(StageSpec(name="pretrain", command=["python", "x.py"], checkpoint_uri=str(tmp_path),
                                policy="spotfleet"))
    job = PolicyDriver(spec.policy, spec.zones, priors=spec.priors).job_spec(Progress())
    assert job.restart_hours == pytest.approx(r_s / 3600.0)
    assert job.checkpoint_hours == pytest.approx(30.0 / 3600.0)
    # the training process: what both providers export before the attempt observed anything
    attempt = AttemptRecord(spec, 1, None)
    env = training_env(attempt.mttp_estimate(spec.zones[0]), attempt.restart_estimate(),
                       spec.priors.interval_seconds, attempt.checkpoint_estimate([]))
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    session = TrainingSession.from_env(store=str(tmp_path / "ckpt"))
    assert session.restart_seconds == pytest.approx(r_s)
    assert session.mttp_seconds == pytest.approx(3600.0 / plan.zones[0].rate_per_hour, rel=1e-5)  # 6 digits
    assert float(env["SPOTFLEET_CHECKPOINT_SECONDS"]) == pytest.approx(30.0)


def test_each_stage_is_planned_with_its_own_measured_checkpoint_time(tmp_path):
    """docs/checkpointing.md: the delta prior C 'is a mean over the same stage's earlier
    saves'. The fleet_plan asset averaged the saves of EVERY stage of the pipeline, so a
    stage that saves a big model in 30 s and one that saves a small one in 1 s were both
    planned (and their training processes primed, weighted as 10 saves) with ~15.5 s."""
    from dagster import DagsterInstance
    from sqlalchemy.orm import Session

    from infra.db.models import CheckpointRecord
    from pipelines.resources import StatsDB

    [cfg] = load_pipelines(EXAMPLE_PIPELINES)
    first, second = (s.name for s in cfg.stages[:2])
    stats_db = StatsDB(var_dir=str(tmp_path / "var"))
    eng = stats_db.engine()
    with Session(eng) as db:
        for i, (stage, stall) in enumerate([(first, 30.0), (first, 30.0), (second, 1.0), (second, 1.0)]):
            db.add(CheckpointRecord(pipeline=cfg.name, stage=stage, attempt=1, run_id="r1", node_id="n",
                                    step=100 * (i + 1), kind="periodic", stall_seconds=stall,
                                    persist_seconds=1.0, committed_at=1.0e9 + i))
        db.commit()
    with DagsterInstance.ephemeral() as instance:
        result, keys = _materialize_planning(cfg, stats_db, tmp_path, instance)
        plans = result.asset_value(keys[3])
    assert plans[first].checkpoint_measured and plans[second].checkpoint_measured
    assert plans[first].priors().checkpoint_seconds == pytest.approx(30.0)
    assert plans[second].priors().checkpoint_seconds == pytest.approx(1.0)


def _record(stats_db, cfg, stage: str, sessions: list[NodeSession]) -> None:  # noqa: ANN001
    from infra.db.recorder import record_attempt

    record_attempt(stats_db.engine(), run_id=f"r-{stage}", pipeline=cfg.name, stage=stage, attempt=1,
                   provider="local", status="completed", sessions=sessions, events=[],
                   started_at=sessions[0].launched_at, ended_at=sessions[-1].ended_at)


def _local(i: int, stage: str, trace, ready_after: float, held: float, reason: str) -> NodeSession:  # noqa: ANN001
    """A local-fleet session as the provider records it: cloud ``local``, market seconds."""
    t = 1.0e9 + 10_000 * i
    return NodeSession(node_id=f"{stage}-{i}", stage=stage, attempt=1, provider="local", cloud="local",
                       region=trace.region, zone=trace.zone, instance_type="p3.2xlarge", spot=True,
                       price_per_hour=0.918, launched_at=t, ready_at=t + ready_after,
                       ended_at=t + ready_after + held, end_reason=reason)


def test_recorded_sessions_reach_the_forecast_and_the_plan(tmp_path):
    """The preemption_forecast asset took preemption_stats as an input and never read it:
    the zones' recorded sessions never reached the forecast the planner consumes. Now the
    spot preemptions and held (market) hours of a zone's sessions update its forecast; the
    other zones' forecasts do not change at all; the metadata says what was updated."""
    from dagster import DagsterInstance

    from pipelines.resources import StatsDB

    [cfg] = load_pipelines(EXAMPLE_PIPELINES)
    first = cfg.stages[0].name
    traces = fleet_adapter.market_traces(cfg.market)
    hot = traces[0]
    with DagsterInstance.ephemeral() as instance:
        result, keys = _materialize_planning(cfg, StatsDB(var_dir=str(tmp_path / "empty")), tmp_path, instance)
        before, plan_before = result.asset_value(keys[2]), result.asset_value(keys[3])
    stats_db = StatsDB(var_dir=str(tmp_path / "var"))
    # 12 preemptions in 12 x 1800 market s = 6 held hours (the trace: well under 1 / h)
    _record(stats_db, cfg, first, [_local(i, first, hot, 300.0, 1800.0, "preempted") for i in range(12)])
    with DagsterInstance.ephemeral() as instance:
        result, keys = _materialize_planning(cfg, stats_db, tmp_path, instance)
        after, plan_after = result.asset_value(keys[2]), result.asset_value(keys[3])
        meta = instance.get_latest_materialization_event(keys[2]).asset_materialization.metadata
    b = {f.zone: f for f in before}
    a = {f.zone: f for f in after}
    h = a[hot.zone]
    assert h.preemptions_mean > b[hot.zone].preemptions_mean
    assert h.rate_per_held_hour > b[hot.zone].rate_per_held_hour
    # held hours in market hours as recorded (no wall_seconds_per_market_hour rescaling)
    assert h.session_preemptions == 12 and h.session_held_hours == pytest.approx(6.0)
    assert h.up_rate_posterior > h.up_rate_prior
    assert h.preemptions_mean_without_sessions == b[hot.zone].preemptions_mean
    assert all(a[z] == b[z] for z in b if z != hot.zone)  # bit for bit
    assert meta["zones_updated_by_sessions"].value == 1
    assert hot.zone in meta["session_update"].value and "up_rate_posterior" in meta["session_update"].value
    # the planner consumes the forecast: the zone's scored rate rises with it
    rate_before = {z.zone: z.rate_per_hour for z in plan_before[first].zones}
    rate_after = {z.zone: z.rate_per_hour for z in plan_after[first].zones}
    assert rate_after[hot.zone] > rate_before[hot.zone]


def test_each_stage_is_planned_with_the_restart_time_of_its_own_sessions(tmp_path):
    """R per zone was the mean over ALL the zone's sessions, every stage together; stages
    restore different models, so R (launch -> ready) differs per stage. Now: the stage's
    own sessions in the zone, else the zone's all-stage mean, else the default, and the
    plan's metadata says which R each zone used and where it came from."""
    from dagster import DagsterInstance

    from pipelines.resources import StatsDB

    [cfg] = load_pipelines(EXAMPLE_PIPELINES)
    first, second = (s.name for s in cfg.stages[:2])
    traces = fleet_adapter.market_traces(cfg.market)
    a, b, c = traces[:3]
    stats_db = StatsDB(var_dir=str(tmp_path / "var"))
    _record(stats_db, cfg, first, [_local(i, first, a, 900.0, 3600.0, "completed") for i in range(2)]
            + [_local(5, first, b, 120.0, 3600.0, "completed")])
    _record(stats_db, cfg, second, [_local(10 + i, second, a, 30.0, 3600.0, "completed") for i in range(2)])
    with DagsterInstance.ephemeral() as instance:
        result, keys = _materialize_planning(cfg, stats_db, tmp_path, instance)
        plans = result.asset_value(keys[3])
        meta = instance.get_latest_materialization_event(keys[3]).asset_materialization.metadata
    r_s = {st: {z.zone: z.restart_hours * 3600.0 for z in plans[st].zones} for st in (first, second)}
    assert r_s[second][a.zone] == pytest.approx(30.0)  # before: 465 s, the mean of both stages
    assert r_s[first][a.zone] == pytest.approx(900.0)
    r = {st: {z.zone: (z.restart_hours * 3600.0, z.restart_source) for z in plans[st].zones}
         for st in (first, second)}
    assert r[first][a.zone] == (pytest.approx(900.0), "stage")
    assert r[second][a.zone] == (pytest.approx(30.0), "stage")  # before: 465 s for both
    assert r[second][b.zone] == (pytest.approx(120.0), "zone")  # only the first stage ran there
    default_s = StageRequest(work_hours=1.0).restart_hours * 3600.0
    assert r[first][c.zone] == r[second][c.zone] == (pytest.approx(default_s), "default")
    table = meta[f"{second}_zone_choices"].value
    assert "restart_source" in table and "stage" in table and "zone" in table and "default" in table
