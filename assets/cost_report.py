"""Build one cost report (run + period + all time) and write its files; no Dagster here.

Files, under ``<state folder>/reports/<pipeline>/``:

- ``runs/<run id>/cost_report.{md,html,csv,png}``: the report of ONE run (kept per run);
- ``runs/<run id>/cost_by_day.csv``: that report's period view (every run, per UTC day);
- ``cost_report.{md,html,csv,png}`` and ``cost_by_day.csv``: copies of the report of the
  latest recorded run (its run group); a report of an older run (``cost-report --run``)
  leaves them alone;
- ``cost_all_time.csv`` (one row per recorded run) — separate tables, never summed into
  the run's figures;
- ``focus/cost_and_usage_focus.{csv,parquet}``: every charge row in FOCUS 1.2 form
  (assets/focus.py; Parquet when pyarrow is installed).
"""

from __future__ import annotations

import datetime as dt
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from assets import cost_tables as ct
from assets import report_render as rr


@dataclass(frozen=True)
class ReportSelection:
    """Which run and which period the report covers.

    ``run_ids``: the run (a Dagster run and its run-level retries); empty: the latest
    recorded run. ``first_day``/``last_day``: the period (UTC days, inclusive); None:
    the days the selected run billed on.
    """

    run_ids: tuple[str, ...] = ()
    first_day: dt.date | None = None
    last_day: dt.date | None = None


@dataclass
class CostReport:
    """What :func:`build_report` produced (tables, figures, files)."""

    pipeline: str
    run_ids: tuple[str, ...]
    table: pd.DataFrame  # the run: stage x zone x day
    totals: dict[str, float]
    by_stage: pd.DataFrame
    by_zone: pd.DataFrame
    stages: pd.DataFrame
    by_day: pd.DataFrame
    all_time: pd.DataFrame
    period: tuple[dt.date, dt.date] | None
    break_even: ct.BreakEven | None
    budget: ct.BudgetStatus | None
    markdown: str
    files: dict[str, Path] = field(default_factory=dict)
    focus_rows: int = 0
    reconcile: tuple[float, float] = (0.0, 0.0)  # (cost lines $, node sessions $) of the run
    #: elastic stages of the run: one row per shrink / grow with its tax, and node-hours per node
    membership: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=ct.MEMBERSHIP_COLS))
    elastic_nodes: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=ct.NODE_HOURS_COLS))
    #: the run's node sessions recorded without a price (counted $0: totals are lower bounds)
    unpriced: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=ct.UNPRICED_COLS))
    #: the break-even analysis per stage (each stage's own C, R and rate; ``ct.stage_break_even``)
    stage_break_even: pd.DataFrame = field(
        default_factory=lambda: pd.DataFrame(columns=ct.STAGE_BREAK_EVEN_COLS))
    #: the report is the latest recorded run's (its group): the top-level copies were written
    latest: bool = True
    #: which clock its times are on (``time_basis``): the market clock's note, or None (wall)
    time_note: str | None = None

    @property
    def run_label(self) -> str:
        return _run_label(self.run_ids)


def _run_label(run_ids: tuple[str, ...]) -> str:
    if not run_ids:
        return "no recorded run"
    return "run " + ", ".join(r[:8] for r in run_ids)


#: the report's time note when the run has local-fleet sessions (their clock is emulated)
MARKET_TIME_NOTE = (
    "Times are MARKET time: the local fleet emulates the spot market on a compressed clock "
    "(one market hour = the pipeline's market.wall_seconds_per_market_hour wall seconds) and "
    "bills market hours, so every hour, minute and second below (spot, useful and tax hours, "
    "C, R, preemptions per hour) and the UTC days are on that clock, not the wall clock "
    "(docs/database.md, \"Units\").")


def time_basis(sessions: pd.DataFrame) -> str | None:
    """The note that says which clock the report's times are on: the market clock when any
    of ``sessions`` ran on the local fleet, else None (a real cloud's time is wall time)."""
    if sessions.empty or "provider" not in sessions:
        return None
    return MARKET_TIME_NOTE if (sessions["provider"] == "local").any() else None


def _stage_rows(data: ct.CostData, order: list[str]) -> pd.DataFrame:
    names = [s for s in order if s in set(data.sessions.get("stage", []))] + \
        sorted(set(data.sessions.get("stage", [])) - set(order))
    return pd.DataFrame([ct.stage_history(data, s).as_dict() for s in names],
                        columns=list(ct.StageHistory.__dataclass_fields__))


def build_report(engine, pipeline: str, out_dir: Path, selection: ReportSelection = ReportSelection(), *,
                 stage_order: list[str] | None = None, budget_usd: float | None = None,
                 budget_period: str = "run", budget_enforced: bool = False,
                 write_focus: bool = True, as_of: dt.datetime | None = None) -> CostReport:
    """Read the statistics DB, build the run / period / all-time tables and write the files.

    ``as_of`` (default: now, UTC): when the report is written; the period and all-time
    tables say so (a run's report file is kept, and later runs are not in its tables)."""
    # the selected runs are one run group, its root first: one first launch per stage
    data = ct.load(engine, pipeline, root_of={r: selection.run_ids[0] for r in selection.run_ids})
    # default: the latest recorded run with its run group (a re-execution: its root first)
    run_ids = tuple(selection.run_ids) or (tuple(ct.run_group(data, ct.latest_run(data))) if ct.latest_run(data)
                                           else ())
    run = ct.for_runs(data, run_ids)
    table = ct.cost_table(run.lines, run.sessions)
    tot = ct.totals(table)
    by_stage = ct.subtotals(table, "stage")
    if stage_order and not by_stage.empty:
        by_stage["_o"] = by_stage["stage"].map({s: i for i, s in enumerate(stage_order)}).fillna(len(stage_order))
        by_stage = by_stage.sort_values("_o").drop(columns="_o")
    by_zone = ct.subtotals(table, "zone")
    stages = _stage_rows(run, stage_order or [])
    days = sorted(set(run.lines["day"])) if not run.lines.empty else []
    first = selection.first_day or (dt.date.fromisoformat(days[0]) if days else None)
    last = selection.last_day or (dt.date.fromisoformat(days[-1]) if days else first)
    period = (first, last) if first is not None and last is not None else None
    in_period = ct.for_days(data, *period) if period else ct.for_runs(data, [])
    by_day = ct.day_summary(in_period)
    period_runs = int(in_period.lines["run_id"].nunique()) if not in_period.lines.empty else 0
    all_time = ct.run_summary(data)
    members = ct.load_membership(engine, pipeline)
    membership = ct.membership_table(members, run_ids)
    elastic_nodes = ct.elastic_node_hours(run.sessions, members)
    unpriced = ct.unpriced_sessions(run.sessions)
    be = ct.break_even(ct.observed_rates(run.sessions, run.lines, run.checkpoints)) if not run.sessions.empty else None
    stage_be = ct.stage_break_even(run.sessions, run.lines, run.checkpoints, stage_order or [])
    budget = None
    if budget_usd is not None:
        budget = ct.budget_status(data, budget_usd, budget_period, run_ids,
                                  day=(last if budget_period == "day" and last else None))
    period_label = ("no days" if period is None else first.isoformat() if first == last
                    else f"{first.isoformat()} .. {last.isoformat()}")
    # the run's own folder (the root run's id); nothing recorded yet: only the latest copy
    run_dir = out_dir / "runs" / run_ids[0] if run_ids else out_dir / ".empty"
    png = rr.write_plot(by_stage if not by_stage.empty else by_stage, tot, run_dir / "cost_report.png",
                        f"{pipeline} {_run_label(run_ids)}", stage_order)
    kwargs = dict(pipeline=pipeline, run_label=_run_label(run_ids), table=table, tot=tot, by_stage=by_stage,
                  by_zone=by_zone, stages=stages, be=be, budget=budget, budget_enforced=budget_enforced,
                  period_label=period_label, by_day=by_day, all_time=all_time,
                  membership=membership, elastic_nodes=elastic_nodes, unpriced=unpriced,
                  stage_be=stage_be, period_runs=period_runs, time_note=time_basis(run.sessions),
                  as_of=(as_of or dt.datetime.now(dt.UTC)).strftime("%Y-%m-%d %H:%M:%S UTC"),
                  rebuild=(f"spotfleet cost-report --pipeline {pipeline} --run {run_ids[0][:8]} "
                           f"--var-dir {out_dir.parent.parent}" if run_ids else None))
    md_file = rr.markdown_report(**kwargs, image_uri="cost_report.png")
    md_page = rr.markdown_report(**kwargs, image_uri=rr.data_uri(png))
    files = {"png": png,
             "md": _write(run_dir / "cost_report.md", md_file + "\n"),
             "html": rr.write_html(md_page, run_dir / "cost_report.html",
                                   f"spotfleet cost report: {pipeline}, {_run_label(run_ids)}")}
    table.to_csv(run_dir / "cost_report.csv", index=False)
    files["csv"] = run_dir / "cost_report.csv"
    by_day.to_csv(run_dir / "cost_by_day.csv", index=False)
    files["by_day_csv"] = run_dir / "cost_by_day.csv"
    out_dir.mkdir(parents=True, exist_ok=True)
    # the top-level copies are the latest recorded run's report, where the README says it is:
    # a report of an older run (`cost-report --run <older>`) stays in its own folder only; a
    # run that recorded nothing yet (a run that failed before launching) is the newest run
    latest = ct.latest_run(data)
    is_latest = (not run_ids or latest is None or not set(run_ids) & set(data.run_ids)
                 or ct.run_group(data, latest)[0] == run_ids[0])
    if is_latest:
        for key in ("png", "md", "html", "csv", "by_day_csv"):
            shutil.copyfile(files[key], out_dir / files[key].name)
    all_time.to_csv(out_dir / "cost_all_time.csv", index=False)
    files["all_time_csv"] = out_dir / "cost_all_time.csv"
    focus_rows = 0
    if write_focus:
        from assets import focus

        frame = focus.focus_frame(data)
        focus_rows = len(frame)
        files.update(focus.write_focus(frame, out_dir / "focus" / "cost_and_usage_focus"))
    lines_usd = float(run.lines["dollars"].sum()) if not run.lines.empty else 0.0
    sessions_usd = float(run.sessions["cost_usd"].sum()) if not run.sessions.empty else 0.0
    return CostReport(pipeline, run_ids, table, tot, by_stage, by_zone, stages, by_day, all_time, period, be,
                      budget, md_page, files, focus_rows, (lines_usd, sessions_usd), membership,
                      elastic_nodes, unpriced, stage_be, is_latest, time_basis(run.sessions))


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path
