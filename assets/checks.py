"""Asset checks on what analysts read: reconciled costs, budget, enough samples, fresh checkpoints.

Every check evaluates the run the cost report covers (this run, or the latest recorded
run when the check runs on its own, e.g. from the ``<pipeline>__checks`` job or the
automation sensor). A check whose input does not exist (nothing recorded yet, a stage
that did not run or made no progress in that run) yields NO result: its step logs
``check <asset>:<name> skipped: <why>`` and succeeds, and Dagster resolves the planned,
never-evaluated check of a successful run as SKIPPED (grey "Skipped" in the UI) — neither
a green pass nor a red failure that would read "cost does not reconcile". That needs
checks that may emit nothing: each is a one-spec ``multi_asset_check(can_subset=True)``
(an ``@asset_check``'s output is required). Checks are left out of the training job
``__train_all``: a check planned in a run that FAILED resolves as "execution failed".
``spotfleet main``'s ``<pipeline>__main`` plans them with the graph (one run); after a
failed run the ``<pipeline>__report_and_checks`` job (spotfleet main, or the run-failure
sensor under ``dagster dev``) evaluates or skips them. See docs/dagster.md, "Asset checks".
"""

import inspect
import re
from typing import TYPE_CHECKING, NamedTuple

from dagster import (
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AutomationCondition,
    multi_asset_check,
)

from pipelines.resources import FleetResource, StatsDB

if TYPE_CHECKING:
    from assets.pipeline_assets import PipelineAssets

#: relative tolerance of the cost reconciliation (float summation only)
RECONCILE_RTOL = 1e-9
#: a zone needs this many observed preemptions for its MTTP to mean something
MIN_PREEMPTIONS_PER_ZONE = 5
#: most market hours of work that may sit after the latest checkpoint of a finished stage
MAX_UNCHECKPOINTED_HOURS = 1.0


def check_condition() -> AutomationCondition:
    """Evaluate a check whenever the asset it checks was updated (by any run)."""
    return (AutomationCondition.any_deps_updated().since_last_handled()
            & ~AutomationCondition.in_progress()).with_label("after the asset updates")


class Skipped(NamedTuple):
    """A check that could not be evaluated because its input is missing (not a pass, not a failure)."""

    why: str


def skipped(why: str, **_context) -> Skipped:
    return Skipped(why)


#: the log line of a skipped check (``spotfleet main`` reads it back from the run's log)
SKIP_LOG = re.compile(r"^check (?P<asset>\S+):(?P<name>\S+) skipped: (?P<why>.*)$", re.S)


def _emit(context: AssetCheckExecutionContext, spec: AssetCheckSpec, outcome):
    """Yield the check's result, or nothing (logged) when it was skipped."""
    if isinstance(outcome, Skipped):
        context.log.info(f"check {spec.asset_key.to_user_string()}:{spec.name} skipped: {outcome.why}")
        return
    yield outcome


def check(asset, name: str, description: str, blocking: bool = False):
    """Like ``@asset_check`` for a function returning ``AssetCheckResult | Skipped``: a
    one-spec ``multi_asset_check`` that may emit no result (Dagster then shows "Skipped")."""
    spec = AssetCheckSpec(name, asset=asset, description=description, blocking=blocking,
                          automation_condition=check_condition())

    def decorate(fn):
        def body(context: AssetCheckExecutionContext, **resources):
            yield from _emit(context, spec, fn(context, **resources))

        # the resources the function declares (annotated parameters after the context)
        body.__signature__ = inspect.signature(fn)
        body.__annotations__ = dict(fn.__annotations__)
        body.__name__ = body.__qualname__ = fn.__name__
        return multi_asset_check(specs=[spec], can_subset=True, description=description,
                                 name=f"{spec.asset_key.to_python_identifier()}_{name}")(body)

    return decorate


def reconcile(stats_db_engine, pipeline: str, run_ids: list[str] | None = None) -> tuple[float, float]:
    """(sum of cost lines, sum of billed node-session cost) in $, for some runs or all of them."""
    from assets import cost_tables as ct

    data = ct.load(stats_db_engine, pipeline)
    if run_ids is not None:
        data = ct.for_runs(data, run_ids)
    lines = float(data.lines["dollars"].sum()) if not data.lines.empty else 0.0
    sessions = float(data.sessions["cost_usd"].sum()) if not data.sessions.empty else 0.0
    return lines, sessions


def report_runs(context: AssetCheckExecutionContext, data) -> list[str]:
    """The run the check evaluates: this run (and its retries) if it trained, else the latest
    run with its run group (root + re-executions: the Dagster instance's, or the roots the DB
    stored when the run is not in this instance), as the cost report does."""
    from assets import cost_tables as ct
    from assets.cost_assets import AFTER_FAILED_RUN_TAG, _group_of, run_group

    op_ctx = context.op_execution_context
    recorded = set(data.run_ids)
    failed = op_ctx.run.tags.get(AFTER_FAILED_RUN_TAG)
    if failed:  # after a failed run: that run's group, or nothing (never another run's)
        return [r for r in _group_of(op_ctx, failed, data) if r in recorded]
    mine = [r for r in run_group(op_ctx, data) if r in recorded]
    if mine:
        return mine
    latest = ct.latest_run(data)
    return _group_of(op_ctx, latest, data) if latest else []


def _no_run(context: AssetCheckExecutionContext) -> str:
    from assets.cost_assets import nothing_recorded_for

    return nothing_recorded_for(context.op_execution_context)


def run_data(context: AssetCheckExecutionContext, stats_db: StatsDB, pipeline: str):
    """(the pipeline's cost data, the runs the checks evaluate).

    Each check reads afresh: :func:`assets.cost_tables.load` returns its prepared tables
    again while the DB's fingerprint is unchanged, so the checks of one run share one read
    without a cache of their own, and a check after a stage recorded sessions sees them.
    """
    from assets import cost_tables as ct

    data = ct.load(stats_db.engine(), pipeline)
    return data, (report_runs(context, data) if not data.empty else [])


def build_checks(pa: "PipelineAssets") -> list:
    p = pa.prefix
    checks = []

    @check(pa.key("cost_report"), "cost_reconciles_with_node_sessions", blocking=True,
           description="The reported run's spend (sum of cost lines) equals the billed cost of its "
                       "recorded node sessions; the same over all runs.")
    def cost_reconciles(context: AssetCheckExecutionContext, stats_db: StatsDB) -> AssetCheckResult | Skipped:
        from assets import cost_tables as ct

        data, runs = run_data(context, stats_db, p)
        if data.empty:
            return skipped(f"no node sessions recorded for {p} yet; nothing to reconcile")
        if not runs:
            return skipped(_no_run(context))
        run = ct.for_runs(data, runs)
        rl = float(run.lines["dollars"].sum()) if not run.lines.empty else 0.0
        rs = float(run.sessions["cost_usd"].sum()) if not run.sessions.empty else 0.0
        al = float(data.lines["dollars"].sum())
        as_ = float(data.sessions["cost_usd"].sum())
        ok = abs(rl - rs) <= RECONCILE_RTOL * max(1.0, rs) and abs(al - as_) <= RECONCILE_RTOL * max(1.0, as_)
        return AssetCheckResult(passed=ok, metadata={
            "run": ", ".join(r[:8] for r in runs), "run_cost_lines_usd": round(rl, 6),
            "run_node_sessions_usd": round(rs, 6), "all_time_cost_lines_usd": round(al, 6),
            "all_time_node_sessions_usd": round(as_, 6),
            "difference_usd": round(abs(rl - rs) + abs(al - as_), 9)},
            description=None if ok else f"cost lines ${rl:.6f} != node sessions ${rs:.6f} for run "
                                        f"{runs[0][:8] if runs else '?'} (all time ${al:.6f} vs ${as_:.6f})")

    checks.append(cost_reconciles)

    budget = pa.config.budget_usd
    period = getattr(pa.config, "budget_period", "run")

    @check(pa.key("cost_report"), "within_budget",
           description=f"Spend of {p} per budget period ({period}) stays within budget_usd (${budget:g}).")
    def within_budget(context: AssetCheckExecutionContext, stats_db: StatsDB) -> AssetCheckResult | Skipped:
        from assets import cost_tables as ct

        data, runs = run_data(context, stats_db, p)
        if data.empty:
            return skipped(f"no spend recorded for {p} yet")
        if not runs:
            return skipped(_no_run(context))
        b = ct.budget_status(data, budget, period, runs)
        unpriced = ct.unpriced_sessions(ct.for_runs(data, runs).sessions)  # $0/h: spend is a lower bound
        why = [] if b.within else [f"spend ${b.spend_usd:.2f} in {b.period} exceeds the budget ${budget:.2f}; "
                                   "raise budget_usd or reduce on-demand use / work"]
        if not unpriced.empty:
            why.append(f"{len(unpriced)} node session(s) have no price, so the spend is a lower bound: "
                       f"{', '.join(unpriced['node_id'])}; {ct.UNPRICED_FIX}")
        return AssetCheckResult(
            passed=not why, severity=AssetCheckSeverity.WARN,
            metadata={"period": b.period, "spend_usd": round(b.spend_usd, 4), "budget_usd": budget,
                      "used_pct": round(100 * b.used_fraction, 1), "unpriced_sessions": len(unpriced)},
            description="; ".join(why) or None)

    checks.append(within_budget)

    market = pa.config.market.model_dump()

    @check(pa.key("preemption_stats"), "enough_samples",
           description=f"Every zone of the market has at least {MIN_PREEMPTIONS_PER_ZONE} "
                       "observed preemptions, so rates and MTTP intervals are meaningful.")
    def enough_samples(context: AssetCheckExecutionContext, fleet: FleetResource) -> AssetCheckResult | Skipped:
        # recomputed from the market (deterministic from the config) instead of loading the
        # stored asset value: a run that failed before preemption_stats has no value to load,
        # and a check must then say "skipped", not fail to execute
        from assets import fleet_adapter
        from fleet.stats.preemption import zone_stats

        try:
            trace = zone_stats(fleet_adapter.market_traces(market, cache_dir=fleet.market_cache_dir()))
        except (OSError, ValueError) as exc:
            return skipped(f"the market of {p} could not be loaded ({exc})")
        if not trace:
            return skipped("the market has no traces to count preemptions in")
        thin = [s.zone for s in trace if s.preemptions < MIN_PREEMPTIONS_PER_ZONE]
        return AssetCheckResult(
            passed=not thin, severity=AssetCheckSeverity.WARN,
            metadata={"zones": len(trace), "zones_with_too_few": ", ".join(thin) or "none",
                      "min_preemptions": int(min(s.preemptions for s in trace))},
            description=(f"too few preemptions observed in {thin}; lengthen the market history "
                         "(market.hours) or add traces") if thin else None)

    checks.append(enough_samples)

    for stage in pa.config.stages:
        checks.append(_checkpoint_check(pa, stage.name))
    return checks


def _checkpoint_check(pa: "PipelineAssets", stage: str):
    p = pa.prefix

    @check(pa.key(f"train_{stage}"), "latest_checkpoint_recent",
           description=f"In the reported run, at most {MAX_UNCHECKPOINTED_HOURS:g} market hour(s) of "
                       f"{stage}'s training went past its latest checkpoint (per node session, "
                       "from the commit or the session's start to its end).")
    def latest_checkpoint_recent(context: AssetCheckExecutionContext, stats_db: StatsDB) -> AssetCheckResult | Skipped:
        from assets import cost_tables as ct

        data, runs = run_data(context, stats_db, p)
        if not data.empty and not runs:
            return skipped(_no_run(context))
        run = ct.for_runs(data, runs)
        sessions = run.sessions[run.sessions["stage"] == stage] if not run.sessions.empty else run.sessions
        label = ", ".join(r[:8] for r in runs) or "none"
        if sessions.empty:
            return skipped(f"stage {stage} has no node session in run {label} (it did not run)", run=label)
        ck = run.checkpoints[run.checkpoints["stage"] == stage] if not run.checkpoints.empty else run.checkpoints
        if ck.empty and not (sessions["last_step"].fillna(0) > 0).any():
            return skipped(f"stage {stage} made no training progress in run {label} (nothing to checkpoint; "
                           "see the stage's failure)", run=label)
        if ck.empty:
            return AssetCheckResult(passed=False, metadata={"run": label},
                                    description=f"no checkpoint recorded for {stage} in run {label}; is the "
                                                "training script saving (checkpointing.session)?")
        # training after the latest checkpoint, per session (not the clock between runs)
        step, behind_h = ct.work_after_checkpoint(sessions, ck)
        ok = behind_h <= MAX_UNCHECKPOINTED_HOURS
        return AssetCheckResult(passed=ok, metadata={
            "run": label, "latest_checkpoint_step": step, "hours_behind": round(behind_h, 3)},
            description=None if ok else f"{behind_h:.2f} market hours of work after the latest checkpoint; "
                                        "lower the interval")

    return latest_checkpoint_recent
