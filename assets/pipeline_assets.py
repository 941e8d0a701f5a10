"""The asset graph of one pipeline (asset factory; every key is prefixed by the pipeline).

    spot_market ─▶ preemption_stats ─▶ preemption_forecast ─▶ fleet_plan ─▶ train_<stage> … ─▶ cost_report
                          ▲                                                      │
                          └──────────── node_sessions (external, written by runs) ◀┘

Assets stay thin: they call fleet/ and checkpointing/ and turn the results into
tables, metadata and plots. ``node_sessions`` is an external asset: the statistics
DB tables that training runs write; its materialization events are what the
declarative automation reacts to.
"""


import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd
from dagster import (
    AssetExecutionContext,
    AssetIn,
    AssetKey,
    AssetMaterialization,
    AssetSpec,
    AutomationCondition,
    Backoff,
    Failure,
    Jitter,
    MaterializeResult,
    MetadataValue,
    Output,
    RetryPolicy,
    asset,
)

from assets import fleet_adapter
from assets.config_failure import config_failure
from assets.cost_assets import CostReportConfig
from checkpointing.redact import redact
from fleet.planning.planner import FleetPlan
from fleet.policies.registry import get_policy
from fleet.providers.base import BUDGET_STOP, StageSpec
from pipelines.config import PipelineConfig, StageConfig
from pipelines.resources import FleetResource, StatsDB

GROUP_STATS = "statistics"
PROJECT_ROOT = Path(__file__).resolve().parent.parent
TRAIN_RETRY = RetryPolicy(max_retries=3, delay=2.0, backoff=Backoff.EXPONENTIAL, jitter=Jitter.PLUS_MINUS)


def train_retry_policy(cfg: PipelineConfig) -> RetryPolicy:
    """``TRAIN_RETRY``; on the local fleet its first delay is one MARKET minute of wall time.

    The delay gives a lost node group's capacity time to come back. The local fleet's
    market runs faster than the wall clock (the provider converts:
    ``fleet.providers.registry.wall_seconds``), so 2 wall seconds there are minutes of
    market time spent idle (the example: 4 market minutes, 2.4 % of the main job's wall
    time); real clouds keep the 2 s.
    """
    from fleet.providers.registry import wall_seconds

    delay = min(TRAIN_RETRY.delay, wall_seconds(cfg.provider, 60.0, cfg.market))
    if delay == TRAIN_RETRY.delay:
        return TRAIN_RETRY
    return RetryPolicy(max_retries=TRAIN_RETRY.max_retries, delay=delay, backoff=TRAIN_RETRY.backoff,
                       jitter=TRAIN_RETRY.jitter)


def refresh_condition() -> AutomationCondition:
    """Refresh when any upstream (e.g. node sessions written by a run) updated, once.

    ``since_last_handled``: an update counts until this asset is requested or refreshed,
    so one landed run triggers one refresh.
    """
    return (
        AutomationCondition.any_deps_updated().since_last_handled()
        & ~AutomationCondition.any_deps_in_progress()
        & ~AutomationCondition.in_progress()
    ).with_label("refresh when runs land")


@dataclass(frozen=True)
class PipelineAssets:
    """What the factory builds for one pipeline."""

    config: PipelineConfig
    assets: list[Any]
    checks: list[Any]
    external: list[AssetSpec]

    @property
    def prefix(self) -> str:
        return self.config.name

    def key(self, name: str) -> AssetKey:
        return AssetKey([self.prefix, name])

    @property
    def train_keys(self) -> list[AssetKey]:
        return [self.key(f"train_{s.name}") for s in self.config.stages]

    @property
    def all_keys(self) -> list[AssetKey]:
        return [self.key(n) for n in ("spot_market", "preemption_stats", "preemption_forecast",
                                      "fleet_plan")] + self.train_keys + [self.key("cost_report")]

    @property
    def refresh_keys(self) -> list[AssetKey]:
        return [self.key(n) for n in ("preemption_stats", "preemption_forecast", "cost_report")]


def _md_table(df: pd.DataFrame, max_rows: int = 20) -> MetadataValue:
    if df.empty:
        return MetadataValue.md("_empty_")
    return MetadataValue.md(df.head(max_rows).to_markdown(index=False, floatfmt=".4g"))


def build_pipeline_assets(cfg: PipelineConfig) -> PipelineAssets:
    """Assets, checks and the external ``node_sessions`` spec of one pipeline."""
    p = cfg.name
    market = cfg.market.model_dump()
    node_sessions = AssetSpec(
        key=AssetKey([p, "node_sessions"]), group_name=p,
        description="Node sessions, preemptions and checkpoints in the statistics DB "
                    "(written by the train_<stage> assets; external to Dagster).",
        kinds={"sqlalchemy"})

    @asset(key=[p, "spot_market"], group_name=p, kinds={"python"},
           description=f"The spot market of {p}: the synthetic market (seed {cfg.market.seed}) or the "
                       "trace folder, one availability trace per zone.")
    def spot_market(context: AssetExecutionContext, fleet: FleetResource) -> Output:
        _recheck_config(context, cfg, fleet)  # job start: what changed since the code location loaded
        context.log.info(f"{p}: loading the {cfg.market.kind} spot market "
                         + (f"({cfg.market.n_zones} zones, {cfg.market.hours:g} h of history, seed {cfg.market.seed})"
                            if cfg.market.kind == "synthetic" else f"from {cfg.market.trace_dir}") + " ...")
        traces = fleet_adapter.market_traces(market, cache_dir=fleet.market_cache_dir())
        summary = pd.DataFrame([{"zone": t.zone, "region": t.region, "accelerator": t.accelerator,
                                 "hours": round(t.duration_hours, 1),
                                 "availability": float(t.up().mean())} for t in traces])
        return Output(traces, metadata={
            "zones": MetadataValue.int(len(traces)), "summary": _md_table(summary),
            "mean_availability": MetadataValue.float(round(float(summary["availability"].mean()), 4)),
        })

    @asset(key=[p, "preemption_stats"], group_name=p, kinds={"python"},
           ins={"spot_market": AssetIn(key=[p, "spot_market"])},
           deps=[node_sessions.key], automation_condition=refresh_condition(),
           description="Per-zone preemption statistics (list[ZoneStats]) from the market traces and "
                       "from the node sessions recorded in the statistics DB (MTTP with CI, rate, "
                       "regain time, R).")
    def preemption_stats(context: AssetExecutionContext, stats_db: StatsDB, spot_market) -> Output:
        from fleet.stats.preemption import session_stats, stats_rows, zone_stats
        from infra.db.recorder import node_sessions_as_dataclasses

        context.log.info(f"{p}: preemption statistics of {len(spot_market)} zone trace(s) and the recorded "
                         "node sessions ...")
        stats = list(zone_stats(spot_market))
        sessions = node_sessions_as_dataclasses(stats_db.engine(), p)
        stats += list(session_stats(sessions)) if sessions else []
        # the analyst's table is derived from the typed records (the value is the records):
        # numbers as text, so a missing value says why instead of nan / inf
        show = pd.DataFrame(stats_rows(stats))
        traced = [s.preemptions for s in stats if s.source == "trace"]
        return Output(stats, metadata={
            "table": _md_table(show), "recorded_sessions": MetadataValue.int(len(sessions)),
            "min_preemptions_per_zone": MetadataValue.int(int(min(traced)) if traced else 0),
            # fault injections (inject_preemptions_at_steps) end sessions like preemptions;
            # they are billed, but the statistics above count the market's preemptions only
            "injected_preemptions": MetadataValue.int(sum(s.injected_preemptions for s in stats)),
        })

    @asset(key=[p, "preemption_forecast"], group_name=p, kinds={"python"},
           ins={"spot_market": AssetIn(key=[p, "spot_market"]),
                "preemption_stats": AssetIn(key=[p, "preemption_stats"])},
           automation_condition=refresh_condition(),
           description="Probabilistic forecast per zone for the deadline horizon: availability and "
                       "preemptions (mean, p10/p50/p90), semi-Markov model fitted on the market traces "
                       "and updated by the spot preemptions and held hours of the zone's recorded node "
                       "sessions (preemption_stats; Gamma-Poisson), from fleet.stats.forecast.")
    def preemption_forecast(context: AssetExecutionContext, spot_market, preemption_stats) -> Output:
        from fleet.stats.forecast import SESSION_PRIOR_HELD_HOURS, forecast_zones

        horizon = max(1.0, min(cfg.deadline_hours, 48.0))
        evidence = fleet_adapter.session_evidence(preemption_stats)
        fc = forecast_zones(spot_market, None, horizon, n_samples=400, seed=cfg.market.seed,
                            evidence=evidence, prior_held_hours=SESSION_PRIOR_HELD_HOURS)
        df = pd.DataFrame([f.to_dict() for f in fc])
        show = df[["zone", "horizon_hours", "state_up", "availability_mean", "preemptions_mean",
                   "preemptions_p90", "rate_per_held_hour"]]
        updated = df[df["up_rate_posterior"].notna()]
        ev = updated[["zone", "session_preemptions", "session_held_hours", "up_rate_prior",
                      "up_rate_posterior", "preemptions_mean_without_sessions", "preemptions_mean"]]
        if len(updated):
            context.log.info(f"{p}: recorded sessions updated the forecast of {', '.join(updated['zone'])}")
        return Output(fc, metadata={
            "table": _md_table(show), "horizon_hours": MetadataValue.float(round(horizon, 2)),
            "zones_updated_by_sessions": MetadataValue.int(len(updated)),
            # nothing to update from: say why and when it changes ("_empty_" said neither)
            "session_update": _md_table(ev) if len(ev) else MetadataValue.md(
                "_no zone has recorded spot sessions yet: this forecast is the market traces' alone; "
                "the node sessions a training run records update it at the next refresh_"),
            "session_prior_held_hours": MetadataValue.float(SESSION_PRIOR_HELD_HOURS),
        })

    @asset(key=[p, "fleet_plan"], group_name=p, kinds={"python"},
           ins={"preemption_stats": AssetIn(key=[p, "preemption_stats"]),
                "preemption_forecast": AssetIn(key=[p, "preemption_forecast"])},
           description="Per stage: zones in failover order, spot / on-demand mix, on-demand fallback "
                       "threshold, expected cost and completion, and why (fleet.planning).")
    def fleet_plan(context: AssetExecutionContext, stats_db: StatsDB, preemption_stats,
                   preemption_forecast) -> Output:
        from infra.db.models import CheckpointRecord
        from infra.db.recorder import read_table

        # R and the checkpoint time measured in the DB (market seconds, whatever the provider);
        # C per stage: its own saves (stages checkpoint different models; a stage with no
        # measured save gets no C prior, as in the first run); R per stage and zone: the
        # planner asks each zone's ZoneStats.restart_latency_for(stage name)
        stats = fleet_adapter.planning_zone_stats(preemption_stats)
        ckpts = read_table(stats_db.engine(), CheckpointRecord, p)
        total_work = sum(s.work_hours for s in cfg.stages)
        plans: dict[str, FleetPlan] = {}
        # a SkyPilot pipeline is priced from the catalog (its instance types), not the V100
        # table, each stage from its own clouds' catalogs
        try:
            books = fleet_adapter.pipeline_stage_prices(cfg.provider, cfg.market, cfg.stages)
        except (OSError, ValueError, KeyError) as exc:
            raise config_failure(context, f"cannot read the SkyPilot catalog's prices: {exc}") from None
        for s in cfg.stages:
            ckpt_h = fleet_adapter.measured_checkpoint_hours(
                ckpts[ckpts["stage"] == s.name] if len(ckpts) and "stage" in ckpts else None)
            share = cfg.deadline_hours * s.work_hours / total_work
            try:
                book, notes = books[s.name]
                plans[s.name] = fleet_adapter.plan_for_stage(
                    s, stats, preemption_forecast, cfg.market, share, cfg.on_demand_fallback, ckpt_h, book)
                plans[s.name].reasons[:0] = notes
            except ValueError as exc:
                raise config_failure(context, f"cannot plan stage {s.name}: {exc}") from None
            context.log.info(plans[s.name].explain())
        md = "\n\n".join(f"**{k}**\n\n```\n{v.explain()}\n```" for k, v in plans.items())
        meta = {"plan": MetadataValue.md(md)}
        for k, v in plans.items():
            meta[f"{k}_expected_cost_usd"] = MetadataValue.float(round(float(v.expected_cost or 0.0), 4))
            meta[f"{k}_priors"] = MetadataValue.json(v.priors().to_dict())
            # the R each zone was scored with and where it came from (stage / zone / default)
            meta[f"{k}_zone_choices"] = _md_table(pd.DataFrame(
                [{"zone": z.zone, "nodes": z.nodes, "rate_per_hour": z.rate_per_hour,
                  "restart_s": z.restart_hours * 3600.0, "restart_source": z.restart_source,
                  "c_eff": z.c_eff} for z in v.zones]))
        return Output(plans, metadata=meta)

    train_assets = []
    for idx, stage in enumerate(cfg.stages):
        train_assets.append(_train_asset(cfg, stage, idx, node_sessions.key))

    @asset(key=[p, "cost_report"], group_name=p, kinds={"pandas"},
           deps=[*(a.key for a in train_assets), node_sessions.key],
           automation_condition=refresh_condition(),
           description="Cost of ONE run (default: this run, else the latest): spend per stage, zone and "
                       "day vs on-demand for the same useful work, split into useful compute and the "
                       "first-launch, restart, checkpoint, membership (elastic shrink / grow), redo and "
                       "idle taxes; observed vs modelled "
                       "effective cost; budget; plus the period (per UTC day) and all-time tables. "
                       "Config: run_id, first_day, last_day.")
    def cost_report(context: AssetExecutionContext, stats_db: StatsDB, fleet: FleetResource,
                    config: CostReportConfig) -> Output:
        from assets.cost_assets import materialize_cost_report

        return materialize_cost_report(context, cfg, stats_db, fleet, config)

    from assets.checks import build_checks

    assets = [spot_market, preemption_stats, preemption_forecast, fleet_plan, *train_assets, cost_report]
    pa = PipelineAssets(cfg, assets, [], [node_sessions])
    return PipelineAssets(cfg, assets, build_checks(pa), [node_sessions])


def _stage_deadline_seconds(cfg: PipelineConfig, stage: StageConfig) -> float:
    """This stage's share of the pipeline deadline, in MARKET seconds (the local fleet
    converts to its compressed wall clock itself)."""
    total_work = sum(s.work_hours for s in cfg.stages)
    return cfg.deadline_hours * stage.work_hours / total_work * 3600.0


def _recheck_config(context: AssetExecutionContext, cfg: PipelineConfig, fleet: FleetResource) -> None:
    """Semantic validation again at job start (scripts, trace folders may have changed since the
    code location loaded); a problem fails the run once, without step or run retries."""
    from pipelines.validation import check_pipeline

    problems = check_pipeline(cfg, cwd=Path(fleet.cwd()))
    if problems:
        raise config_failure(context, f"pipeline {cfg.name} ({len(problems)} problem(s)):\n"
                             + "\n".join(p.line() for p in problems))
    _check_stores(context, cfg, fleet)


def _check_stores(context: AssetExecutionContext, cfg: PipelineConfig, fleet: FleetResource,
                  stages: list[StageConfig] | None = None) -> None:
    """The checkpoint stores answer (bucket exists, endpoint up, credentials) before any node
    is launched: otherwise every node fails at its first save, each one billed and retried."""
    from pipelines.validation import check_checkpoint_stores

    problems, warnings = check_checkpoint_stores(cfg, fleet.var_path(), stages)
    for w in warnings:
        context.log.warning(redact(w))
    if problems and stages is not None and all(p.reason == "unreachable" for p in problems):
        # before a stage launches, later in a run whose store answered at job start: an outage,
        # not a configuration error; the step's RetryPolicy tries again (nothing was launched)
        raise Failure(description=redact(f"stage {stages[0].name}: not launched, its checkpoint store "
                                         "does not answer:\n" + "\n".join(p.line() for p in problems)))
    if problems:
        raise config_failure(context, redact(f"pipeline {cfg.name} ({len(problems)} problem(s)):\n"
                                             + "\n".join(p.line() for p in problems)))


def _terminate_wait_seconds(cfg: PipelineConfig, spec: StageSpec) -> float:
    """How long the Pipes client waits for the node runner after a Terminate: the grace its
    nodes get for their emergency saves (``"auto"``: the local fleet's notice window) plus
    the Pipes margin."""
    from fleet.providers.registry import terminate_grace_wall_seconds
    from fleet.providers.terminate import pipes_wait_seconds

    grace = terminate_grace_wall_seconds(cfg.provider, spec.terminate_grace_seconds, cfg.market)
    return pipes_wait_seconds(grace, 20.0)


def _resolve_command(stage: StageConfig, python: str, cwd: str, context: Any = None) -> list[str]:
    argv = stage.argv(python)
    if stage.script is not None:
        script = Path(stage.script)
        if not script.is_absolute():
            roots = [Path(cwd), PROJECT_ROOT]
            cand = next((r / script for r in roots if (r / script).exists()), None)
            if cand is None:
                msg = (f"stage {stage.name}: script {stage.script!r} not found under {cwd} or "
                       f"{PROJECT_ROOT}; give a path relative to one of them or an absolute one")
                if context is not None:
                    raise config_failure(context, msg)
                raise Failure(description=msg, allow_retries=False)
            argv[1] = str(cand.resolve())
    return argv


def _train_asset(cfg: PipelineConfig, stage: StageConfig, idx: int, sessions_key: AssetKey):
    p = cfg.name
    deps = [AssetKey([p, f"train_{d}"]) for d in cfg.stage_deps(stage)]

    @asset(key=[p, f"train_{stage.name}"], group_name=p, kinds={"python"},
           ins={"fleet_plan": AssetIn(key=[p, "fleet_plan"])}, deps=deps,
           retry_policy=train_retry_policy(cfg),
           description=f"Train stage '{stage.name}' on the {cfg.provider} fleet; preemptions inside an "
                       "attempt are survived by the provider, lost attempts are retried by Dagster and "
                       "resume from the latest checkpoint.",
           metadata={"stage": stage.name, "script": stage.script or " ".join(stage.command or [])})
    def train(context: AssetExecutionContext, fleet: FleetResource, stats_db: StatsDB, fleet_plan) -> MaterializeResult:
        return run_training_stage(context, cfg, stage, fleet, stats_db, fleet_plan.get(stage.name),
                                  sessions_key)

    return train


def run_training_stage(context: AssetExecutionContext, cfg: PipelineConfig, stage: StageConfig,
                       fleet: FleetResource, stats_db: StatsDB, plan: FleetPlan | None,
                       sessions_key: AssetKey) -> MaterializeResult:
    """Launch one attempt through Dagster Pipes, record it, and fail (retryably) if it was lost.

    The run contract: the stage's StageSpec (command, zones, spot, the YAML's fleet
    policy, the deadline in market seconds) with the plan applied (``FleetPlan.apply``:
    failover zones, spot or not, the priors MTTP / R / checkpoint time / interval in
    seconds) travels to the node runner, whose provider drives that policy and exports
    the priors to the training process."""
    from fleet.contract import session_cost_usd
    from fleet.providers.wire import event_from_dict, session_from_dict, spec_to_dict
    from infra.db.pending import AttemptRecord, RecordNotWritten, record_attempt_retrying
    from infra.db.recorder import latest_checkpoint_step

    attempt = context.retry_number + 1
    from assets.report_render import prewarm_plotting

    prewarm_plotting()  # the cost report's matplotlib import, while this stage trains
    root_run = context.run.root_run_id or context.run.run_id
    cwd = fleet.cwd()
    _check_stores(context, cfg, fleet, [stage])  # before this stage launches (or bills) a node
    ckpt_uri = cfg.stage_checkpoint_uri(stage, fleet.var_path()).rstrip("/") + f"/{root_run}"
    workdir = fleet.work_path() / p_safe(cfg.name) / root_run
    if context.run.run_id != root_run:
        # a re-execution / run retry numbers its attempts from 1 again: under the root's folder
        # its nodes' event files would be the root's, and the provider would replay them (the
        # first node "preempted" at once, billed again) instead of the node it launched
        workdir = workdir / f"reexecution-{context.run.run_id}"
    spec = StageSpec(
        name=stage.name, command=_resolve_command(stage, fleet.python_exe(), cwd, context), checkpoint_uri=ckpt_uri,
        accelerator=stage.resources.accelerator, accelerator_count=stage.resources.count,
        num_nodes=stage.resources.nodes, clouds=tuple(stage.resources.clouds),
        regions=tuple(stage.resources.regions), zones=tuple(stage.resources.zones),
        use_spot=stage.resources.spot, instance_type=stage.resources.instance_type,
        deadline_seconds=_stage_deadline_seconds(cfg, stage) if cfg.on_demand_fallback else None,
        on_demand_allowed=cfg.on_demand_fallback,
        env={"SPOTFLEET_JOB_ID": f"{cfg.name}/{stage.name}/{root_run}", **_stage_env(cfg, stage, fleet)},
        max_relaunches=stage.max_relaunches, policy=stage.policy,
        stall_timeout_seconds=stage.stall_timeout_seconds,
        stall_startup_seconds=stage.stall_startup_seconds,
        terminate_grace_seconds=stage.terminate_grace_seconds)
    if plan is not None:
        spec = plan.apply(spec)
    zones, use_spot = list(spec.zones), spec.use_spot
    from assets import cost_tables as ct
    from assets.cost_assets import check_budget_before_launch, run_group, stage_metadata
    from infra.db.pending import PENDING_DIR, call_with_deadline, db_timeout_seconds, replay_pending

    pending_dir = fleet.var_path() / PENDING_DIR

    def read_before_launch():
        db = stats_db.engine()
        # an earlier attempt's record that the DB missed: written first, so that what follows
        # (a stage already completed, the run group's resume step, the budget) counts it
        replay_pending(db, pending_dir, cfg.name, stage.name, info=context.log.info)
        return db, ct.load(db, cfg.name)

    try:
        eng, data = call_with_deadline(read_before_launch, db_timeout_seconds(), "reading the statistics DB")
    except Exception as exc:
        raise _db_down_before_launch(stats_db, cfg, stage, pending_dir, ckpt_uri, exc) from exc
    runs = run_group(context, data)  # root first, then its re-executions / retries
    done = ct.completed_attempt(data, stage.name, runs)
    if done is not None:  # a re-execution of a group that already finished this stage: no node, no bill
        return _already_complete(context, cfg, stage, eng, runs, done, attempt, ckpt_uri)
    busy = running_group_run(context, runs)
    if busy is not None:  # the same checkpoint prefix: the two would take its lease from each other
        raise Failure(
            description=(f"stage {stage.name}: run {busy} of the same run group (root {root_run}) is still "
                         f"running and trains the same checkpoint prefix {redact(ckpt_uri)}; a second run "
                         "there would take the checkpoint lease from it back and forth and both would be "
                         "billed. Nothing was launched. Wait for that run to finish (or terminate it), then "
                         "re-execute this one."),
            allow_retries=False, metadata={"running_run_id": busy, "root_run_id": root_run})
    budget_left = check_budget_before_launch(context, cfg, stage.name, eng,
                                             plan.expected_cost if plan is not None else None, runs)
    if budget_left is not None:  # enforce_budget: the provider does not relaunch past it
        spec = replace(spec, budget_left_usd=budget_left)
    # the run GROUP's latest checkpoint: what the node resumes from (checkpoints live under the root)
    before = max((s for s in (latest_checkpoint_step(eng, cfg.name, stage.name, run_id=r) for r in runs)
                  if s is not None), default=None)
    context.log.info(f"{stage.name}: attempt {attempt} (run {context.run.run_id[:8]}, root {root_run[:8]}), "
                     f"zones {zones}, {'spot' if use_spot else 'on-demand'}, checkpoints {redact(ckpt_uri)}; "
                     f"latest recorded checkpoint step {before}"
                     + (f" (run group of {len(runs)} runs)" if len(runs) > 1 else ""))
    extras = {
        "spec": spec_to_dict(spec), "attempt": attempt, "provider": cfg.provider,
        "provider_options": {"market": cfg.market.model_dump(), "workdir": str(workdir),
                             "market_cache_dir": str(fleet.market_cache_dir()),
                             "on_demand_fallback": cfg.on_demand_fallback,
                             "market_clock_start_unix": market_clock_start(context)},
        "inject_preemptions_at_steps": cfg.market.inject_preemptions_at_steps.get(stage.name, []),
        "lose_attempt_at_step": cfg.market.lose_attempt_at_step.get(stage.name),
        # how long the Pipes client waits for the runner after a Terminate (its nodes' saves)
        "terminate_wait_seconds": _terminate_wait_seconds(cfg, spec),
    }
    env = {"PYTHONUNBUFFERED": "1"}
    if fleet.pipes_channel == "s3":
        env["SPOTFLEET_PIPES_CHANNEL"] = "s3"
        if fleet.pipes_endpoint_url:
            env["AWS_ENDPOINT_URL"] = fleet.pipes_endpoint_url
    started = time.time()
    from pipelines.pipes_client import StageInterrupted

    interrupted: StageInterrupted | None = None
    try:
        invocation = fleet.pipes_client().run(
            context=context, command=[fleet.python_exe(), "-m", "pipelines.node_runner"],
            extras=extras, env=env)
    except StageInterrupted as exc:  # the run was terminated: record what the runner stopped
        invocation, interrupted = exc.invocation, exc
    result = next((m for m in invocation.get_custom_messages()
                   if isinstance(m, dict) and m.get("type") == "stage_result"), None)
    if interrupted is not None and result is None:
        raise Failure(description=f"stage {stage.name} attempt {attempt}: terminated (the run was "
                                  "terminated before the node runner started its stage); nothing "
                                  "to record. Not retried.", allow_retries=False)
    if result is None:
        raise Failure(description=f"stage {stage.name}: the node runner reported no result; see the "
                                  "step's stdout/stderr in the run logs")
    sessions = [session_from_dict(s) for s in result["sessions"]]
    events = [event_from_dict(e) for e in result["events"]]
    completed = bool(result["completed"])
    first_steps = [s.first_step for s in sorted(sessions, key=lambda s: s.launched_at) if s.first_step is not None]
    record = AttemptRecord(
        run_id=context.run.run_id, root_run_id=root_run, pipeline=cfg.name, stage=stage.name, attempt=attempt,
        provider=cfg.provider, status="completed" if completed else "failed",
        sessions=list(result["sessions"]), events=list(result["events"]), started_at=started,
        ended_at=time.time(), start_step=first_steps[0] if first_steps else None,
        final_step=result.get("final_step"), total_steps=_total_steps(events),
        on_demand_price_per_hour=fleet_adapter.on_demand_price(cfg.market.model_dump()),
        error=redact(result["error"]) if result.get("error") else None)
    try:
        record_attempt_retrying(eng, record, pending_dir, warn=context.log.warning)
    except RecordNotWritten as exc:
        trained = (f"completed all its steps (final step {result.get('final_step')})" if completed
                   else f"did not finish ({redact(result.get('error'))})")
        raise Failure(
            description=(f"stage {stage.name} attempt {attempt} {trained}, but {exc}. The checkpoints are "
                         f"safe in {redact(ckpt_uri)}. What to do: bring the statistics DB back (or fix "
                         "SPOTFLEET_DB_URL / the stats_db resource), then re-execute the run from failure: "
                         "the pending record is written first"
                         + (" and the stage is not trained again." if completed
                            else " and the stage resumes from its newest checkpoint.")),
            metadata={"pending_record": str(exc.path), "completed": completed,
                      "final_step": int(result.get("final_step") or 0)}) from exc
    preempted = sum(1 for s in sessions if s.end_reason == "preempted")
    context.log_event(AssetMaterialization(
        asset_key=sessions_key, description=f"{stage.name} attempt {attempt} recorded",
        metadata={"stage": stage.name, "attempt": attempt, "sessions": len(sessions), "preemptions": preempted}))
    if not completed:
        # what a re-execution resumes from: the run GROUP's latest committed checkpoint (an
        # earlier attempt's, or the one this attempt's nodes restored), not only what this
        # attempt's nodes committed themselves (none, for a node that crashed after its restore)
        last_ckpt = group_resume_step(eng, cfg.name, stage.name, [*runs, context.run.run_id, root_run], sessions)
    if interrupted is not None and not completed:
        # Dagster would retry an interrupted step (its RetryPolicy), launching new nodes after
        # the operator pressed Terminate: fail it without a retry instead
        raise Failure(
            description=(f"stage {stage.name} attempt {attempt} {redact(result.get('error')).rstrip('.')}. Not "
                         f"retried. Re-execute the run (UI: Re-execute > From failure) to resume "
                         f"from {resume_point(last_ckpt)}."),
            allow_retries=False,
            metadata={"sessions": len(sessions), "terminated": True, "last_checkpoint_step": last_ckpt})
    if not completed and BUDGET_STOP in str(result.get("error") or ""):
        raise Failure(description=f"stage {stage.name} attempt {attempt}: {redact(result.get('error'))}",
                      allow_retries=False,
                      metadata={"budget_usd": cfg.budget_usd, "budget_left_at_attempt_start_usd":
                                round(float(spec.budget_left_usd or 0.0), 4), "sessions": len(sessions)})
    if not completed:
        raise Failure(
            description=lost_attempt_message(stage.name, attempt, train_retry_policy(cfg).max_retries,
                                             redact(result.get("error")), last_ckpt),
            metadata={"sessions": len(sessions), "preemptions": preempted, "last_checkpoint_step": last_ckpt})
    pipes_md = invocation.get_materialize_result().metadata or {}
    resumed = [s.first_step for s in sessions if s.first_step]
    meta = {k: v for k, v in dict(pipes_md).items() if k not in ("node_sessions", "preemptions", "zones_used")}
    meta.update(stage_metadata(eng, cfg.name, stage.name, runs))  # the whole stage, every attempt
    meta.update({
        "attempt": MetadataValue.int(attempt),
        "final_step": MetadataValue.int(int(result.get("final_step") or 0)),
        "this_attempt_resumed_from_steps": MetadataValue.text(", ".join(str(x) for x in resumed) or "none"),
        "this_attempt_sessions": MetadataValue.int(len(sessions)),
        "this_attempt_preemptions": MetadataValue.int(preempted),
        "this_attempt_cost_usd": MetadataValue.float(round(sum(
            session_cost_usd(s.price_per_hour, s.launched_at, s.ended_at) for s in sessions), 4)),
        "checkpoint_uri": MetadataValue.text(redact(ckpt_uri)),
        "plan": MetadataValue.text(plan.summary() if plan is not None else "no plan"),
        "fleet_policy": MetadataValue.text(_policy_label(spec.policy)),
    })
    return MaterializeResult(metadata=meta)


def _policy_label(name: str) -> str:
    """The stage's fleet policy as the run metadata names it: its registry name with its
    version where it has one (so a run can be matched with the results tables of that
    version) and its class, e.g. ``spotfleet v11 (SpotfleetPolicy)``,
    ``failover (FailoverPolicy)``."""
    pol = get_policy(name)
    return f"{pol.describe()} ({type(pol).__qualname__})"


def running_group_run(context: AssetExecutionContext, runs: list[str]) -> str | None:
    """Another run of this run group that is in progress and was created before this one
    (ties: the smaller run id), else None.

    The runs of a group (a root and its re-executions) share every stage's checkpoint
    prefix (``<checkpoint_uri>/<root run id>``) and lease job id: two of them at once (a
    double-clicked "Re-execute") took the lease from each other at every save and
    relaunch, each resuming from the other's checkpoints, both billed. The earlier one
    trains; the later one stops before launching anything. Fresh runs (their own root)
    train independent prefixes and are not affected."""
    from dagster import DagsterRunStatus

    in_progress = {DagsterRunStatus.STARTING, DagsterRunStatus.STARTED, DagsterRunStatus.CANCELING}
    me = context.instance.get_run_record_by_id(context.run.run_id)
    if me is None:
        return None
    mine = (me.create_timestamp, context.run.run_id)
    earlier = []
    for run_id in runs:
        if run_id == context.run.run_id:
            continue
        rec = context.instance.get_run_record_by_id(run_id)
        if rec is not None and rec.dagster_run.status in in_progress and (rec.create_timestamp, run_id) < mine:
            earlier.append((rec.create_timestamp, run_id))
    return min(earlier)[1] if earlier else None


def _already_complete(context: AssetExecutionContext, cfg: PipelineConfig, stage: StageConfig, eng,
                      runs: list[str], done: dict, attempt: int, ckpt_uri: str) -> MaterializeResult:
    """The stage's materialization when its run group already completed it: nothing launched."""
    from assets.cost_assets import stage_metadata

    step = int(done["final_step"]) if pd.notna(done.get("final_step")) else None
    where = f"run {str(done['run_id'])[:8]} attempt {int(done['attempt'])}, final step {step}"
    context.log.info(f"{stage.name}: already complete in this run group ({where}); no node was launched "
                     "and nothing was billed. To train it again, launch a new run (a re-execution "
                     "continues its root's training)")
    meta = stage_metadata(eng, cfg.name, stage.name, runs)
    meta.update({
        "already_complete": MetadataValue.bool(True),
        "completed_in": MetadataValue.text(where),
        "attempt": MetadataValue.int(attempt),
        "final_step": MetadataValue.int(step or 0),
        "this_attempt_sessions": MetadataValue.int(0),
        "this_attempt_cost_usd": MetadataValue.float(0.0),
        "checkpoint_uri": MetadataValue.text(redact(ckpt_uri)),
    })
    return MaterializeResult(metadata=meta)


def group_resume_step(eng, pipeline: str, stage: str, runs: list[str], sessions) -> int | None:
    """The step a retry or re-execution of ``stage`` resumes from: the highest checkpoint step
    recorded for the run group (every run shares the root's checkpoint prefix) or committed
    by ``sessions``; None when nothing was ever committed (it starts over).

    A node that restored step 120 and crashed before its next save committed nothing itself:
    "the latest checkpoint (step 0 in this attempt's nodes)" was what the last attempt's
    failure said (and ``last_checkpoint_step`` = 0 its metadata) while the re-execution
    resumed from 120 (user audit, 2026-11-28)."""
    from infra.db.recorder import latest_checkpoint_step

    # not the sessions' first_step: an elastic group that resumed from a peer's hand-off
    # starts at a step no checkpoint holds (the hand-off dies with the attempt); a restored
    # checkpoint of the run group is in its checkpoint records
    steps = [latest_checkpoint_step(eng, pipeline, stage, run_id=r) for r in dict.fromkeys(runs)]
    steps += [s.last_checkpoint_step for s in sessions]
    return max((int(x) for x in steps if x is not None), default=None)


def resume_point(step: int | None) -> str:
    """Where a re-execution resumes, in words (``group_resume_step``)."""
    if step is None:
        return "the start (step 0): no checkpoint of this stage was committed in this run group"
    return f"the latest checkpoint (step {step}, the run group's latest committed checkpoint)"


def _db_down_before_launch(stats_db: StatsDB, cfg: PipelineConfig, stage: StageConfig, pending_dir: Path,
                           ckpt_uri: str, exc: Exception) -> Exception:
    """The ``Failure`` of a stage whose statistics DB does not answer before anything was
    launched (a connection-level error, ``infra.db.pending.is_db_unavailable``); any other
    error is returned as it is. Dagster's RetryPolicy retries it (a DB restarting)."""
    from infra.db.pending import first_line, is_db_unavailable, pending_records

    if not is_db_unavailable(exc):
        return exc
    waiting = pending_records(pending_dir, cfg.name, stage.name)
    held = (f" {len(waiting)} record(s) of earlier attempts wait in {pending_dir} and are written as soon "
            "as it answers." if waiting else "")
    return Failure(
        description=(f"stage {stage.name}: the statistics DB {redact(stats_db.resolved_url())} does not answer "
                     f"({first_line(exc)}); nothing was launched.{held} The checkpoints in {redact(ckpt_uri)} "
                     "are untouched. What to do: start the DB (or fix SPOTFLEET_DB_URL / the stats_db "
                     "resource), then re-execute the run from failure."),
        metadata={"pending_records": len(waiting)})


def lost_attempt_message(stage: str, attempt: int, max_retries: int, error: str,
                         last_checkpoint_step: int | None) -> str:
    """The failure text of a lost attempt: whether Dagster retries it, or it was the last one
    (``attempt`` counts from 1; the step's RetryPolicy allows ``max_retries`` retries;
    ``last_checkpoint_step``: ``group_resume_step``)."""
    head = f"stage {stage} attempt {attempt} lost: {error}. "
    if attempt <= max_retries:
        return head + (f"Dagster retries it (attempt {attempt + 1} of {max_retries + 1}, RetryPolicy with "
                       f"backoff); the retry resumes from {resume_point(last_checkpoint_step)}.")
    return head + (f"This was the last attempt ({attempt} of {max_retries + 1}, RetryPolicy max_retries="
                   f"{max_retries}): Dagster does not retry it and the stage failed. Re-execute the run "
                   "from failure (UI: Re-execute > From failure) after the market or the error above "
                   f"allows it; the re-execution resumes from {resume_point(last_checkpoint_step)}.")


def _stage_env(cfg: PipelineConfig, stage: StageConfig, fleet: FleetResource) -> dict[str, str]:
    """Environment of the training process: the stage's own plus where its data is."""
    env = dict(stage.env)
    if cfg.data_uri:
        uri = cfg.data_uri
        if "://" not in uri and not Path(uri).is_absolute():
            uri = str((fleet.var_path() / uri).resolve())
        env.setdefault("SPOTFLEET_DATA_URI", uri)
    return env


def market_clock_start(context: AssetExecutionContext) -> float:
    """Unix time THIS run started: the local fleet's market clock is anchored there.

    Each run of a group (a re-execution, a run-level retry) has its own anchor: anchored at
    the root's start, a re-execution X wall minutes later ran X x (3600 /
    wall_seconds_per_market_hour) market minutes later (a day ahead after 12 wall minutes at
    30 s per market hour), so its charges were dated on a later UTC day than it ran."""
    rec = context.instance.get_run_record_by_id(context.run.run_id)
    start = getattr(rec, "start_time", None) if rec is not None else None
    return float(start) if start else time.time()


def p_safe(name: str) -> str:
    return name.replace("/", "_")


def _total_steps(events) -> int | None:
    for e in reversed(events):
        if e.kind == "progress" and e.data.get("total_steps") is not None:
            return int(e.data["total_steps"])
    return None
