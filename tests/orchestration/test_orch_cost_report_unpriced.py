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


def test_the_budget_check_warns_with_the_unpriced_session_ids(unpriced_db, tmp_path, demo_checks):
    res, outcomes = demo_checks(str(unpriced_db.url))
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


def test_the_focus_export_marks_the_unpriced_rows(unpriced_db, tmp_path):
    """FOCUS 1.2 has no "cost unknown" column and BilledCost may not be null: the row keeps
    BilledCost 0 and the project column x_Unpriced is true, so an analyst can filter it."""
    from assets import focus

    frame = focus.focus_frame(ct.load(unpriced_db, "demo"))
    assert focus.validate(frame) == []
    unpriced = frame[frame["x_Unpriced"]]  # the unpriced session spans midnight: two rows
    assert set(unpriced["ResourceId"]) == {"pretrain-a1-j2-r0-n0"} and len(unpriced) == 2
    assert (unpriced["BilledCost"] == 0.0).all() and unpriced["PricingQuantity"].sum() == pytest.approx(1.0)
    assert frame.loc[~frame["x_Unpriced"], "BilledCost"].sum() == pytest.approx(0.2756 * 1.0)
    flags = frame["x_Unpriced"].tolist()
    # the CSV and Parquet files keep the column a boolean
    files = focus.write_focus(frame, tmp_path / "focus" / "cost")
    back = focus.read_focus_csv(files["focus_csv"])
    assert focus.validate(back) == [] and back["x_Unpriced"].tolist() == flags
    if "focus_parquet" in files:
        import pandas as pd

        assert pd.read_parquet(files["focus_parquet"])["x_Unpriced"].dtype == bool
    # the validator: an unmarked $0 usage row, a non-boolean mark, the column dropped
    problems = focus.validate(frame.assign(x_Unpriced=False))
    assert any("BilledCost: 0 for a positive PricingQuantity on 2 Usage row(s) without x_Unpriced" in p
               for p in problems), problems
    assert any("x_Unpriced: must be a boolean" in p for p in focus.validate(frame.assign(x_Unpriced="yes")))
    assert any("without x_Unpriced true" in p for p in focus.validate(frame.drop(columns=["x_Unpriced"])))
