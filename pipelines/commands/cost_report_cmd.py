"""``spotfleet cost-report``: the cost report of any recorded run or period, without Dagster.

Reads the statistics DB, writes the same files as the ``cost_report`` asset
(docs/cost-report.md) and prints the run's headline, the period total and where the
files are; ``--list`` shows the recorded runs (the all-time table).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
from pathlib import Path


def _day(text: str) -> dt.date:
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a UTC day YYYY-MM-DD, e.g. 2026-11-23") from None


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "cost-report", help="cost report of a recorded run / period from the statistics DB (no Dagster)",
        description="Build the cost report of one recorded run (default: the latest) and a period of UTC "
                    "days from the statistics DB: run / period / all-time tables, HTML, plot, CSV and the "
                    "FOCUS 1.2 export, under <var>/reports/<pipeline>/ (docs/cost-report.md).")
    p.add_argument("--pipeline", default=None, help="pipeline name (default: the first one of the YAML file)")
    p.add_argument("--pipelines", default=None, help="pipelines YAML (default: $SPOTFLEET_PIPELINES or the example)")
    p.add_argument("--run", default=None, help="run id or its first characters (default: the latest recorded run); "
                                               "a re-execution / retry run is reported with its whole run group "
                                               "(its root and the root's other re-executions)")
    p.add_argument("--from", dest="first_day", type=_day, default=None,
                   help="period start, UTC day YYYY-MM-DD (default: the run's first day)")
    p.add_argument("--to", dest="last_day", type=_day, default=None,
                   help="period end, UTC day YYYY-MM-DD, inclusive (default: the run's last day)")
    p.add_argument("--var-dir", default=None, help="state folder (default: $SPOTFLEET_VAR_DIR or ./var)")
    p.add_argument("--db-url", default=None, help="statistics DB URL (default: $SPOTFLEET_DB_URL or SQLite in var)")
    p.add_argument("--list", action="store_true", help="only list the recorded runs (all-time table)")
    p.set_defaults(handler=run_cost_report)


def run_cost_report(args) -> int:
    from assets import cost_tables as ct
    from assets.cost_report import ReportSelection, build_report
    from infra.db.session import db_url
    from pipelines.commands.db_errors import require_existing_sqlite, with_db
    from pipelines.config import load_default_pipelines
    from pipelines.resources import StatsDB

    # a reader: no state folder and no database are created (reports/ only once there is one)
    var = Path(args.var_dir or os.environ.get("SPOTFLEET_VAR_DIR") or "var").resolve()
    configs = load_default_pipelines(str(Path(args.pipelines).resolve()) if args.pipelines else None)
    cfg = next((c for c in configs if c.name == args.pipeline), None) if args.pipeline else configs[0]
    if cfg is None:
        raise ValueError(f"--pipeline {args.pipeline!r} is not in the file; choose from {[c.name for c in configs]}")
    url = db_url(args.db_url or None, var, create_dir=False)
    flag = "--db-url" if args.db_url else None
    # where the URL came from, for the message: --db-url, $SPOTFLEET_DB_URL, --var-dir, default
    source = flag or (None if os.environ.get("SPOTFLEET_DB_URL") else
                      "--var-dir" if args.var_dir else None)
    require_existing_sqlite(url, source)
    stats = StatsDB(url=url, var_dir=str(var))
    eng = with_db(url, flag, stats.engine)
    data = ct.load(eng, cfg.name)
    if not data.run_ids:
        print(f"no run of pipeline {cfg.name} is recorded in {stats.resolved_url()}; run `spotfleet main` first")
        return 1
    if args.list:
        table = ct.run_summary(data)
        print(table.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
        return 0
    runs: tuple[str, ...] = ()
    if args.run:
        hits = [r for r in data.run_ids if r.startswith(args.run)]
        if not hits:
            raise ValueError(f"--run {args.run!r}: no recorded run of {cfg.name} starts with it; "
                             f"`spotfleet cost-report --list` shows them")
        runs = tuple(ct.run_group(data, hits[-1]))  # a re-execution: with its root's group, root first
    rep = build_report(eng, cfg.name, var / "reports" / cfg.name,
                       ReportSelection(runs, args.first_day, args.last_day),
                       stage_order=[s.name for s in cfg.stages], budget_usd=cfg.budget_usd,
                       budget_period=cfg.budget_period, budget_enforced=cfg.enforce_budget)
    t = rep.totals
    saved = t["savings_usd"]
    print(f"{cfg.name}, {rep.run_label}: spend ${t['spend_usd']:.2f} vs ${t['on_demand_usd']:.2f} on-demand for "
          f"the same useful work ({'savings' if saved >= 0 else 'extra cost'} ${abs(saved):.2f}, "
          + ("no percentage: too little useful work" if t["savings_pct"] != t["savings_pct"]
             else f"{abs(t['savings_pct']):.1f} %") + f"); taxes ${t['taxes_usd']:.2f}")
    if rep.time_note:  # the local fleet's sessions are on its emulated market clock
        print(rep.time_note)
    if rep.period is not None and not rep.by_day.empty:
        print(f"period {rep.period[0]} .. {rep.period[1]}: {int(rep.by_day['runs'].max())} run(s) on the busiest "
              f"day, spend ${rep.by_day['spend_usd'].sum():.2f}")
    elif rep.period is not None:  # said nothing before
        days = sorted(set(rep.table["day"])) if not rep.table.empty else []
        print(f"period {rep.period[0]} .. {rep.period[1]}: no run billed on these days; this run billed on "
              f"{', '.join(days) or 'no day'} (pick --from / --to with those days)")
    if not rep.unpriced.empty:
        import sys

        print(f"WARNING: {len(rep.unpriced)} node session(s) of this run have no price and are counted at $0 "
              f"(totals are lower bounds): {', '.join(str(x) for x in rep.unpriced['node_id'])}. "
              f"Fix: {ct.UNPRICED_FIX}", file=sys.stderr)
    print(f"all time: {len(rep.all_time)} run(s), spend ${rep.all_time['spend_usd'].sum():.2f}")
    for key in ("html", "md", "csv", "png", "by_day_csv", "all_time_csv", "focus_csv", "focus_parquet"):
        if key in rep.files:
            print(f"  {key:13} {rep.files[key]}")
    if not rep.latest:
        print(f"  (an older run's report: the top-level cost_report.* and cost_by_day.csv under "
              f"{var / 'reports' / cfg.name} still show the latest run)")
    return 0
