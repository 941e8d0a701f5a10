"""Two consecutive `spotfleet main` runs: two per-run reports, each reconciling with its own
node sessions, and a period (day) total equal to their sum; the all-time table lists both.

Real main-job runs (subprocesses of the CLI) of a one-stage pipeline on the local fleet
with one injected preemption, sharing one state folder (SQLite statistics DB, Dagster home).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
PIPELINE = """
pipelines:
  - name: twice
    provider: local
    deadline_hours: 48
    budget_usd: 40
    checkpoint_uri: checkpoints/twice
    schedule_cron: null
    market: {seed: 4, wall_seconds_per_market_hour: 30, cloud: signal, grace_seconds: 2,
             inject_preemptions_at_steps: {train: [30]}}
    stages:
      - name: train
        script: examples/train_example.py
        args: [--steps, "60", --seed, "1", --size, tiny, --step-sleep, "0.03", --periodic-every, "20"]
        work_hours: 1
        resources: {zones: [us-east-1f, us-east-1c, us-west-2b]}
"""


def _main(cfg: Path, var: Path) -> tuple[str, str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    for k in ("SPOTFLEET_DB_URL", "DAGSTER_HOME", "SPOTFLEET_VAR_DIR", "SPOTFLEET_PIPELINES"):
        env.pop(k, None)
    out = subprocess.run([sys.executable, "-m", "pipelines.cli", "main", "--pipelines", str(cfg),
                          "--var-dir", str(var)], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-4000:]
    run_id = re.search(r"\[spotfleet main\] run ([0-9a-f-]{36}) succeeded", text).group(1)
    return run_id, text


def test_two_main_runs_two_reports_and_the_period_is_their_sum(tmp_path):
    cfg = tmp_path / "twice.yaml"
    cfg.write_text(PIPELINE)
    var = tmp_path / "var"
    run1, out1 = _main(cfg, var)
    run2, out2 = _main(cfg, var)
    assert run1 != run2
    reports = var / "reports" / "twice"
    for run, out in ((run1, out1), (run2, out2)):
        # the summary points at THIS run's report, and every check ran on it
        assert str(reports / "runs" / run / "cost_report.html") in out
        assert "cost_reconciles_with_node_sessions: passed" in out
        assert "FAILED" not in out and "nan" not in out

    from assets import cost_tables as ct
    from infra.db.session import make_engine

    data = ct.load(make_engine(f"sqlite:///{var / 'spotfleet.db'}"), "twice")
    assert data.run_ids == [run1, run2]
    spend = {}
    for run in (run1, run2):
        part = ct.for_runs(data, [run])
        assert len(part.sessions) >= 2  # the injected preemption -> a relaunch
        csv = pd.read_csv(reports / "runs" / run / "cost_report.csv")
        spend[run] = csv["spend_usd"].sum()
        # each per-run report reconciles with that run's node sessions
        assert spend[run] == pytest.approx(part.sessions["cost_usd"].sum(), rel=1e-9)
        assert spend[run] > 0
    by_day = pd.read_csv(reports / "cost_by_day.csv")  # the period of the latest report
    days = set(pd.to_datetime(data.lines["day"]).dt.date.astype(str))
    if len(days) == 1:  # both runs on one UTC day (not across midnight): the day is their sum
        assert list(by_day["runs"]) == [2]
        assert by_day["spend_usd"].sum() == pytest.approx(spend[run1] + spend[run2], rel=1e-9)
    all_time = pd.read_csv(reports / "cost_all_time.csv")
    assert list(all_time["run_id"]) == [run1, run2]
    assert all_time["spend_usd"].sum() == pytest.approx(spend[run1] + spend[run2], rel=1e-9)
    # the second report is the second run's alone, not everything ever recorded
    md2 = (reports / "runs" / run2 / "cost_report.md").read_text()
    assert f"run {run2[:8]}" in md2.splitlines()[0]
    from assets import focus

    frame = focus.read_focus_csv(reports / "focus" / "cost_and_usage_focus.csv")
    assert focus.validate(frame) == []
    assert frame["BilledCost"].sum() == pytest.approx(spend[run1] + spend[run2], rel=1e-9)



def _run_budgeted(tmp_path: Path, name: str, budget_usd: float, enforce_budget: bool,
                  work_hours: float | None = None, market: dict | None = None):
    """Run the example pipeline in process under a budget (``market``: keys replacing the
    pipeline's market ones); (result, StatsDB)."""
    from dagster import DagsterInstance

    from pipelines.config import parse_pipelines
    from pipelines.definitions import build_definitions, pipeline_job_name
    from pipelines.resources import FleetResource, StatsDB

    data = yaml.safe_load(PIPELINE)
    data["pipelines"][0].update(name=name, budget_usd=budget_usd, enforce_budget=enforce_budget)
    if work_hours is not None:
        data["pipelines"][0]["stages"][0]["work_hours"] = work_hours
    data["pipelines"][0]["market"].update(market or {})
    [cfg] = parse_pipelines(data)
    var = tmp_path / "var"
    stats = StatsDB(url="", var_dir=str(var))
    defs = build_definitions([cfg], include_gfs=False,
                             resources={"stats_db": stats, "fleet": FleetResource(var_dir=str(var))})
    with DagsterInstance.ephemeral() as instance:
        res = defs.resolve_job_def(pipeline_job_name(name)).execute_in_process(instance=instance,
                                                                             raise_on_error=False)
    return res, stats


def _first_outage_wall_seconds(market: dict) -> float:
    """Wall seconds from the start of the local fleet's replay (where the history ends) to
    the first time any zone of ``market`` LOSES capacity: a node running before then is
    preempted only by the fault injection, however fast or slow the run goes."""
    from fleet.emulation.injector import CapacitySchedule
    from fleet.market.config import MarketConfig

    m = MarketConfig.model_validate(market)
    sched = CapacitySchedule(m.traces("all"), offset_seconds=m.history_seconds)
    first = []
    for zone in sched.zones:
        t = 0.0
        while (t := sched.next_change(zone, t)) is not None and sched.is_up(zone, t):
            pass  # an up-flip of a zone down at the start: look for its next (down) flip
        first.append(float("inf") if t is None else t)
    return min(first) * m.wall_seconds_per_market_hour / 3600.0


def test_an_enforced_budget_keeps_the_stage_from_launching(tmp_path):
    """budget_usd below the plan's expected cost + enforce_budget: the stage fails once, before
    any node is launched, with the budget message; no retry, no node session."""
    res, stats = _run_budgeted(tmp_path, "broke", budget_usd=0.01, enforce_budget=True)
    assert not res.success
    failures = [e for e in res.all_events if e.event_type_value == "STEP_FAILURE"]
    assert [e.step_key for e in failures] == ["broke__train_train"]
    msg = failures[0].event_specific_data.error.message
    assert "would exceed the budget of pipeline broke" in msg and "NOT launched" in msg
    assert not [e for e in res.all_events if e.event_type_value == "STEP_UP_FOR_RETRY"]
    from assets import cost_tables as ct

    assert ct.load(stats.engine(), "broke").sessions.empty  # nothing was launched, nothing billed


def _event_texts(res) -> str:
    """Every event's message and, for failures, its error's message: where a budget stop
    shows (a STEP_FAILURE whose error carries the text)."""
    return " ".join([str(e.message or "") for e in res.all_events]
                    + [str(getattr(getattr(e.event_specific_data, "error", None), "message", ""))
                       for e in res.all_events])


def test_an_enforced_budget_with_room_passes_the_budget_left_and_relaunches(tmp_path):
    """enforce_budget with enough budget: the attempt gets the $ left (StageSpec.budget_left_usd
    through the node runner) and still relaunches after the injected preemption; the stop
    itself is tested on the provider (tests/fleet_providers/test_fp_local_provider.py).

    The market's own preemptions come on top of the injected one, at wall instants set by
    how long the run has been going: at the pipeline's 30 wall s per market hour, seed 4's
    us-west-2b (the plan's zone) goes down 0.26 market h (7.7 wall s) after the run starts,
    which a loaded machine's first node reaches before step 30 (a third session, about one
    run in three). Replayed in real time (3600 wall s per market hour) that outage is 930
    wall s away, and no zone loses capacity before it: the one preemption is the injected one."""
    market = {"wall_seconds_per_market_hour": 3600}
    calm = _first_outage_wall_seconds({**yaml.safe_load(PIPELINE)["pipelines"][0]["market"], **market})
    assert calm > 600, f"the market preempts by itself {calm:.0f} wall s into the run; pick a calmer one"
    res, stats = _run_budgeted(tmp_path, "roomy", budget_usd=40, enforce_budget=True, market=market)
    assert res.success
    assert "stopped by the budget" not in _event_texts(res)  # found there when it stops (below)
    from assets import cost_tables as ct

    sessions = ct.load(stats.engine(), "roomy").sessions
    assert list(sessions["end_reason"]) == ["preempted", "completed"]


def test_an_enforced_budget_stops_the_stage_instead_of_relaunching(tmp_path):
    """The plan expects little (work_hours 0.01) so the stage launches under budget_usd $0.05;
    the first node alone spends more before the injected preemption, so the relaunch is not
    made: one STEP_FAILURE with the figures and the fix, no retry, one node session."""
    res, stats = _run_budgeted(tmp_path, "tight", budget_usd=0.05, enforce_budget=True, work_hours=0.01)
    assert not res.success
    failures = [e for e in res.all_events if e.event_type_value == "STEP_FAILURE"]
    assert [e.step_key for e in failures] == ["tight__train_train"]
    msg = failures[0].event_specific_data.error.message
    assert "stopped by the budget" in msg and "NOT relaunched" in msg and "$0.0500 left" in msg
    assert "stopped by the budget" in _event_texts(res)  # the search the test above relies on
    assert "Raise budget_usd" in msg and "enforce_budget: false" in msg
    assert not [e for e in res.all_events if e.event_type_value == "STEP_UP_FOR_RETRY"]
    from assets import cost_tables as ct

    data = ct.load(stats.engine(), "tight")
    assert list(data.sessions["end_reason"]) == ["preempted"]
    assert list(data.attempts["root_run_id"]) == [res.run_id]  # not a re-execution: its own root (0004)
