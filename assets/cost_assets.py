"""Dagster side of the cost report: which run it covers, its metadata, stage history, budget.

Kept out of assets/pipeline_assets.py (the asset factory only calls these):

- :func:`run_group`: the runs of THIS Dagster run (its root and run-level retries);
- :func:`materialize_cost_report`: the ``cost_report`` asset body (run / period selector
  :class:`CostReportConfig`, rounded metadata, the plot inline in the UI);
- :func:`stage_metadata`: a ``train_<stage>`` materialization's metadata for the WHOLE
  stage across its attempts in this run;
- :func:`check_budget_before_launch`: the budget rule a stage is held to before launch.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from dagster import AssetExecutionContext, Config, Failure, MetadataValue, Output
from pydantic import Field

from assets import cost_tables as ct
from assets import report_render as rr
from assets.cost_report import ReportSelection, build_report

ROOT_TAG = "dagster/root_run_id"
#: set on a ``<pipeline>__report_and_checks`` run that follows a failed run (the run-failure
#: sensor, ``spotfleet main``): the run it reports. Its report and checks cover THAT run's group;
#: when it recorded nothing (failed before any node), there is nothing to report, and neither
#: the report nor the checks fall back to another run.
AFTER_FAILED_RUN_TAG = "spotfleet/after_failed_run"


class CostReportConfig(Config):
    """Run / period selector of the cost report (launchpad config; empty = defaults)."""

    run_id: str = Field("", description="report this run (a Dagster run id or its first 8 characters); "
                                        "default: the run that materializes the report, if it trained, "
                                        "else the latest recorded run")
    first_day: str = Field("", description="period start, UTC day YYYY-MM-DD (default: the run's first day)")
    last_day: str = Field("", description="period end, UTC day YYYY-MM-DD, inclusive (default: the run's last day)")


def instance_run_group(instance, run_id: str) -> list[str] | None:
    """``run_id``'s run group in the Dagster instance: its root first, then every run with that
    root (re-executions, run-level retries), oldest first; None when the instance lacks the run.

    Members are found by ``DagsterRun.root_run_id`` AND by the ``dagster/root_run_id`` tag: the
    UI's re-execution sets both, Dagster's Python path (``execute_job(...,
    reexecution_options=...)``) only the field, so a tag query alone missed earlier
    re-executions (and ``DagsterInstance.get_run_group`` queries the tag too)."""
    import datetime as _dt

    from dagster import RunsFilter

    rec = instance.get_run_record_by_id(run_id)
    if rec is None:
        return None
    root = rec.dagster_run.root_run_id or rec.dagster_run.run_id
    root_rec = instance.get_run_record_by_id(root) if root != run_id else rec
    # a member is created after its root: scan only those runs
    since = (root_rec or rec).create_timestamp - _dt.timedelta(seconds=1)
    created = {run_id: rec.create_timestamp}
    for r in instance.get_run_records(filters=RunsFilter(created_after=since)):
        if r.dagster_run.root_run_id == root:
            created[r.dagster_run.run_id] = r.create_timestamp
    for r in instance.get_run_records(filters=RunsFilter(tags={ROOT_TAG: root})):
        created[r.dagster_run.run_id] = r.create_timestamp
    created.pop(root, None)
    return [root, *sorted(created, key=lambda r: (created[r], r))]


def _merge(group: list[str], more: list[str]) -> list[str]:
    return [*group, *(r for r in more if r not in group)]


def run_group(context: AssetExecutionContext, data: ct.CostData | None = None) -> list[str]:
    """This run, its root run and every run of that root (re-executions, run-level retries);
    root first (see :func:`instance_run_group`); with ``data``, also the runs the statistics DB
    recorded with that root."""
    run = context.run
    root = run.root_run_id or run.run_id
    try:
        group = instance_run_group(context.instance, run.run_id)
    except Exception:  # noqa: BLE001 - an instance without run storage: this run and its root
        group = None
    group = group or [root, *([run.run_id] if run.run_id != root else [])]
    return _merge(group, ct.run_group(data, root)) if data is not None else group


def _group_of(context: AssetExecutionContext, run_id: str, data: ct.CostData | None = None) -> list[str]:
    try:
        group = instance_run_group(context.instance, run_id)
    except Exception:  # noqa: BLE001
        group = None
    if group is None:  # not in this Dagster instance: the group the statistics DB recorded
        return ct.run_group(data, run_id) if data is not None else [run_id]
    return _merge(group, ct.run_group(data, group[0])) if data is not None else group


def _day(text: str, field: str) -> dt.date | None:
    if not text:
        return None
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise Failure(description=f"cost_report config {field}: {text!r} is not a UTC day YYYY-MM-DD; "
                                  "fix it in the launchpad", allow_retries=False) from None


def select_runs(context: AssetExecutionContext, data: ct.CostData, config: CostReportConfig) -> list[str]:
    """The run ids the report covers (see :class:`CostReportConfig`)."""
    recorded = data.run_ids
    if config.run_id:
        hits = [r for r in recorded if r == config.run_id or r.startswith(config.run_id)]
        if not hits:
            raise Failure(description=f"cost_report config run_id: no recorded run {config.run_id!r}; "
                                      f"recorded runs: {[r[:8] for r in recorded[-10:]]}", allow_retries=False)
        return _group_of(context, hits[-1], data)
    failed = context.run.tags.get(AFTER_FAILED_RUN_TAG)
    if failed:  # the failed run's group, or nothing: never another run's
        return [r for r in _group_of(context, failed, data) if r in set(recorded)]
    mine = [r for r in run_group(context, data) if r in set(recorded)]
    if mine:
        return mine
    latest = ct.latest_run(data)
    return _group_of(context, latest, data) if latest else []


def nothing_recorded_for(context: Any) -> str:
    """Why a report / check after a failed run has no run to cover."""
    failed = context.run.tags.get(AFTER_FAILED_RUN_TAG, "")
    return (f"run {failed[:8]} recorded no node session (it failed before any node was launched); "
            "earlier runs' reports and checks are not redone")


def _f(v: float, nd: int = 2) -> MetadataValue:
    return MetadataValue.float(round(float(v), nd))


def materialize_cost_report(context: AssetExecutionContext, cfg, stats_db, fleet,
                            config: CostReportConfig) -> Output:
    """The cost_report asset: this run's report, its period and the all-time table."""
    eng = stats_db.engine()
    p = cfg.name
    data = ct.load(eng, p)
    run_ids = select_runs(context, data, config)
    if not run_ids and context.run.tags.get(AFTER_FAILED_RUN_TAG) and not config.run_id:
        why = nothing_recorded_for(context)
        context.log.info(f"cost report: none; {why}")
        import pandas as pd

        return Output(pd.DataFrame(), metadata={"run": MetadataValue.text(f"none: {why}")})
    sel = ReportSelection(tuple(run_ids), _day(config.first_day, "first_day"), _day(config.last_day, "last_day"))
    rep = build_report(eng, p, fleet.var_path() / "reports" / p, sel, stage_order=[s.name for s in cfg.stages],
                       budget_usd=cfg.budget_usd, budget_period=getattr(cfg, "budget_period", "run"),
                       budget_enforced=bool(getattr(cfg, "enforce_budget", False)))
    tot = rep.totals
    plot_md = f"![{p} cost per stage]({rr.data_uri(rep.files['png'])})"
    meta: dict[str, Any] = {
        "run": MetadataValue.text(", ".join(rep.run_ids) or "none recorded"),
        "period": MetadataValue.text(" .. ".join(d.isoformat() for d in rep.period) if rep.period else "none"),
        "plot": MetadataValue.md(plot_md),
        "report": MetadataValue.md(rep.markdown),
        "html": MetadataValue.path(str(rep.files["html"])),
        "csv": MetadataValue.path(str(rep.files["csv"])),
        "focus_csv": MetadataValue.path(str(rep.files.get("focus_csv", ""))),
        "focus_rows": MetadataValue.int(rep.focus_rows),
        "runs_all_time": MetadataValue.int(len(rep.all_time)),
        "spend_all_time_usd": _f(rep.all_time["spend_usd"].sum() if not rep.all_time.empty else 0.0, 4),
        "rows": MetadataValue.int(len(rep.table)),
    }
    if "focus_parquet" in rep.files:
        meta["focus_parquet"] = MetadataValue.path(str(rep.files["focus_parquet"]))
    meta.update({k: _f(v, 1 if k.endswith("_pct") else 4) for k, v in tot.items() if v == v})  # NaN: no %
    if not rep.by_day.empty:
        meta["period_spend_usd"] = _f(rep.by_day["spend_usd"].sum(), 4)
    be = rep.break_even
    if be is not None:
        meta["observed_rate_per_hour"] = _f(be.observed.rate_per_hour, 3)
        meta["break_even_rate_per_hour"] = _f(be.break_even_rate_per_hour, 3)
        obs = be.observed_cost_per_useful_hour
        if obs == obs:  # not nan
            meta["observed_cost_per_useful_hour"] = _f(obs, 3)
        if be.eff_cost_per_useful_hour != float("inf"):
            meta["modelled_cost_per_useful_hour"] = _f(be.eff_cost_per_useful_hour, 3)
        meta["spot_wins"] = MetadataValue.bool(be.spot_wins)
    if len(rep.stage_break_even) > 1:  # stages differ in C and R: the verdict per stage
        meta["break_even_by_stage"] = MetadataValue.md(rr.md_table(rep.stage_break_even))
    if rep.time_note:  # the local fleet bills its emulated market clock
        meta["time_basis"] = MetadataValue.text(
            f"market time: one market hour = {cfg.market.wall_seconds_per_market_hour:g} wall s "
            "(local fleet); every hour, minute and second of this report is on that clock")
    meta["unpriced_sessions"] = MetadataValue.int(len(rep.unpriced))
    if not rep.unpriced.empty:
        ids = ", ".join(str(x) for x in rep.unpriced["node_id"])
        meta["unpriced_session_ids"] = MetadataValue.text(ids)
        context.log.warning(f"cost report of {rep.run_label}: {len(rep.unpriced)} node session(s) have no price "
                            f"and are counted at $0 ({ids}); {ct.UNPRICED_FIX}")
    if rep.budget is not None:
        meta["budget_period"] = MetadataValue.text(rep.budget.period)
        meta["budget_used_pct"] = _f(100 * rep.budget.used_fraction, 1)
    context.log.info(f"cost report of {rep.run_label}: ${tot['spend_usd']:.2f} spend vs "
                     f"${tot['on_demand_usd']:.2f} on-demand; {rep.files['html']}")
    return Output(rep.table, metadata=meta)


def stage_metadata(engine, pipeline: str, stage: str, run_ids: list[str]) -> dict[str, MetadataValue]:
    """The stage across ALL its attempts in this run: sessions, preemptions, lost attempts, $."""
    data = ct.for_runs(ct.load(engine, pipeline, root_of={r: run_ids[0] for r in run_ids}), run_ids)
    h = ct.stage_history(data, stage)
    att = ct.attempts_table(data, stage)
    ss = data.sessions[data.sessions["stage"] == stage] if not data.sessions.empty else data.sessions
    resumed = sorted(int(x) for x in ss.get("first_step", []) if x == x and x > 0)
    members = ct.load_membership(engine, pipeline)
    changes = ct.membership_table(members[members["stage"] == stage] if not members.empty else members,
                                  run_ids)
    elastic = {}
    if not changes.empty:  # an elastic multi-node stage: the tax of each shrink / grow
        elastic = {
            "membership_changes": MetadataValue.md(rr.md_table(changes, [
                "attempt", "step", "kind", "world_sizes", "pause_seconds", "node_seconds",
                "membership_tax_usd"], total=True)),
            "membership_tax_usd": _f(float(changes["membership_tax_usd"].sum()), 4),
        }
    return {
        "attempts": MetadataValue.int(h.attempts),
        "lost_attempts": MetadataValue.int(h.lost_attempts),
        "node_sessions": MetadataValue.int(h.sessions),
        "preemptions": MetadataValue.int(h.preemptions),
        "lost_nodes": MetadataValue.int(h.lost_nodes),
        "on_demand_sessions": MetadataValue.int(h.on_demand_sessions),
        "cost_usd": _f(h.cost_usd, 4),
        "zones_used": MetadataValue.text(h.zones or "none"),
        # every session of the stage that started from a checkpoint, all attempts (as
        # `spotfleet main` prints it); the last attempt's alone: this_attempt_resumed_from_steps
        "resumed_from_steps": MetadataValue.text(", ".join(str(x) for x in resumed) or "none"),
        "attempt_history": MetadataValue.md(rr.md_table(att, total=True)),
        **elastic,
    }


def check_budget_before_launch(context: AssetExecutionContext, cfg, stage: str, engine,
                               expected_cost_usd: float | None, run_ids: list[str]) -> float | None:
    """Refuse to launch ``stage`` when the budget period's spend plus its expected cost exceeds
    ``budget_usd`` and the config enforces the budget (``enforce_budget: true``); else warn.

    Returns the $ left of the budget when it is enforced (the provider does not relaunch past
    it, ``StageSpec.budget_left_usd``), else None."""
    period = getattr(cfg, "budget_period", "run")
    enforce = bool(getattr(cfg, "enforce_budget", False))
    status = ct.budget_status(ct.load(engine, cfg.name), cfg.budget_usd, period, run_ids)
    expected = float(expected_cost_usd or 0.0)
    left = max(0.0, cfg.budget_usd - status.spend_usd) if enforce else None
    if status.spend_usd + expected <= cfg.budget_usd:
        return left
    msg = (f"stage {stage} would exceed the budget of pipeline {cfg.name}: spend so far ${status.spend_usd:.2f} "
           f"in {status.period} + expected ${expected:.2f} for {stage} > budget_usd ${cfg.budget_usd:.2f}")
    if not enforce:
        context.log.warning(msg + " (enforce_budget is false: launching anyway)")
        return None
    raise Failure(description=msg + ". The stage was NOT launched. Raise budget_usd in the pipeline YAML, "
                                    "shorten the stage, or set enforce_budget: false to only warn.",
                  allow_retries=False, metadata={"spend_usd": round(status.spend_usd, 4),
                                                 "expected_stage_cost_usd": round(expected, 4),
                                                 "budget_usd": cfg.budget_usd, "budget_period": status.period})
