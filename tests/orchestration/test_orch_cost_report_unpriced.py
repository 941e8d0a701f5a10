"""A node session recorded without a price ($0/h: the SkyPilot catalog had none for it) is
never a silent $0: the ``within_budget`` check warns with the session ids and the fix, and
the CLI report prints the same on stderr (docs/cost-report.md, "Unpriced sessions")."""

from __future__ import annotations

import pytest

from assets import cost_tables as ct
from fleet.providers.base import NodeSession
from infra.db.recorder import record_attempt
from infra.db.session import make_engine, upgrade

T0 = 1_700_000_000.0


def _session(node: str, price: float, t: float) -> NodeSession:
    return NodeSession(node_id=node, stage="pretrain", attempt=1, provider="skypilot", cloud="aws",
                       region="ap-south-9", zone="ap-south-9z", instance_type="g6.xlarge", spot=True,
                       price_per_hour=price, launched_at=t, ready_at=t + 60, ended_at=t + 3600,
                       end_reason="preempted" if price else "completed")


@pytest.fixture
def unpriced_db(tmp_path):
    eng = make_engine(f"sqlite:///{tmp_path / 'stats.db'}")
    upgrade(eng)
    sessions = [_session("pretrain-a1-j1-r0-n0", 0.2756, T0), _session("pretrain-a1-j2-r0-n0", 0.0, T0 + 3700)]
    record_attempt(eng, run_id="run-sky", pipeline="demo", stage="pretrain", attempt=1, provider="skypilot",
                   status="completed", sessions=sessions, events=[], started_at=T0, ended_at=T0 + 7300,
                   start_step=None, final_step=None, total_steps=None, on_demand_price=lambda _s: 0.8048)
    return eng


def test_unpriced_sessions_lists_only_the_sessions_without_a_price(unpriced_db):
    data = ct.load(unpriced_db, "demo")
    bad = ct.unpriced_sessions(data.sessions)
    assert list(bad["node_id"]) == ["pretrain-a1-j2-r0-n0"]
    assert list(bad.columns) == ct.UNPRICED_COLS and bad["billed_hours"].iloc[0] == pytest.approx(1.0)
    assert ct.unpriced_sessions(data.sessions.iloc[:0]).empty


def test_the_budget_check_warns_with_the_unpriced_session_ids(unpriced_db, tmp_path):
    from dagster import DagsterInstance

    from pipelines.commands.main_report import check_outcomes
    from pipelines.config import EXAMPLE_PIPELINES, load_pipelines
    from pipelines.definitions import build_definitions, checks_job_name
    from pipelines.resources import FleetResource, StatsDB

    stats = StatsDB(url=str(unpriced_db.url), var_dir=str(tmp_path))
    defs = build_definitions(load_pipelines(EXAMPLE_PIPELINES), include_gfs=False,
                             resources={"stats_db": stats, "fleet": FleetResource(var_dir=str(tmp_path))})
    with DagsterInstance.ephemeral() as instance:
        res = defs.resolve_job_def(checks_job_name("demo")).execute_in_process(instance=instance)
        outcomes = {(c.asset_key.path[-1], c.check_name): c for c in check_outcomes(instance, res)}
    budget = outcomes[("cost_report", "within_budget")]
    assert res.success and budget.passed is False and budget.severity.value == "WARN"
    assert budget.metadata["unpriced_sessions"].value == 1
    assert ("1 node session(s) have no price, so the spend is a lower bound: pretrain-a1-j2-r0-n0; "
            + ct.UNPRICED_FIX) in budget.description
    # the reconcile check still holds: lines and sessions agree on the $ that are known
    assert outcomes[("cost_report", "cost_reconciles_with_node_sessions")].passed is True


def test_the_cli_report_warns_on_stderr(unpriced_db, tmp_path, capsys):
    from pipelines.cli import main

    assert main(["cost-report", "--db-url", str(unpriced_db.url), "--var-dir", str(tmp_path / "var"),
                 "--pipeline", "demo", "--run", "run-sky"]) == 0
    err = capsys.readouterr().err
    assert "WARNING: 1 node session(s) of this run have no price and are counted at $0" in err
    assert "pretrain-a1-j2-r0-n0" in err and ct.UNPRICED_FIX in err
