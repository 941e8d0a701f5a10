"""Cost report tables, rendering and the FOCUS 1.2 export on recorded attempts (SQLite, no Dagster).

Two runs are recorded through the real recorder (infra/db): run A has a lost first
attempt (its node group is cancelled) and a retry; run B completes with one
preemption and an on-demand fallback node. The report of each run must reconcile
with that run's node sessions, the period total must be the sum of the runs, the
first launch must not count as a restart, a lost node group counts as a preemption,
and the FOCUS export must satisfy the column rules.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json

import pandas as pd
import pytest

from assets import cost_tables as ct
from assets import focus
from assets.cost_report import ReportSelection, build_report
from checkpointing.events import Event
from fleet.providers.base import NodeSession
from fleet.providers.local.clock import MarketClock
from infra.db.recorder import record_attempt
from infra.db.session import make_engine, upgrade

T0 = 1_700_000_000.0  # unix seconds (2023-11-14 UTC)
SCALE = 120.0  # market seconds per wall second (local fleet: 30 wall s per market hour)
#: the local fleet reports its sessions and events in market time (anchored at T0)
CLOCK = MarketClock(anchor_unix=T0, factor=SCALE)


def _node(node, stage, attempt, t, first, last, ckpt, reason, zone="us-east-1f", spot=True, step_s=0.1):
    """A session and its training events: start/restore, progress, saves, (notice), exit."""
    ev = [Event("start", t + 2.0, node, {"resumed_from_step": first or None})]
    if first:
        ev.append(Event("restore", t + 2.5, node, {"step": first, "location": "x", "fell_back": False}))
    now = t + 2.5
    for s in range(first + 1, last + 1):
        now += step_s
        if s % 5 == 0 or s == last:
            ev.append(Event("progress", now, node, {"step": s, "total_steps": 100, "mean_step_seconds": step_s}))
        if s % 20 == 0:
            ev.append(Event("save_committed", now + 0.01, node, {"step": s, "kind": "periodic", "bytes": 10,
                                                                "stall_seconds": 0.05, "persist_seconds": 0.2}))
    if reason == "preempted":
        ev.append(Event("notice", now + 0.05, node, {"source": "signal"}))
    if reason != "cancelled":
        ev.append(Event("exit", now + 0.1, node, {"reason": reason, "step": last}))
    end = now + 1.0
    sess = NodeSession(node_id=node, stage=stage, attempt=attempt, provider="local", cloud="aws",
                       region=zone[:-1], zone=zone, instance_type="p3.2xlarge", spot=spot,
                       price_per_hour=0.918 if spot else 3.06, launched_at=t, ready_at=t + 1, ended_at=end,
                       end_reason=reason, notice_at=end - 0.5 if reason == "preempted" else None,
                       first_step=first, last_step=last, last_checkpoint_step=ckpt)
    return sess, ev, end


def _record(eng, run, stage, attempt, nodes, status, root=None):
    sessions = [CLOCK.session(n[0]) for n in nodes]
    events = [CLOCK.event(e) for n in nodes for e in n[1]]
    record_attempt(eng, run_id=run, root_run_id=root, pipeline="demo", stage=stage, attempt=attempt, provider="local",
                   status=status, sessions=sessions, events=events, started_at=sessions[0].launched_at,
                   ended_at=CLOCK.at(nodes[-1][2]), start_step=sessions[0].first_step,
                   final_step=100 if status == "completed" else None, total_steps=100,
                   on_demand_price=lambda s: 3.06, error=None if status == "completed" else "lost")


@pytest.fixture
def two_runs(tmp_path):
    eng = make_engine(f"sqlite:///{tmp_path / 'stats.db'}")
    upgrade(eng)
    # run A, stage pretrain: attempt 1 preempted once, then its node group is lost (cancelled)
    a1 = _node("a-n0", "pretrain", 1, T0, 0, 30, 20, "preempted")
    a2 = _node("a-n1", "pretrain", 1, a1[2] + 3, 20, 55, 40, "cancelled", zone="us-west-2b")
    _record(eng, "run-a", "pretrain", 1, [a1, a2], "failed")
    a3 = _node("a-n2", "pretrain", 2, a2[2] + 4, 40, 100, 100, "completed", zone="us-east-1c")
    _record(eng, "run-a", "pretrain", 2, [a3], "completed")
    # run B, a market hour later (30 wall s): one preemption, the rest on an on-demand node
    t = T0 + 3600 / SCALE
    b1 = _node("b-n0", "pretrain", 1, t, 0, 45, 40, "preempted", zone="us-west-2b")
    b2 = _node("b-n1", "pretrain", 1, b1[2] + 3, 40, 100, 100, "completed", spot=False)
    _record(eng, "run-b", "pretrain", 1, [b1, b2], "completed")
    return eng


def test_each_run_reconciles_and_the_period_is_their_sum(two_runs, tmp_path):
    data = ct.load(two_runs, "demo")
    assert data.run_ids == ["run-a", "run-b"]
    spend = {}
    for run in data.run_ids:
        part = ct.for_runs(data, [run])
        table = ct.cost_table(part.lines, part.sessions)
        spend[run] = table["spend_usd"].sum()
        assert spend[run] == pytest.approx(part.sessions["cost_usd"].sum(), rel=1e-9)
        assert spend[run] > 0
    day = dt.datetime.fromtimestamp(T0, dt.UTC).date()
    by_day = ct.day_summary(ct.for_days(data, day, day))
    assert list(by_day["runs"]) == [2]
    assert by_day["spend_usd"].sum() == pytest.approx(spend["run-a"] + spend["run-b"], rel=1e-9)
    all_time = ct.run_summary(data)
    assert list(all_time["run_id"]) == ["run-a", "run-b"]
    assert list(all_time["spend_usd"]) == pytest.approx([spend["run-a"], spend["run-b"]], rel=1e-9)


def test_first_launch_is_not_a_restart_and_lost_groups_are_preemptions(two_runs):
    data = ct.load(two_runs, "demo")
    run_a = ct.for_runs(data, ["run-a"])
    first = run_a.sessions[run_a.sessions["first_launch"].astype(bool)]
    assert list(first["node_id"]) == ["a-n0"]  # only the stage's first node-group launch of the run
    cats = run_a.lines.groupby("category")["dollars"].sum()
    assert cats["launch"] > 0 and cats["restart"] > 0
    launch_sessions = set(run_a.lines[run_a.lines["category"] == "launch"]["node_session_id"])
    assert launch_sessions == set(first["id"])
    hist = ct.stage_history(run_a, "pretrain")
    assert (hist.attempts, hist.lost_attempts, hist.sessions) == (2, 1, 3)
    assert hist.preemptions == 2 and hist.lost_nodes == 1  # one notice-preemption + one lost node group
    assert hist.cost_usd == pytest.approx(run_a.sessions["cost_usd"].sum())
    assert hist.zones == "us-east-1f -> us-west-2b -> us-east-1c"
    obs = ct.observed_rates(run_a.sessions, run_a.lines, run_a.checkpoints)
    assert obs.preemptions == 2
    att = ct.attempts_table(run_a, "pretrain")
    assert list(att["status"]) == ["failed", "completed"] and list(att["sessions"]) == [2, 1]


def test_a_retried_or_re_executed_stage_has_one_first_launch(tmp_path):
    """Only the stage's very first session across all attempts of a run group is its first
    launch: a step retry's first session, a re-execution run's first session (same root,
    attempt numbers start at 1 again) and any session resumed from a checkpoint are restarts."""
    eng = make_engine(f"sqlite:///{tmp_path / 'stats.db'}")
    upgrade(eng)
    # root run: attempt 1 fails before any checkpoint; attempt 2 (step retry) too, from step 0
    r1 = _node("r-n0", "pretrain", 1, T0, 0, 15, 0, "failed")
    _record(eng, "root", "pretrain", 1, [r1], "failed")
    r2 = _node("r-n1", "pretrain", 2, r1[2] + 3, 0, 15, 0, "failed")
    _record(eng, "root", "pretrain", 2, [r2], "failed")
    # re-execution run of the failed root (attempt numbers start at 1 again): no checkpoint to
    # resume, so its first node starts from step 0; preempted at 30, the next node resumes from 20
    x1 = _node("x-n0", "pretrain", 1, r2[2] + 5, 0, 30, 20, "preempted")
    x2 = _node("x-n1", "pretrain", 1, x1[2] + 3, 20, 100, 100, "completed", zone="us-west-2b")
    _record(eng, "reexec", "pretrain", 1, [x1, x2], "completed")
    data = ct.load(eng, "demo", root_of={"root": "root", "reexec": "root"})
    first = data.sessions[data.sessions["first_launch"].astype(bool)]
    assert list(first["node_id"]) == ["r-n0"]
    launch_ids = set(data.lines[data.lines["category"] == "launch"]["node_session_id"])
    assert launch_ids == set(first["id"])
    restart = data.lines[data.lines["category"] == "restart"].groupby("node_session_id")["dollars"].sum()
    by_node = dict(zip(data.sessions["id"], data.sessions["node_id"], strict=True))
    assert {by_node[i] for i in restart.index if restart[i] > 0} == {"r-n1", "x-n0", "x-n1"}
    # without the root mapping the re-execution is its own run: its fresh first node is its first
    # launch, but the node that resumed from step 20 (first_step > 0) never is
    alone = ct.load(eng, "demo")
    assert list(alone.sessions[alone.sessions["first_launch"].astype(bool)]["node_id"]) == ["r-n0", "x-n0"]
    # the report of the run group (root first) counts one first launch
    rep = build_report(eng, "demo", tmp_path / "out", ReportSelection(run_ids=("root", "reexec")),
                       stage_order=["pretrain"], write_focus=False)
    assert rep.totals["launch_usd"] == pytest.approx(float(data.lines.loc[
        data.lines["category"] == "launch", "dollars"].sum()), rel=1e-9)
    assert rep.totals["restart_usd"] > 0


def test_a_re_execution_dated_on_its_own_clock_keeps_the_root_s_first_launch(tmp_path):
    """Each run's market clock starts at its own start, so a re-execution's node may be dated
    before the root's last one (the root ran ahead in compressed time). The first launch is
    still the root's: runs are ordered by their attempts' start (wall clock)."""
    eng = make_engine(f"sqlite:///{tmp_path / 'stats.db'}")
    upgrade(eng)
    r1 = _node("r-n0", "pretrain", 1, T0 + 600, 0, 30, 20, "preempted")
    _record(eng, "root-run", "pretrain", 1, [r1], "failed")
    x1 = _node("x-n0", "pretrain", 1, T0 + 300, 20, 100, 100, "completed")  # dated earlier
    sessions = [CLOCK.session(x1[0])]
    record_attempt(eng, run_id="reexec-run", root_run_id="root-run", pipeline="demo", stage="pretrain",
                   attempt=1, provider="local", status="completed", sessions=sessions,
                   events=[CLOCK.event(e) for e in x1[1]], started_at=CLOCK.at(T0 + 600) + 10_000,
                   ended_at=CLOCK.at(x1[2]) + 10_000, start_step=20, final_step=100, total_steps=100,
                   on_demand_price=lambda s: 3.06)
    data = ct.load(eng, "demo")
    assert data.sessions.set_index("node_id").loc["x-n0", "launched_at"] < data.sessions.set_index(
        "node_id").loc["r-n0", "launched_at"]
    first = data.sessions[data.sessions["first_launch"].astype(bool)]
    assert list(first["node_id"]) == ["r-n0"]
    assert ct.stage_history(data, "pretrain").zones == "us-east-1f -> us-east-1f"
    assert list(ct.for_runs(data, ["root-run", "reexec-run"]).sessions.sort_values(
        ["launch_order", "launched_at"])["node_id"]) == ["r-n0", "x-n0"]


def test_the_cli_report_of_a_re_execution_covers_its_root_group(tmp_path, capsys):
    """The DB stores each attempt's root run (migration 0004): `spotfleet cost-report --run
    <re-execution>` reports the whole run group, root first, with ONE first launch, the same
    as the Dagster asset; an unrelated later run stays out of it."""
    from pipelines.cli import main

    eng = make_engine(f"sqlite:///{tmp_path / 'stats.db'}")
    upgrade(eng)
    r1 = _node("r-n0", "pretrain", 1, T0, 0, 15, 0, "failed")
    _record(eng, "root-run", "pretrain", 1, [r1], "failed")
    x1 = _node("x-n0", "pretrain", 1, r1[2] + 5, 0, 30, 20, "preempted")  # no checkpoint to resume: step 0
    x2 = _node("x-n1", "pretrain", 1, x1[2] + 3, 20, 100, 100, "completed", zone="us-west-2b")
    _record(eng, "reexec-run", "pretrain", 1, [x1, x2], "completed", root="root-run")
    o1 = _node("o-n0", "pretrain", 1, x2[2] + 9, 0, 100, 100, "completed")
    _record(eng, "other-run", "pretrain", 1, [o1], "completed")
    data = ct.load(eng, "demo")  # no root_of given: the stored roots
    assert ct.run_group(data, "reexec-run") == ct.run_group(data, "root-run") == ["root-run", "reexec-run"]
    assert ct.run_group(data, "other-run") == ["other-run"]
    first = data.sessions[data.sessions["first_launch"].astype(bool)]
    assert list(first["node_id"]) == ["r-n0", "o-n0"]  # the re-execution's fresh node is a restart

    var = tmp_path / "var"
    listed = ct.run_summary(data)
    assert list(zip(listed["run_id"], listed["root_run_id"], strict=True)) == [
        ("root-run", "root-run"), ("reexec-run", "root-run"), ("other-run", "other-run")]
    assert main(["cost-report", "--db-url", str(eng.url), "--var-dir", str(var), "--pipeline", "demo",
                 "--run", "reexec"]) == 0
    out = capsys.readouterr().out
    group = ct.for_runs(data, ["root-run", "reexec-run"])
    assert f"demo, run root-run, reexec-r: spend ${group.sessions['cost_usd'].sum():.2f}" in out
    report = var / "reports" / "demo" / "runs" / "root-run" / "cost_report.csv"  # the root names the folder
    table = pd.read_csv(report)
    assert table["spend_usd"].sum() == pytest.approx(group.sessions["cost_usd"].sum(), rel=1e-9)
    launch = group.lines[group.lines["category"] == "launch"]
    assert set(launch["node_session_id"]) == set(first[first["node_id"] == "r-n0"]["id"])
    assert table["launch_usd"].sum() == pytest.approx(launch["dollars"].sum(), rel=1e-9)


def test_the_report_of_an_older_run_leaves_the_latest_copies_alone(tmp_path, capsys):
    """`spotfleet cost-report --run <older run>` writes that run's report into its own folder
    only: the top-level `cost_report.*` / `cost_by_day.csv` (the README's "latest report")
    keep the latest run's. Until 2026-11-28 they were overwritten with the older run's."""
    from pipelines.cli import main

    eng = make_engine(f"sqlite:///{tmp_path / 'stats.db'}")
    upgrade(eng)
    a1 = _node("a-n0", "pretrain", 1, T0, 0, 100, 100, "completed")
    _record(eng, "older-run", "pretrain", 1, [a1], "completed")
    b1 = _node("b-n0", "pretrain", 1, a1[2] + 86_400 * 2, 0, 40, 40, "completed")  # two days later
    _record(eng, "newer-run", "pretrain", 1, [b1], "completed")
    var = tmp_path / "var"
    top = var / "reports" / "demo"
    args = ["cost-report", "--db-url", str(eng.url), "--var-dir", str(var), "--pipeline", "demo"]
    assert main(args) == 0  # the latest run: the top-level copies
    capsys.readouterr()
    latest_md = (top / "cost_report.md").read_text()
    latest_days = (top / "cost_by_day.csv").read_text()
    assert "run newer-ru" in latest_md.splitlines()[0]
    assert main([*args, "--run", "older"]) == 0
    out = capsys.readouterr().out
    assert "run older-ru" in (top / "runs" / "older-run" / "cost_report.md").read_text().splitlines()[0]
    assert (top / "runs" / "older-run" / "cost_by_day.csv").read_text() != latest_days  # its own period
    assert (top / "cost_report.md").read_text() == latest_md
    assert (top / "cost_by_day.csv").read_text() == latest_days
    assert "still show the latest run" in out
    assert str(top / "runs" / "older-run" / "cost_by_day.csv") in out


def test_the_checks_of_a_re_execution_evaluate_its_run_group(tmp_path, demo_checks):
    """The checks job (no training in it) evaluates the latest recorded run WITH its run group:
    here the latest run is a re-execution that is not in the Dagster instance, so the group
    comes from the roots the DB stored (migration 0004). Before, the checks evaluated the
    re-execution alone (its sessions without the root's)."""
    eng = make_engine(f"sqlite:///{tmp_path / 'stats.db'}")
    upgrade(eng)
    o1 = _node("o-n0", "pretrain", 1, T0, 0, 100, 100, "completed")
    _record(eng, "other-run", "pretrain", 1, [o1], "completed")
    r1 = _node("r-n0", "pretrain", 1, o1[2] + 9, 0, 15, 0, "failed")
    _record(eng, "root-run", "pretrain", 1, [r1], "failed")
    x1 = _node("x-n0", "pretrain", 1, r1[2] + 5, 0, 100, 100, "completed")
    _record(eng, "reexec-run", "pretrain", 1, [x1], "completed", root="root-run")
    data = ct.load(eng, "demo")
    assert ct.latest_run(data) == "reexec-run"
    group = ct.for_runs(data, ["root-run", "reexec-run"])

    res, outcomes = demo_checks(str(eng.url))
    assert res.success
    rec = outcomes[("cost_report", "cost_reconciles_with_node_sessions")]
    assert rec.passed is True and rec.metadata["run"].value == "root-run, reexec-r"
    assert rec.metadata["run_node_sessions_usd"].value == pytest.approx(group.sessions["cost_usd"].sum(), abs=1e-6)
    assert rec.metadata["run_node_sessions_usd"].value > round(
        float(ct.for_runs(data, ["reexec-run"]).sessions["cost_usd"].sum()), 6)  # not the re-execution alone


def test_latest_checkpoint_recent_measures_training_after_the_checkpoint_not_the_clock(tmp_path, demo_checks):
    """A re-execution that resumed at the final step and trained nothing, two market days after
    its root: no work is behind the checkpoint (before: session end minus the checkpoint's
    commit, 48 h across the gap, failed). Training past the checkpoint still counts."""
    eng = make_engine(f"sqlite:///{tmp_path / 'stats.db'}")
    upgrade(eng)
    r1 = _node("r-n0", "pretrain", 1, T0, 0, 100, 100, "completed")
    _record(eng, "root-run", "pretrain", 1, [r1], "completed")
    later = T0 + 2 * 86400 / SCALE  # wall seconds: two market days later
    x1 = _node("x-n0", "pretrain", 1, later, 100, 100, 100, "completed")
    _record(eng, "reexec-run", "pretrain", 1, [x1], "completed", root="root-run")
    res, outcomes = demo_checks(str(eng.url))
    rec = outcomes[("train_pretrain", "latest_checkpoint_recent")]
    assert rec.metadata["run"].value == "root-run, reexec-r"
    assert rec.passed is True and rec.metadata["hours_behind"].value == 0.0
    assert rec.metadata["latest_checkpoint_step"].value == 100

    # a node that trained 19 steps of 2 wall s (x 120: ~1.3 market h) after its step-20 save fails
    data = ct.load(eng, "demo")
    slow = _node("s-n0", "pretrain", 1, later + 60, 0, 39, 20, "preempted", step_s=2.0)
    _record(eng, "slow-run", "pretrain", 1, [slow], "failed")
    run = ct.for_runs(ct.load(eng, "demo"), ["slow-run"])
    step, behind = ct.work_after_checkpoint(run.sessions, run.checkpoints)
    # from the commit (0.01 s after step 20) to the session end (1 s after step 39)
    assert step == 20 and behind == pytest.approx((19 * 2.0 + 1.0 - 0.01) * SCALE / 3600, rel=1e-6)
    assert behind > 1.0
    group = ct.for_runs(data, ["root-run", "reexec-run"])
    assert ct.work_after_checkpoint(group.sessions, group.checkpoints) == (100, 0.0)


def test_fallback_premium_and_observed_vs_modelled_cost(two_runs):
    data = ct.load(two_runs, "demo")
    run_b = ct.for_runs(data, ["run-b"])
    table = ct.cost_table(run_b.lines, run_b.sessions)
    od = run_b.sessions[~run_b.sessions["spot"].astype(bool)]
    expected = float(((3.06 - 0.918) * od["billed_hours"]).sum())
    assert table["fallback_usd"].sum() == pytest.approx(expected, rel=1e-9)
    be = ct.break_even(ct.observed_rates(run_b.sessions, run_b.lines, run_b.checkpoints))
    useful_h = run_b.lines[run_b.lines["category"] == "useful"]["seconds"].sum() / 3600
    assert be.observed_cost_per_useful_hour == pytest.approx(table["spend_usd"].sum() / useful_h)
    assert be.observed_cost_per_useful_hour != pytest.approx(be.eff_cost_per_useful_hour)


def test_budget_status_per_run_and_per_day(two_runs):
    data = ct.load(two_runs, "demo")
    a = ct.budget_status(data, 1.0, "run", ["run-a"])
    b = ct.budget_status(data, 1.0, "run", ["run-b"])
    day = ct.budget_status(data, 1.0, "day", day=dt.datetime.fromtimestamp(T0, dt.UTC).date())
    assert day.spend_usd == pytest.approx(a.spend_usd + b.spend_usd)
    assert a.period == "run run-a" and day.period.startswith("day 2023-11-14")
    assert ct.budget_status(data, a.spend_usd / 2, "run", ["run-a"]).within is False


def test_the_day_budget_judges_the_day_the_run_billed_on_as_the_report_does(two_runs, tmp_path):
    """``budget_period: day`` without a day: the last UTC day the run billed on, the day the
    report of that run judges; before, the check judged today's wall-clock day ($0 here)."""
    data = ct.load(two_runs, "demo")
    both = ct.budget_status(data, 1.0, "run", ["run-a"]).spend_usd + ct.budget_status(
        data, 1.0, "run", ["run-b"]).spend_usd
    check = ct.budget_status(data, 1.0, "day", ["run-a"])
    assert check.period == "day 2023-11-14" and check.spend_usd == pytest.approx(both)
    rep = build_report(two_runs, "demo", tmp_path / "out", ReportSelection(run_ids=("run-a",)),
                       stage_order=["pretrain"], budget_usd=1.0, budget_period="day", write_focus=False)
    assert (rep.budget.period, rep.budget.spend_usd) == (check.period, pytest.approx(check.spend_usd))
    # nothing billed yet (a launch): today
    assert ct.budget_status(data, 1.0, "day", []).period == f"day {dt.datetime.now(dt.UTC).date().isoformat()}"


def test_no_savings_percentage_on_a_tiny_on_demand_equivalent(two_runs, tmp_path, capsys):
    """A run with ~$0.0001 of useful work: its all-time row, its report and the CLI give no
    percentage (before: savings like -130751.6 % from a near-zero denominator)."""
    from pipelines.cli import main

    t = T0 + 7200 / SCALE
    ev = [Event("start", t + 2.0, "t-n0", {"resumed_from_step": None}),
          Event("progress", t + 2.001, "t-n0", {"step": 1, "total_steps": 1, "mean_step_seconds": 0.001}),
          Event("save_committed", t + 2.001, "t-n0", {"step": 1, "kind": "periodic", "bytes": 10,
                                                      "stall_seconds": 0.0, "persist_seconds": 0.0}),
          Event("exit", t + 2.002, "t-n0", {"reason": "completed", "step": 1})]
    sess = NodeSession(node_id="t-n0", stage="pretrain", attempt=1, provider="local", cloud="aws",
                       region="us-east-1", zone="us-east-1f", instance_type="p3.2xlarge", spot=True,
                       price_per_hour=0.918, launched_at=t, ready_at=t + 1, ended_at=t + 3.0,
                       end_reason="completed", first_step=0, last_step=1, last_checkpoint_step=1)
    _record(two_runs, "tiny-run", "pretrain", 1, [(sess, ev, t + 3.0)], "completed")
    data = ct.load(two_runs, "demo")
    rows = ct.run_summary(data).set_index("run_id")
    assert 0 < rows.loc["tiny-run", "on_demand_usd"] < ct.MIN_PCT_BASE_USD
    assert rows.loc["tiny-run", "spend_usd"] > 100 * rows.loc["tiny-run", "on_demand_usd"]
    assert pd.isna(rows.loc["tiny-run", "savings_pct"])
    assert not pd.isna(rows.loc["run-a", "savings_pct"])  # a real run keeps its percentage
    rep = build_report(two_runs, "demo", tmp_path / "out", ReportSelection(run_ids=("tiny-run",)),
                       stage_order=["pretrain"], write_focus=False)
    assert pd.isna(rep.totals["savings_pct"]) and rep.table["savings_pct"].isna().all()
    assert "too little useful work for a meaningful comparison" in rep.markdown
    assert not any(len(w) > 6 and w.lstrip("-").replace(".", "").isdigit() and "." in w
                   and abs(float(w)) > 1000 for w in rep.markdown.replace("|", " ").split())
    assert main(["cost-report", "--db-url", str(two_runs.url), "--var-dir", str(tmp_path / "var"),
                 "--pipeline", "demo", "--run", "tiny-run"]) == 0
    assert "no percentage: too little useful work" in capsys.readouterr().out


def test_rendered_report_files(two_runs, tmp_path):
    out = tmp_path / "reports" / "demo"
    rep = build_report(two_runs, "demo", out, ReportSelection(run_ids=("run-a",)), stage_order=["pretrain"],
                       budget_usd=40.0)
    run_dir = out / "runs" / "run-a"
    for name in ("cost_report.html", "cost_report.md", "cost_report.csv", "cost_report.png"):
        assert (run_dir / name).stat().st_size > 100
        assert not (out / name).exists()  # run-a is not the latest run: no top-level copy
    assert not rep.latest
    latest = build_report(two_runs, "demo", out, ReportSelection(run_ids=("run-b",)), stage_order=["pretrain"])
    assert latest.latest and (out / "cost_report.md").read_text() == (out / "runs" / "run-b" / "cost_report.md"
                                                                      ).read_text()
    assert rep.reconcile[0] == pytest.approx(rep.reconcile[1], rel=1e-9)
    html = (run_dir / "cost_report.html").read_text()
    assert "<table>" in html and "<th>" in html and "###" not in html and "**" not in html
    assert "Spend ($)" in html and "spend_usd" not in html  # readable headers
    assert "us\u2011east\u20111f" in html and "white-space: nowrap" in html  # zones do not break at hyphens
    assert "data:image/png;base64," in html
    md = (run_dir / "cost_report.md").read_text()
    for section in ("### Per stage", "### Per zone", "### Taxes", "observed", "modelled", "### Period",
                    "### All time"):
        assert section in md
    all_time = pd.read_csv(out / "cost_all_time.csv")
    assert len(all_time) == 2  # the all-time table is separate and lists both runs
    assert rep.totals["spend_usd"] == pytest.approx(all_time.loc[all_time["run_id"] == "run-a", "spend_usd"].iloc[0])


def test_the_plot_legend_lists_only_the_run_s_non_zero_categories(two_runs):
    """Run A (no elastic stage, no on-demand node) has no membership $: the plot neither
    stacks nor lists it; every category with $ is listed, then the on-demand bar."""
    import matplotlib.pyplot as plt

    from assets import report_render as rr

    run = ct.for_runs(ct.load(two_runs, "demo"), ["run-a"])
    table = ct.cost_table(run.lines, run.sessions)
    by_stage, tot = ct.subtotals(table, "stage"), ct.totals(table)
    nonzero = [c for c in ct.CATEGORIES if tot[f"{c}_usd"] > 0]
    assert "membership" not in nonzero and {"useful", "restart", "redo"} <= set(nonzero)
    assert rr.plotted_categories(by_stage) == nonzero
    fig = rr.plot_figure(by_stage, tot, "demo run-a", ["pretrain"])
    try:
        labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    finally:
        plt.close(fig)
    assert labels == [f"spot: {c}" for c in nonzero] + ["on-demand, same useful work"]
    # any category that is zero for every stage of the run is dropped, whichever it is
    assert rr.plotted_categories(by_stage.assign(useful_usd=0.0)) == [c for c in nonzero if c != "useful"]


def test_focus_export_satisfies_the_column_rules(two_runs, tmp_path):
    data = ct.load(two_runs, "demo")
    frame = focus.focus_frame(data)
    assert len(frame) == len(data.sessions)  # every session lies within one UTC day here
    assert focus.validate(frame) == []
    billed, sessions = focus.reconcile(frame, data)
    assert billed == pytest.approx(sessions, rel=1e-9)
    assert set(frame["PricingCategory"]) == {"Dynamic", "Standard"}
    assert not frame["x_Unpriced"].any()  # every session here has a price
    assert (frame.loc[frame["PricingCategory"] == "Standard", "x_FallbackTaxCost"] > 0).all()
    assert frame["ListCost"].sum() > frame["BilledCost"].sum()  # spot below the on-demand list price
    assert json.loads(frame["Tags"].iloc[0])["pipeline"] == "demo"
    files = focus.write_focus(frame, tmp_path / "focus" / "cost")
    back = focus.read_focus_csv(files["focus_csv"])
    assert focus.validate(back) == []
    assert back["BilledCost"].sum() == pytest.approx(billed, rel=1e-12)
    if "focus_parquet" in files:
        pq = pd.read_parquet(files["focus_parquet"])
        assert str(pq["ChargePeriodStart"].dtype).startswith("datetime64") and len(pq) == len(frame)


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda f: f.drop(columns=["BilledCost"]), "BilledCost: mandatory"),
    (lambda f: f.assign(ChargeCategory="Spot"), "ChargeCategory: ['Spot'] not among"),
    (lambda f: f.assign(PricingCategory="Spot"), "PricingCategory: ['Spot'] not among"),
    (lambda f: f.assign(PricingCategory=None), "PricingCategory: must not be null"),
    (lambda f: f.assign(ChargePeriodEnd=f["ChargePeriodStart"]), "ChargePeriodStart must be before"),
    (lambda f: f.assign(ChargePeriodStart="2023-11-14 22:13:20"), "ChargePeriodStart: must be ISO 8601"),
    (lambda f: f.assign(BilledCost=None), "BilledCost: must not be null"),
    (lambda f: f.assign(ListCost=f["ListCost"] * 1.01), "ListCost: must equal ListUnitPrice x PricingQuantity"),
    (lambda f: f.assign(x_RedoTaxCost=f["x_RedoTaxCost"] + 0.5), "must equal BilledCost"),
    (lambda f: f.assign(x_MembershipTaxCost=f["x_MembershipTaxCost"] + 0.5), "must equal BilledCost"),
    (lambda f: f.drop(columns=["x_MembershipTaxCost"]), "x_MembershipTaxCost: missing from the x_ cost split"),
    (lambda f: f.assign(BillingCurrency="usd"), "ISO 4217"),
    (lambda f: f.assign(MyColumn=1), "MyColumn: not a FOCUS 1.2 column"),
    (lambda f: f.assign(Tags="pipeline=demo"), "Tags: must be a JSON object"),
    (lambda f: f.assign(BillingPeriodEnd="2023-11-01T00:00:00Z"), "within BillingPeriodStart/End"),
    (lambda f: f.assign(x_Unpriced=True), "x_Unpriced: true on"),
])
def test_focus_validator_catches_each_rule(two_runs, mutate, message):
    frame = focus.focus_frame(ct.load(two_runs, "demo"))
    problems = focus.validate(mutate(frame.copy()))
    assert any(message in p for p in problems), problems


def test_training_job_plans_no_check_and_the_checks_job_has_them_all():
    """A check planned in a run whose upstream step fails shows as "execution failed" (red) in
    Dagster although it never ran: checks live in <pipeline>__checks, not in the training job.
    spotfleet main's <pipeline>__main plans the graph AND every check (one run; after a failed
    run spotfleet main runs <pipeline>__report_and_checks, whose outcome becomes the latest)."""
    from pipelines.config import EXAMPLE_PIPELINES, load_pipelines
    from pipelines.definitions import (
        build_definitions,
        checks_job_name,
        main_job_name,
        pipeline_job_name,
        report_job_name,
    )

    defs = build_definitions(load_pipelines(EXAMPLE_PIPELINES), include_gfs=False)
    train = defs.resolve_job_def(pipeline_job_name("demo"))
    assert train.asset_layer.asset_graph.asset_check_keys == set()
    every = {(k.asset_key.path[-1], k.name) for cd in defs.asset_checks for k in cd.check_keys}
    for name in (checks_job_name("demo"), report_job_name("demo"), main_job_name("demo")):
        keys = defs.resolve_job_def(name).asset_layer.asset_graph.asset_check_keys
        assert {(k.asset_key.path[-1], k.name) for k in keys} == every
    assert {("cost_report", "cost_reconciles_with_node_sessions"), ("cost_report", "within_budget"),
            ("train_pretrain", "latest_checkpoint_recent")} <= every
    main_assets = {k.path[-1] for k in defs.resolve_job_def(main_job_name("demo")).asset_layer.executable_asset_keys}
    assert main_assets == {k.path[-1] for k in train.asset_layer.executable_asset_keys}  # the same graph


def test_a_check_with_missing_input_is_skipped_not_failed(tmp_path):
    """With nothing recorded, the cost and checkpoint checks emit no result: Dagster resolves them
    as SKIPPED (grey in the UI), never as passed (green) or failed (red); the reason is logged."""
    import asyncio

    from dagster import AssetCheckKey, AssetKey, DagsterInstance
    from dagster._core.loader import LoadingContextForTest
    from dagster._core.storage.asset_check_execution_record import (
        AssetCheckExecutionResolvedStatus as S,
    )

    from pipelines.commands.main_report import SkippedCheck, check_line, check_outcomes
    from pipelines.config import EXAMPLE_PIPELINES, load_pipelines
    from pipelines.definitions import build_definitions, checks_job_name
    from pipelines.resources import FleetResource, StatsDB

    stats = StatsDB(url=f"sqlite:///{tmp_path / 'empty.db'}", var_dir=str(tmp_path))
    defs = build_definitions(load_pipelines(EXAMPLE_PIPELINES), include_gfs=False,
                             resources={"stats_db": stats, "fleet": FleetResource(var_dir=str(tmp_path))})
    job = defs.resolve_job_def(checks_job_name("demo"))
    with DagsterInstance.ephemeral() as instance:
        res = job.execute_in_process(instance=instance)
        outcomes = {(c.asset_key.path[-1], c.check_name): c for c in check_outcomes(instance, res)}
        status = {}
        for asset, name in outcomes:
            key = AssetCheckKey(AssetKey(["demo", asset]), name)
            rec = instance.event_log_storage.get_asset_check_execution_history(key, limit=1)[0]
            status[(asset, name)] = asyncio.run(rec.resolve_status(LoadingContextForTest(instance)))
    assert res.success and len(outcomes) == 5, outcomes
    assert status.pop(("preemption_stats", "enough_samples")) == S.SUCCEEDED  # the market itself is there
    assert outcomes.pop(("preemption_stats", "enough_samples")).passed is True
    assert set(status.values()) == {S.SKIPPED}, status
    for key, c in outcomes.items():
        assert isinstance(c, SkippedCheck) and c.passed is None, key
    assert outcomes[("cost_report", "within_budget")].why == "no spend recorded for demo yet"
    assert check_line(outcomes[("train_finetune", "latest_checkpoint_recent")]) == (
        "  check demo/train_finetune:latest_checkpoint_recent: skipped (stage finetune has no node session "
        "in run none (it did not run))")


def test_summary_lines_name_this_run_and_print_no_nan(two_runs, tmp_path, capsys):
    """`spotfleet main`'s stage lines: the whole stage of THIS run; a stage that did not finish
    prints '-' (never 'nan'), a run without a report says so instead of an older run's path."""
    from types import SimpleNamespace

    from pipelines.commands.main_report import print_report_paths, print_stage_summary

    cfg = SimpleNamespace(name="demo", stages=[SimpleNamespace(name="pretrain"), SimpleNamespace(name="finetune")])
    stats = SimpleNamespace(engine=lambda: two_runs)
    print_stage_summary(cfg, stats, "run-a")
    print_report_paths(cfg, tmp_path, "run-a")
    out = capsys.readouterr().out
    assert "pretrain: 2 attempt(s) (failed, completed, 1 lost), 3 node session(s), 2 preemption(s)" in out
    assert "zones us-east-1f -> us-west-2b -> us-east-1c" in out and "final step 100" in out
    assert "finetune: not run" in out
    assert "cost report: none for run run-a" in out and "nan" not in out


def test_budget_enforced_before_launch_and_warned_otherwise(two_runs):
    from types import SimpleNamespace

    from dagster import Failure, build_asset_context

    from assets.cost_assets import check_budget_before_launch

    cfg = SimpleNamespace(name="demo", budget_usd=1.0, budget_period="run", enforce_budget=True)
    # as a context manager: its ephemeral Dagster instance is disposed here; a bare context was
    # disposed by its __del__ during the final garbage collection at interpreter exit, after its
    # in-memory SQLite connection was closed ("sqlite3.ProgrammingError: Cannot operate on a
    # closed database" printed twice after the test run)
    with build_asset_context() as ctx:
        # run-a spent ~$0.70: another $0.20 fits, $0.50 does not
        check_budget_before_launch(ctx, cfg, "finetune", two_runs, 0.20, ["run-a"])
        with pytest.raises(Failure) as exc:
            check_budget_before_launch(ctx, cfg, "finetune", two_runs, 0.50, ["run-a"])
        msg = exc.value.description
        assert "stage finetune would exceed the budget of pipeline demo" in msg and "NOT launched" in msg
        assert "budget_usd $1.00" in msg and "run run-a" in msg
        assert exc.value.allow_retries is False
        # per day: the spend of every run on the day this run billed on (run-a and run-b, 2023-11-14)
        spent = ct.budget_status(ct.load(two_runs, "demo"), 1.5, "day", ["run-a"]).spend_usd
        day = SimpleNamespace(name="demo", budget_usd=spent + 1.0, budget_period="day", enforce_budget=True)
        check_budget_before_launch(ctx, day, "finetune", two_runs, 0.9, ["run-a"])
        with pytest.raises(Failure) as exc:
            check_budget_before_launch(ctx, day, "finetune", two_runs, 1.1, ["run-a"])
        assert f"spend so far ${spent:.2f} in day 2023-11-14 " in exc.value.description
        warn = SimpleNamespace(name="demo", budget_usd=1.0, budget_period="run", enforce_budget=False)
        check_budget_before_launch(ctx, warn, "finetune", two_runs, 0.50, ["run-a"])  # warns only


def test_cost_report_cli_any_run_and_period(two_runs, tmp_path, capsys):
    from pipelines.cli import main

    url = str(two_runs.url)
    common = ["--db-url", url, "--var-dir", str(tmp_path / "var"), "--pipeline", "demo"]
    assert main(["cost-report", *common, "--list"]) == 0
    listed = capsys.readouterr().out
    assert "run-a" in listed and "run-b" in listed
    assert main(["cost-report", *common, "--run", "run-b", "--from", "2023-11-14", "--to", "2023-11-14"]) == 0
    out = capsys.readouterr().out
    data = ct.for_runs(ct.load(two_runs, "demo"), ["run-b"])
    assert f"demo, run run-b: spend ${data.sessions['cost_usd'].sum():.2f}" in out
    assert "period 2023-11-14 .. 2023-11-14: 2 run(s)" in out
    assert (tmp_path / "var" / "reports" / "demo" / "runs" / "run-b" / "cost_report.html").exists()
    assert main(["cost-report", *common, "--run", "nope"]) == 2
    assert "no recorded run of demo starts with it" in capsys.readouterr().err


@pytest.mark.parametrize("how", ["--db-url", "--var-dir"])
def test_cost_report_on_a_missing_database_creates_nothing(tmp_path, capsys, monkeypatch, how):
    """Until 2026-11-27 it created (and migrated) an empty SQLite file there, and the var
    folder, then said "no run ... recorded"."""
    from pipelines.cli import main

    for k in ("SPOTFLEET_DB_URL", "SPOTFLEET_VAR_DIR"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.chdir(tmp_path)
    missing = tmp_path / "nowhere" / "spotfleet.db"
    args = (["--db-url", f"sqlite:///{missing}"] if how == "--db-url"
            else ["--var-dir", str(missing.parent)])
    assert main(["cost-report", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"spotfleet cost-report: error: statistics DB {missing} does not exist")
    assert f"from {how}" in err and "nothing was created" in err and "spotfleet main" in err
    assert list(tmp_path.iterdir()) == []  # no database, no var folder, no reports


def test_the_cost_report_asset_reports_the_selected_run_and_period(two_runs, tmp_path):
    """The asset's config is the run / period selector: run_id (prefix) + first_day/last_day."""
    from dagster import DagsterInstance

    from pipelines.config import EXAMPLE_PIPELINES, load_pipelines
    from pipelines.definitions import build_definitions, report_job_name
    from pipelines.resources import FleetResource, StatsDB

    stats = StatsDB(url=str(two_runs.url), var_dir=str(tmp_path))
    defs = build_definitions(load_pipelines(EXAMPLE_PIPELINES), include_gfs=False,
                             resources={"stats_db": stats, "fleet": FleetResource(var_dir=str(tmp_path))})
    job = defs.resolve_job_def(report_job_name("demo"))
    config = {"ops": {"demo__cost_report": {"config": {"run_id": "run-a", "first_day": "2023-11-14",
                                                        "last_day": "2023-11-14"}}}}
    with DagsterInstance.ephemeral() as instance:
        res = job.execute_in_process(instance=instance, run_config=config)
    table = res.output_for_node("demo__cost_report")
    data = ct.load(two_runs, "demo")
    assert table["spend_usd"].sum() == pytest.approx(ct.for_runs(data, ["run-a"]).sessions["cost_usd"].sum())
    mat = next(e.event_specific_data.materialization for e in res.all_events
               if e.event_type_value == "ASSET_MATERIALIZATION")
    md = {k: getattr(v, "value", v) for k, v in mat.metadata.items()}
    assert md["run"] == "run-a" and md["period"] == "2023-11-14 .. 2023-11-14"
    assert md["period_spend_usd"] == pytest.approx(data.sessions["cost_usd"].sum(), abs=1e-4)  # both runs
    assert md["runs_all_time"] == 2 and md["plot"].startswith("![demo cost per stage](data:image/png;base64,")
    assert md["spend_usd"] == round(md["spend_usd"], 4)
    evals = {e.event_specific_data.check_name: e.event_specific_data.passed for e in res.all_events
             if e.event_type_value == "ASSET_CHECK_EVALUATION"}
    assert evals["cost_reconciles_with_node_sessions"] is True
    bad = {"ops": {"demo__cost_report": {"config": {"run_id": "nope"}}}}
    with DagsterInstance.ephemeral() as instance:
        failed = job.execute_in_process(instance=instance, run_config=bad, raise_on_error=False)
    err = next(e for e in failed.all_events if e.event_type_value == "STEP_FAILURE")
    assert "no recorded run 'nope'" in err.event_specific_data.error.message


def test_after_a_failed_training_run_the_sensor_runs_report_and_checks(tmp_path):
    """A check planned in a FAILED run resolves as "execution failed" in Dagster 1.13; the run-failure
    sensor then requests <pipeline>__report_and_checks, whose checks on the stages that did not run
    resolve as SKIPPED and become the checks' latest execution (not for a run Dagster will retry)."""
    from dagster import DagsterInstance, build_run_status_sensor_context
    from dagster._core.storage.tags import WILL_RETRY_TAG

    from pipelines.config import EXAMPLE_PIPELINES, load_pipelines
    from pipelines.definitions import build_definitions, pipeline_job_name, report_job_name
    from pipelines.resources import FleetResource, StatsDB

    stats = StatsDB(url=f"sqlite:///{tmp_path / 'empty.db'}", var_dir=str(tmp_path))
    defs = build_definitions(load_pipelines(EXAMPLE_PIPELINES), include_gfs=False,
                             resources={"stats_db": stats, "fleet": FleetResource(var_dir=str(tmp_path))})
    sensor = defs.resolve_sensor_def("spotfleet_checks_after_failed_run")
    with DagsterInstance.ephemeral() as instance:
        requests = {}
        for tags in ({}, {WILL_RETRY_TAG: "true"}):
            run = instance.create_run_for_job(defs.resolve_job_def(pipeline_job_name("demo")), tags=tags)
            event = instance.report_run_failed(run)
            ctx = build_run_status_sensor_context("spotfleet_checks_after_failed_run", event, instance,
                                                  instance.get_run_by_id(run.run_id))
            requests[bool(tags)] = list(sensor(ctx) or [])
        assert requests[True] == []  # Dagster retries it: the retry's outcome decides
        (req,) = requests[False]
        assert req.job_name == report_job_name("demo")
        res = defs.resolve_job_def(req.job_name).execute_in_process(instance=instance, raise_on_error=False)
        from pipelines.commands.main_report import SkippedCheck, check_outcomes

        outcomes = {(c.asset_key.path[-1], c.check_name): c for c in check_outcomes(instance, res)}
    assert isinstance(outcomes[("train_pretrain", "latest_checkpoint_recent")], SkippedCheck)
    assert not [c for c in outcomes.values() if c.passed is False], outcomes


def test_load_reuses_unchanged_tables_and_sees_every_change(two_runs, monkeypatch):
    """ct.load keeps the last prepared tables while the DB is unchanged (a run reads them
    before each attempt, after it, in the report and in every check); an added attempt, a
    re-recorded one (same ids possible) or a changed root_of is read afresh; callers get copies."""
    from infra.db.models import CheckpointRecord, CostLine, NodeSessionRecord, StageAttempt
    from infra.db.recorder import read_table

    prepared = []
    real_prepare = ct.prepare
    monkeypatch.setattr(ct, "prepare", lambda *a, **k: prepared.append(1) or real_prepare(*a, **k))
    first = ct.load(two_runs, "demo")
    first.sessions["run_id"] = "mutated"  # a caller mutating its copy in place
    del first.sessions["last_step"]
    again = ct.load(two_runs, "demo")
    assert len(again.sessions) == 5 and again.run_ids == ["run-a", "run-b"]
    assert set(again.sessions["run_id"]) == {"run-a", "run-b"} and "last_step" in again.sessions
    assert len(prepared) == 1  # read and prepared once
    t = T0 + 2 * 3600 / SCALE
    c1 = _node("c-n0", "pretrain", 1, t, 0, 100, 100, "completed")
    _record(two_runs, "run-c", "pretrain", 1, [c1], "completed")
    grown = ct.load(two_runs, "demo")
    assert grown.run_ids == ["run-a", "run-b", "run-c"] and len(grown.sessions) == 6
    # re-recording run-c's attempt (delete + insert: SQLite may reuse the ids) with another end
    c2 = _node("c-n0", "pretrain", 1, t, 0, 60, 60, "completed")
    _record(two_runs, "run-c", "pretrain", 1, [c2], "completed")
    redone = ct.load(two_runs, "demo")
    assert int(redone.sessions[redone.sessions["run_id"] == "run-c"]["last_step"].iloc[0]) == 60
    fresh = ct.prepare(*(read_table(two_runs, m, "demo") for m in (StageAttempt, NodeSessionRecord,
                                                                    CostLine, CheckpointRecord)))
    pd.testing.assert_frame_equal(redone.sessions, fresh.sessions)
    grouped = ct.load(two_runs, "demo", root_of={"run-b": "run-a"})
    assert not grouped.sessions["first_launch"].equals(redone.sessions["first_launch"])


def test_each_stage_gets_its_own_break_even(tmp_path):
    """Stages save and restore different models: the per-stage break-even uses each stage's
    own R and C (the run line pools them), and the report shows one row per stage."""
    eng = make_engine(f"sqlite:///{tmp_path / 'stats.db'}")
    upgrade(eng)
    # pretrain: a slow restore (ready 60 s after launch), finetune: a fast one (1 s)
    p1 = _node("p-n0", "pretrain", 1, T0, 0, 50, 40, "preempted")
    p1 = (dataclasses.replace(p1[0], ready_at=T0 + 60.0), p1[1], p1[2])
    p2 = _node("p-n1", "pretrain", 1, p1[2] + 3, 40, 100, 100, "completed", zone="us-west-2b")
    _record(eng, "run-s", "pretrain", 1, [p1, p2], "completed")
    f1 = _node("f-n0", "finetune", 1, p2[2] + 5, 0, 100, 100, "completed", zone="us-east-1c")
    _record(eng, "run-s", "finetune", 1, [f1], "completed")
    run = ct.for_runs(ct.load(eng, "demo"), ["run-s"])
    pooled = ct.observed_rates(run.sessions, run.lines, run.checkpoints)
    per = ct.stage_break_even(run.sessions, run.lines, run.checkpoints, ["pretrain", "finetune"])
    assert list(per["stage"]) == ["pretrain", "finetune"]
    r = dict(zip(per["stage"], per["restart_min"], strict=True))
    own = {st: ct.observed_rates(run.sessions[run.sessions["stage"] == st],
                                 run.lines[run.lines["stage"] == st],
                                 run.checkpoints[run.checkpoints["stage"] == st]).restart_hours * 60.0
           for st in ("pretrain", "finetune")}
    assert r == pytest.approx(own)
    assert r["pretrain"] > pooled.restart_hours * 60.0 > r["finetune"]  # the pooled R is neither stage's
    assert list(per["preemptions"]) == [1, 0]
    rep = build_report(eng, "demo", tmp_path / "out", ReportSelection(run_ids=("run-s",)),
                       stage_order=["pretrain", "finetune"])
    assert list(rep.stage_break_even["stage"]) == ["pretrain", "finetune"]
    assert "Break-even rate (/h)" in rep.markdown and "R (min)" in rep.markdown


def _assert_nothing_reported_for(instance, res, failed_run_id: str, var) -> None:
    """The report + checks after a failed run that recorded nothing cover THAT run: no report
    of an earlier run rewritten, every run-specific check skipped naming the failed run."""
    from pipelines.commands.main_report import SkippedCheck, check_outcomes

    mat = next(e.event_specific_data.materialization for e in res.all_events
               if e.event_type_value == "ASSET_MATERIALIZATION"
               and e.event_specific_data.materialization.asset_key.path[-1] == "cost_report")
    run_md = mat.metadata["run"].value
    assert run_md.startswith(f"none: run {failed_run_id[:8]} recorded no node session"), run_md
    assert not (var / "reports" / "demo" / "runs" / "run-b").exists()  # the earlier run's report untouched
    outcomes = {(c.asset_key.path[-1], c.check_name): c for c in check_outcomes(instance, res)}
    for key in (("cost_report", "cost_reconciles_with_node_sessions"), ("cost_report", "within_budget"),
                ("train_pretrain", "latest_checkpoint_recent"), ("train_finetune", "latest_checkpoint_recent")):
        assert isinstance(outcomes[key], SkippedCheck), (key, outcomes[key])
        assert f"run {failed_run_id[:8]} recorded no node session" in outcomes[key].why, outcomes[key].why


def test_the_report_after_a_failed_run_that_recorded_nothing_is_not_an_earlier_run_s(two_runs, tmp_path):
    """User audit 2026-11-28: a run that failed before any node (a configuration error at job
    start) was followed by <pipeline>__report_and_checks, which reported and checked the LATEST
    RECORDED run (an earlier one): `spotfleet main` printed "check ...: passed" about run-b under
    "run <this> FAILED" and rewrote run-b's report. Both the sensor's and spotfleet main's
    follow-up run now cover the failed run only."""
    from types import SimpleNamespace

    from dagster import DagsterInstance, build_run_status_sensor_context

    from pipelines.commands.main_report import run_checks
    from pipelines.config import EXAMPLE_PIPELINES, load_pipelines
    from pipelines.definitions import build_definitions, main_job_name, pipeline_job_name
    from pipelines.resources import FleetResource, StatsDB

    var = tmp_path / "var"

    stats = StatsDB(url=str(two_runs.url), var_dir=str(var))
    [cfg] = load_pipelines(EXAMPLE_PIPELINES)
    defs = build_definitions([cfg], include_gfs=False,
                             resources={"stats_db": stats, "fleet": FleetResource(var_dir=str(var))})
    sensor = defs.resolve_sensor_def("spotfleet_checks_after_failed_run")
    with DagsterInstance.ephemeral() as instance:
        # the run-failure sensor (dagster dev)
        run = instance.create_run_for_job(defs.resolve_job_def(pipeline_job_name("demo")))
        event = instance.report_run_failed(run)
        ctx = build_run_status_sensor_context("spotfleet_checks_after_failed_run", event, instance,
                                              instance.get_run_by_id(run.run_id))
        (req,) = list(sensor(ctx) or [])
        res = defs.resolve_job_def(req.job_name).execute_in_process(instance=instance, raise_on_error=False,
                                                                   tags=req.tags)
        _assert_nothing_reported_for(instance, res, run.run_id, var)
        # spotfleet main's follow-up (pipelines/commands/main_report.run_checks)
        main_run = instance.create_run_for_job(defs.resolve_job_def(main_job_name("demo")))
        instance.report_run_failed(main_run)
        outcomes = run_checks(defs, cfg, instance, SimpleNamespace(success=False, run_id=main_run.run_id))
        whys = {c.check_name: getattr(c, "why", None) for c in outcomes}
    assert not [c for c in outcomes if getattr(c, "passed", None) is True and c.check_name != "enough_samples"]
    assert f"run {main_run.run_id[:8]} recorded no node session" in whys["within_budget"], whys
