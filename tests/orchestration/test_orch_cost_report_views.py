"""The run, period, all-time and FOCUS views of the same charges agree (SQLite, no Dagster).

Every $ an analyst reads for a run must be the same figure in each view it appears in:
the run's report, the period table (per UTC day, every run), the all-time table (one row
per run) and the FOCUS export. Sessions are recorded through the real recorder in market
seconds (no clock conversion: provider ``skypilot``), so the expected figures are plain
price x hours.
"""

from __future__ import annotations

import datetime as dt

import pandas as pd
import pytest

from assets import cost_tables as ct
from assets import focus
from assets.cost_report import ReportSelection, build_report
from fleet.providers.base import NodeSession
from infra.db.recorder import record_attempt
from infra.db.session import make_engine, upgrade

DAY0 = 1_699_920_000.0  # 2023-11-14 00:00:00 UTC
OD_PRICE = 3.06  # on-demand $/h of p3.2xlarge


def _session(node: str, zone: str, spot: bool, price: float, start: float, hours: float) -> NodeSession:
    return NodeSession(node_id=node, stage="pretrain", attempt=1, provider="skypilot", cloud="aws",
                       region=zone[:-1], zone=zone, instance_type="p3.2xlarge", spot=spot,
                       price_per_hour=price, launched_at=start, ready_at=start + 60.0,
                       ended_at=start + hours * 3600.0, end_reason="preempted" if spot else "completed")


def _record(eng, run: str, sessions: list[NodeSession]) -> None:
    record_attempt(eng, run_id=run, pipeline="demo", stage="pretrain", attempt=1, provider="skypilot",
                   status="completed", sessions=sessions, events=[], started_at=sessions[0].launched_at,
                   ended_at=sessions[-1].ended_at, start_step=None, final_step=None, total_steps=None,
                   on_demand_price=lambda _s: OD_PRICE)


@pytest.fixture
def runs_sharing_a_day(tmp_path):
    """run-a: one spot node at $0.918/h; run-b, later the same UTC day: a spot node at $1.50/h
    in another zone, then an on-demand fallback node at $3.06/h; run-c: one spot node from
    23:30 to 00:30 UTC (it bills on two days)."""
    eng = make_engine(f"sqlite:///{tmp_path / 'stats.db'}")
    upgrade(eng)
    _record(eng, "run-a", [_session("a-n0", "us-east-1f", True, 0.918, DAY0 + 3600.0, 1.0)])
    _record(eng, "run-b", [_session("b-n0", "us-west-2b", True, 1.50, DAY0 + 4 * 3600.0, 1.0),
                           _session("b-n1", "us-west-2b", False, OD_PRICE, DAY0 + 5 * 3600.0, 1.0)])
    _record(eng, "run-c", [_session("c-n0", "us-east-1f", True, 0.918, DAY0 + 23.5 * 3600.0, 1.0)])
    return eng


def test_a_run_s_fallback_premium_is_the_same_in_every_view(runs_sharing_a_day, tmp_path):
    """run-b's on-demand node paid $3.06/h where its own spot node paid $1.50/h: a premium of
    $1.56 for its one hour, in run-b's report, in the day's period row, in its all-time row
    and in its FOCUS rows. Before, the period table and the FOCUS export priced the premium
    against the mean spot price of every run in view ((0.918 + 1.50 + 0.918) / 3 or
    (0.918 + 1.50) / 2): $1.95 or $1.85 for the same node, so the day's premium was not the
    sum of its runs' and FOCUS disagreed with the report."""
    eng = runs_sharing_a_day
    expected = (OD_PRICE - 1.50) * 1.0
    rep = build_report(eng, "demo", tmp_path / "out", ReportSelection(run_ids=("run-b",)), stage_order=["pretrain"])
    assert rep.totals["fallback_usd"] == pytest.approx(expected, rel=1e-9)
    day = dt.date(2023, 11, 14)
    row = rep.by_day.set_index("day").loc[day.isoformat()]
    assert row["runs"] == 3
    # the day's premium is the sum of the premiums of the runs that billed on it
    assert row["fallback_usd"] == pytest.approx(expected, rel=1e-9)
    all_time = ct.run_summary(ct.load(eng, "demo")).set_index("run_id")
    assert all_time.loc["run-b", "fallback_usd"] == pytest.approx(expected, rel=1e-9)
    assert all_time["fallback_usd"].sum() == pytest.approx(expected, rel=1e-9)
    frame = focus.focus_frame(ct.load(eng, "demo"))
    assert focus.validate(frame) == []
    per_run = frame.groupby("x_RunId")["x_FallbackTaxCost"].sum()
    assert per_run["run-b"] == pytest.approx(expected, rel=1e-9)
    assert per_run.sum() == pytest.approx(expected, rel=1e-9)
    # and spend / BilledCost reconcile per run in the same views
    assert frame.groupby("x_RunId")["BilledCost"].sum().to_dict() == pytest.approx(
        all_time["spend_usd"].to_dict(), rel=1e-9)
    assert rep.totals["spend_usd"] == pytest.approx(1.50 + OD_PRICE, rel=1e-9)


def _total_row(markdown: str, section: str) -> list[str]:
    part = markdown.split(section, 1)[1]
    line = next(x for x in part.splitlines() if x.startswith("| **total**"))
    return [c.strip() for c in line.strip("|").split("|")]


def test_the_period_total_counts_each_run_once(runs_sharing_a_day, tmp_path):
    """Over 2023-11-14 .. 15 three runs billed (run-c on both days). The period table's rows
    say 3 and 1 runs per day; its total row said 4 runs (the per-day counts summed)."""
    eng = runs_sharing_a_day
    rep = build_report(eng, "demo", tmp_path / "out",
                       ReportSelection(run_ids=("run-c",), first_day=dt.date(2023, 11, 14),
                                       last_day=dt.date(2023, 11, 15)),
                       stage_order=["pretrain"], write_focus=False)
    assert list(rep.by_day["runs"]) == [3, 1]
    total = _total_row(rep.markdown, "### Period:")
    assert total[1] == "**3**"
    # the $ of the total row are the sums of the days (each charge is on one day only)
    assert total[2] == f"**{rep.by_day['spend_usd'].sum():,.2f}**"
    spend = pd.Series({r: ct.for_runs(ct.load(eng, 'demo'), [r]).sessions['cost_usd'].sum()
                       for r in ("run-a", "run-b", "run-c")})
    assert rep.by_day["spend_usd"].sum() == pytest.approx(spend.sum(), rel=1e-9)
