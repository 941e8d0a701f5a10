"""Asset checks on what analysts read: reconciled costs, enough samples, fresh checkpoints."""


from typing import TYPE_CHECKING

from dagster import AssetCheckExecutionContext, AssetCheckResult, AssetCheckSeverity, asset_check

from pipelines.resources import StatsDB

if TYPE_CHECKING:
    from assets.pipeline_assets import PipelineAssets

#: relative tolerance of the cost reconciliation (float summation only)
RECONCILE_RTOL = 1e-9
#: a zone needs this many observed preemptions for its MTTP to mean something
MIN_PREEMPTIONS_PER_ZONE = 5
#: most market hours of work that may sit after the latest checkpoint of a finished stage
MAX_UNCHECKPOINTED_HOURS = 1.0


def reconcile(stats_db_engine, pipeline: str) -> tuple[float, float]:
    """(sum of cost lines, sum of billed node-session cost) for a pipeline, in $."""
    from assets.cost_tables import session_costs
    from infra.db.models import CostLine, NodeSessionRecord
    from infra.db.recorder import read_table

    lines = read_table(stats_db_engine, CostLine, pipeline)
    sessions = read_table(stats_db_engine, NodeSessionRecord, pipeline)
    return float(lines["dollars"].sum()) if not lines.empty else 0.0, float(session_costs(sessions).sum())


def build_checks(pa: "PipelineAssets") -> list:
    p = pa.prefix
    checks = []

    @asset_check(asset=pa.key("cost_report"), name="cost_reconciles_with_node_sessions", blocking=True,
                 description="The report's spend (sum of cost lines) equals the billed cost of the "
                             "recorded node sessions.")
    def cost_reconciles(context: AssetCheckExecutionContext, stats_db: StatsDB) -> AssetCheckResult:
        lines, sessions = reconcile(stats_db.engine(), p)
        diff = abs(lines - sessions)
        ok = diff <= RECONCILE_RTOL * max(1.0, sessions)
        return AssetCheckResult(passed=ok, metadata={
            "cost_lines_usd": lines, "node_sessions_usd": sessions, "difference_usd": diff},
            description=None if ok else f"cost lines ${lines:.6f} != node sessions ${sessions:.6f}")

    checks.append(cost_reconciles)

    budget = pa.config.budget_usd

    @asset_check(asset=pa.key("cost_report"), name="within_budget",
                 description=f"Recorded spend of {p} stays within its budget (${budget:g}).")
    def within_budget(context: AssetCheckExecutionContext, stats_db: StatsDB) -> AssetCheckResult:
        _, spend = reconcile(stats_db.engine(), p)
        ok = spend <= budget
        return AssetCheckResult(
            passed=ok, severity=AssetCheckSeverity.WARN,
            metadata={"spend_usd": spend, "budget_usd": budget, "used_fraction": spend / budget},
            description=None if ok else f"spend ${spend:.2f} exceeds the budget ${budget:.2f}; raise "
                                        "budget_usd or reduce on-demand use / work")

    checks.append(within_budget)

    @asset_check(asset=pa.key("preemption_stats"), name="enough_samples",
                 description=f"Every zone of the market has at least {MIN_PREEMPTIONS_PER_ZONE} "
                             "observed preemptions, so rates and MTTP intervals are meaningful.")
    def enough_samples(context: AssetCheckExecutionContext, preemption_stats) -> AssetCheckResult:
        trace = preemption_stats[preemption_stats["source"] == "trace"]
        thin = trace[trace["preemptions"] < MIN_PREEMPTIONS_PER_ZONE]["zone"].tolist()
        return AssetCheckResult(
            passed=not thin, severity=AssetCheckSeverity.WARN,
            metadata={"zones": len(trace), "zones_with_too_few": ", ".join(thin) or "none",
                      "min_preemptions": int(trace["preemptions"].min()) if len(trace) else 0},
            description=(f"too few preemptions observed in {thin}; lengthen the market history "
                         "(market.hours) or add traces") if thin else None)

    checks.append(enough_samples)

    for stage in pa.config.stages:
        checks.append(_checkpoint_check(pa, stage.name))
    return checks


def _checkpoint_check(pa: "PipelineAssets", stage: str):
    p = pa.prefix
    scale = pa.config.market.time_scale if pa.config.provider == "local" else 1.0

    @asset_check(asset=pa.key(f"train_{stage}"), name="latest_checkpoint_recent",
                 description=f"The latest checkpoint of {stage} is at most {MAX_UNCHECKPOINTED_HOURS:g} "
                             "market hour(s) of work behind the end of the stage's last node session.")
    def latest_checkpoint_recent(context: AssetCheckExecutionContext, stats_db: StatsDB) -> AssetCheckResult:
        from sqlalchemy import func, select

        from infra.db.models import CheckpointRecord, NodeSessionRecord
        from infra.db.session import session_scope

        with session_scope(stats_db.engine()) as db:
            last_end = db.scalar(select(func.max(NodeSessionRecord.ended_at)).where(
                NodeSessionRecord.pipeline == p, NodeSessionRecord.stage == stage))
            last_ckpt = db.scalar(select(func.max(CheckpointRecord.committed_at)).where(
                CheckpointRecord.pipeline == p, CheckpointRecord.stage == stage))
            step = db.scalar(select(func.max(CheckpointRecord.step)).where(
                CheckpointRecord.pipeline == p, CheckpointRecord.stage == stage))
        if last_ckpt is None:
            return AssetCheckResult(passed=False, description=f"no checkpoint recorded for {stage}; "
                                    "is the training script saving (checkpointing.session)?")
        behind_h = max(0.0, (last_end or last_ckpt) - last_ckpt) * scale / 3600.0
        return AssetCheckResult(passed=behind_h <= MAX_UNCHECKPOINTED_HOURS, metadata={
            "latest_checkpoint_step": int(step or 0), "hours_behind": behind_h},
            description=None if behind_h <= MAX_UNCHECKPOINTED_HOURS else
            f"{behind_h:.2f} market hours of work after the latest checkpoint; lower the interval")

    return latest_checkpoint_recent
