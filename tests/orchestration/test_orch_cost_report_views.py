"""The run, period, all-time and FOCUS views of the same charges agree (SQLite, no Dagster).

Every $ an analyst reads for a run must be the same figure in each view it appears in:
the run's report, the period table (per UTC day, every run), the all-time table (one row
per run) and the FOCUS export. Sessions are recorded through the real recorder in market
seconds (no clock conversion: provider ``skypilot``), so the expected figures are plain
price x hours.
"""

from __future__ import annotations

import dataclasses
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


def _session(node: str, zone: str, spot: bool, price: float, start: float, hours: float,
             reason: str | None = None) -> NodeSession:
    return NodeSession(node_id=node, stage="pretrain", attempt=1, provider="skypilot", cloud="aws",
                       region=zone[:-1], zone=zone, instance_type="p3.2xlarge", spot=spot,
                       price_per_hour=price, launched_at=start, ready_at=start + 60.0,
                       ended_at=start + hours * 3600.0,
                       end_reason=reason or ("preempted" if spot else "completed"))


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


def _resources(eng, tmp_path) -> dict[str, object]:
    from pipelines.resources import FleetResource, StatsDB

    return {"stats_db": StatsDB(url=str(eng.url), var_dir=str(tmp_path)),
            "fleet": FleetResource(var_dir=str(tmp_path))}


def _defs(eng, tmp_path):
    from pipelines.config import EXAMPLE_PIPELINES, load_pipelines
    from pipelines.definitions import build_definitions

    return build_definitions(load_pipelines(EXAMPLE_PIPELINES), include_gfs=False,
                             resources=_resources(eng, tmp_path))


def _metadata(res, asset: str) -> dict[str, object]:
    mat = next(e.event_specific_data.materialization for e in res.all_events
               if e.event_type_value == "ASSET_MATERIALIZATION"
               and e.event_specific_data.materialization.asset_key.path[-1] == asset)
    return {k: getattr(v, "value", v) for k, v in mat.metadata.items()}


def test_the_assets_metadata_an_analyst_reads(runs_sharing_a_day, tmp_path):
    """Real Dagster (the report and the refresh jobs on the example pipeline): the cost
    report's ``spend_all_time_usd`` is the all-time sum to 4 decimals like every other $
    (it was rounded to cents: $7.31 for $7.314), and the ``preemption_stats`` table shows
    the MTTP confidence interval, with no ``nan`` / ``inf`` where the sessions of a zone saw
    no preemption or a trace has no R."""
    from dagster import AssetKey, DagsterInstance, materialize

    from pipelines.definitions import report_job_name

    eng = runs_sharing_a_day
    # a zone whose only session completed: no preemption there
    _record(eng, "run-d", [_session("d-n0", "us-east-1c", True, 0.918, DAY0 + 8 * 3600.0, 1.0, "completed")])
    defs = _defs(eng, tmp_path)
    with DagsterInstance.ephemeral() as instance:
        res = defs.resolve_job_def(report_job_name("demo")).execute_in_process(instance=instance)
        md = _metadata(res, "cost_report")
        stats_res = materialize([defs.resolve_assets_def(AssetKey(["demo", n]))
                                 for n in ("spot_market", "preemption_stats")],
                                instance=instance)
        stats_md = _metadata(stats_res, "preemption_stats")
    total = ct.run_summary(ct.load(eng, "demo"))["spend_usd"].sum()
    assert total == pytest.approx(0.918 + 1.50 + OD_PRICE + 0.918 + 0.918, rel=1e-9)
    assert md["spend_all_time_usd"] == round(total, 4)
    table = stats_md["table"]
    assert "mttp_ci90_hours" in table and "regain_mean_hours" in table
    words = table.replace("|", " ").lower().split()
    assert "nan" not in words and "inf" not in words
    assert "none in" in table  # us-east-1c's sessions: no preemption, so no MTTP point estimate


def test_a_modelled_cost_without_a_finite_value_says_why(tmp_path):
    """Each stage: six spot nodes preempted during start-up (never ready) and one that became
    ready after 30 min: lambda = 6 / 1.6 billed h = 3.75/h, R = 30 min, lambda x R = 1.875 >= 1,
    where the playbook's c_eff has no finite value. The run line said "– $ per useful hour"
    and the per-stage table "inf"; now both say there is no finite cost and why."""
    eng = make_engine(f"sqlite:///{tmp_path / 'stats.db'}")
    upgrade(eng)
    t = DAY0 + 3600.0
    for stage in ("pretrain", "finetune"):
        nodes = []
        for i in range(6):
            s = _session(f"{stage}-n{i}", "us-east-1f", True, 0.918, t, 0.1)
            nodes.append(dataclasses.replace(s, stage=stage, ready_at=None))
            t += 0.1 * 3600.0
        nodes.append(dataclasses.replace(_session(f"{stage}-n6", "us-east-1f", True, 0.918, t, 1.0, "completed"),
                                         stage=stage, ready_at=t + 1800.0))
        t += 3600.0
        record_attempt(eng, run_id="run-x", pipeline="demo", stage=stage, attempt=1, provider="skypilot",
                       status="completed", sessions=nodes, events=[], started_at=nodes[0].launched_at,
                       ended_at=nodes[-1].ended_at, start_step=None, final_step=None, total_steps=None,
                       on_demand_price=lambda _s: OD_PRICE)
    rep = build_report(eng, "demo", tmp_path / "out", ReportSelection(run_ids=("run-x",)),
                       stage_order=["pretrain", "finetune"], write_focus=False)
    obs = rep.break_even.observed
    assert obs.rate_per_hour == pytest.approx(2 * 6 / 3.2) and obs.restart_hours == pytest.approx(0.5)
    assert rep.break_even.eff_cost_per_useful_hour == float("inf")
    assert list(rep.stage_break_even["rate_per_hour"]) == pytest.approx([3.75, 3.75])
    md = rep.markdown
    assert "– $ per useful hour" not in md
    assert "no finite cost" in md and "lambda x R = 1.8" in md and ">= 1)" in md
    assert "no useful training hour was recorded" in md  # no progress events: no observed $/useful h
    section = md.split("Per stage (each stage's own", 1)[1].split("###", 1)[0]
    assert "no finite cost (lambda x R >= 1)" in section
    assert "inf" not in section.replace("|", " ").split()


def test_a_kept_run_report_says_when_its_period_and_all_time_tables_were_taken(tmp_path):
    """run-a's report is written, then run-b bills on the same day. run-a's file is kept
    (runs/run-a/), and its period / all-time tables still show one run: they must say when
    they were taken and how to rebuild them, or an analyst reads "2023-11-14: 1 run, $0.92"
    as the day's total (before: no date, nothing to do)."""
    eng = make_engine(f"sqlite:///{tmp_path / 'stats.db'}")
    upgrade(eng)
    var = tmp_path / "var"
    out = var / "reports" / "demo"
    _record(eng, "run-a", [_session("a-n0", "us-east-1f", True, 0.918, DAY0 + 3600.0, 1.0)])
    first = build_report(eng, "demo", out, ReportSelection(run_ids=("run-a",)), stage_order=["pretrain"],
                         write_focus=False, as_of=dt.datetime(2023, 11, 14, 2, 0, tzinfo=dt.UTC))
    _record(eng, "run-b", [_session("b-n0", "us-west-2b", True, 1.50, DAY0 + 4 * 3600.0, 1.0)])
    build_report(eng, "demo", out, ReportSelection(run_ids=("run-b",)), stage_order=["pretrain"],
                 write_focus=False)
    kept = (out / "runs" / "run-a" / "cost_report.md").read_text()
    assert list(first.by_day["runs"]) == [1]  # what the kept file's period table shows
    assert "### Period: 2023-11-14 (every run that billed on these days, as of 2023-11-14 02:00:00 UTC)" in kept
    assert "### All time (every recorded run of this pipeline, as of 2023-11-14 02:00:00 UTC)" in kept
    assert (f"`spotfleet cost-report --pipeline demo --run run-a --var-dir {var}` rebuilds this report"
            in kept)
    # rebuilt, the same run's own figures are unchanged and the day now has both runs
    again = build_report(eng, "demo", out, ReportSelection(run_ids=("run-a",)), stage_order=["pretrain"],
                         write_focus=False)
    assert again.totals["spend_usd"] == pytest.approx(first.totals["spend_usd"], rel=1e-12)
    assert list(again.by_day["runs"]) == [2]
    assert again.by_day["spend_usd"].sum() == pytest.approx(0.918 + 1.50, rel=1e-9)


def test_a_period_without_charges_says_which_days_to_pick(runs_sharing_a_day, tmp_path, capsys):
    """A period in which no run billed showed only "_no rows_"; it says so and names the
    days the run billed on and the options that choose the period."""
    rep = build_report(runs_sharing_a_day, "demo", tmp_path / "out",
                       ReportSelection(run_ids=("run-a",), first_day=dt.date(2030, 1, 1),
                                       last_day=dt.date(2030, 1, 2)),
                       stage_order=["pretrain"], write_focus=False)
    assert rep.by_day.empty
    section = rep.markdown.split("### Period:", 1)[1].split("### All time", 1)[0]
    assert "_no rows_" not in section
    assert "No run billed on these days" in section and "this run billed on 2023-11-14" in section
    assert "`--from` / `--to`" in section and "`first_day` / `last_day`" in section
    from pipelines.cli import main

    assert main(["cost-report", "--db-url", str(runs_sharing_a_day.url), "--var-dir", str(tmp_path / "var"),
                 "--pipeline", "demo", "--run", "run-a", "--from", "2030-01-01", "--to", "2030-01-02"]) == 0
    assert ("period 2030-01-01 .. 2030-01-02: no run billed on these days; this run billed on 2023-11-14"
            in capsys.readouterr().out)


def test_the_observed_prices_are_per_billed_hour(tmp_path):
    """Three spot hours at $0.50/h and six minutes at $2.00/h: the spot hour this run paid
    cost (1.50 + 0.20) / 3.1 = $0.548, which the report shows and the model prices with
    (the plain mean over the two sessions, $1.25/h, was shown before); on-demand likewise."""
    eng = make_engine(f"sqlite:///{tmp_path / 'stats.db'}")
    upgrade(eng)
    _record(eng, "run-p", [_session("p-n0", "us-east-1f", True, 0.50, DAY0 + 3600.0, 3.0),
                           _session("p-n1", "us-west-2b", True, 2.00, DAY0 + 5 * 3600.0, 0.1)])
    rep = build_report(eng, "demo", tmp_path / "out", ReportSelection(run_ids=("run-p",)),
                       stage_order=["pretrain"], write_focus=False)
    obs = rep.break_even.observed
    spend = rep.totals["spend_usd"]
    assert spend == pytest.approx(1.50 + 0.20, rel=1e-9)
    assert obs.spot_price == pytest.approx(spend / obs.spot_hours, rel=1e-9)
    assert obs.spot_price == pytest.approx(1.70 / 3.1, rel=1e-9)
    assert obs.on_demand_price == pytest.approx(OD_PRICE)
    assert f"spot {1.70 / 3.1:.3f} $/h" in rep.markdown


def test_a_forecast_without_sessions_says_why_it_has_no_session_update(tmp_path):
    """On an empty statistics DB the forecast's ``session_update`` metadata read "_empty_";
    it says that no zone has recorded sessions yet and when they will count."""
    from dagster import AssetKey, DagsterInstance, materialize

    eng = make_engine(f"sqlite:///{tmp_path / 'stats.db'}")
    upgrade(eng)
    defs = _defs(eng, tmp_path)
    with DagsterInstance.ephemeral() as instance:
        res = materialize([defs.resolve_assets_def(AssetKey(["demo", n]))
                           for n in ("spot_market", "preemption_stats", "preemption_forecast")], instance=instance)
    md = _metadata(res, "preemption_forecast")
    assert md["zones_updated_by_sessions"] == 0
    assert md["session_update"] != "_empty_"
    assert "no zone has recorded spot sessions yet" in md["session_update"]
    assert "nan" not in md["table"].lower().split()


def test_the_tax_rows_say_what_they_add_up_to(runs_sharing_a_day, tmp_path):
    """run-b has an on-demand fallback premium ($1.56) besides its time taxes: the Taxes
    table lists both, and summing its column gave neither the headline's Taxes nor anything
    meaningful (the premium overlaps the time taxes). The section now states the total."""
    rep = build_report(runs_sharing_a_day, "demo", tmp_path / "out", ReportSelection(run_ids=("run-b",)),
                       stage_order=["pretrain"], write_focus=False)
    tot = rep.totals
    assert tot["fallback_usd"] == pytest.approx(OD_PRICE - 1.50) and tot["taxes_usd"] > 0
    assert tot["taxes_usd"] == pytest.approx(sum(tot[f"{c}_usd"] for c in ct.TAXES))
    section = rep.markdown.split("### Taxes", 1)[1].split("###", 1)[0]
    pct = 100.0 * tot["taxes_usd"] / tot["spend_usd"]
    assert f"**${tot['taxes_usd']:,.2f}** ({pct:.1f} % of spend), the headline's Taxes" in section
    assert f"Taxes ${tot['taxes_usd']:,.2f}." in rep.markdown  # the headline
    assert f"premium (${tot['fallback_usd']:,.2f}) is part of the same hours' cost" in section


def test_the_plot_shows_every_stage_of_the_run(tmp_path):
    """A run recorded with a stage the pipeline YAML no longer names ("warmup", renamed since):
    the tables list it, and the plot dropped its bar, so the bars did not add up to the spend
    in the plot's own title. Every stage is drawn; the YAML's stages first."""
    import matplotlib.pyplot as plt

    from assets import report_render as rr

    eng = make_engine(f"sqlite:///{tmp_path / 'stats.db'}")
    upgrade(eng)
    for i, stage in enumerate(("warmup", "pretrain")):
        s = dataclasses.replace(_session(f"{stage}-n0", "us-east-1f", True, 0.918, DAY0 + (1 + 2 * i) * 3600.0,
                                         1.0), stage=stage)
        record_attempt(eng, run_id="run-w", pipeline="demo", stage=stage, attempt=1, provider="skypilot",
                       status="completed", sessions=[s], events=[], started_at=s.launched_at,
                       ended_at=s.ended_at, start_step=None, final_step=None, total_steps=None,
                       on_demand_price=lambda _s: OD_PRICE)
    rep = build_report(eng, "demo", tmp_path / "out", ReportSelection(run_ids=("run-w",)),
                       stage_order=["pretrain", "finetune"], write_focus=False)
    assert list(rep.by_stage["stage"]) == ["pretrain", "warmup"]
    fig = rr.plot_figure(rep.by_stage, rep.totals, "demo run-w", ["pretrain", "finetune"])
    try:
        ax = fig.axes[0]
        labels = [t.get_text() for t in ax.get_xticklabels()]
        # the spot bars: every patch but the on-demand ones (rr's "#264653")
        spot_height = sum(p.get_height() for p in ax.patches
                          if p.get_facecolor() != plt.matplotlib.colors.to_rgba("#264653"))
    finally:
        plt.close(fig)
    assert labels == ["pretrain", "warmup"]
    assert spot_height == pytest.approx(rep.totals["spend_usd"], rel=1e-9)


def test_the_preemption_rate_line_says_which_preemptions_were_injected(tmp_path):
    """The demo's preemptions are fault injections and a lost node group; the cost report's
    rate counts them all while the statistics and the planner count the market's only. The
    line said "(3 preemptions, lost node groups included)"; it now splits them."""
    eng = make_engine(f"sqlite:///{tmp_path / 'stats.db'}")
    upgrade(eng)
    t = DAY0 + 3600.0
    inj = dataclasses.replace(_session("i-n0", "us-east-1f", True, 0.918, t, 0.5), injected=True)
    mkt = _session("i-n1", "us-west-2b", True, 0.918, t + 1800.0, 0.5)
    done = _session("i-n2", "us-west-2b", True, 0.918, t + 3600.0, 1.0, "completed")
    _record(eng, "run-i", [inj, mkt, done])
    rep = build_report(eng, "demo", tmp_path / "out", ReportSelection(run_ids=("run-i",)),
                       stage_order=["pretrain"], write_focus=False)
    o = rep.break_even.observed
    assert (o.preemptions, o.injected, o.lost) == (2, 1, 0)
    assert o.rate_per_hour == pytest.approx(2 / 2.0)
    assert "2 preemptions: 1 by the market, 1 injected (inject_preemptions_at_steps)" in rep.markdown
    assert "the preemption statistics and the planner only the market's" in rep.markdown
