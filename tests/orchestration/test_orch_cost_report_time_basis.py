"""The cost report says which clock its hours are on (user audit, session 20).

`spotfleet main` (local fleet, one market hour = 30 wall s) ran 52 wall seconds and its
report read "1.51 spot hours", "1.32 useful h", "R = 1.3 min" and billed on a day of the
market clock, with no word that these are emulated market hours: a newcomer reads
them as wall time. Now a report with local-fleet sessions states it (markdown, HTML,
`spotfleet cost-report`); a real cloud's report (wall time) carries no such note.
Recorder + SQLite, no Dagster.
"""

from __future__ import annotations

from assets.cost_report import MARKET_TIME_NOTE, ReportSelection, build_report
from fleet.providers.base import NodeSession
from infra.db.recorder import record_attempt
from infra.db.session import make_engine, upgrade

DAY0 = 1_699_920_000.0  # 2023-11-14 00:00:00 UTC


def _record(eng, pipeline: str, provider: str) -> None:
    s = NodeSession(node_id="n0", stage="train", attempt=1, provider=provider, cloud="aws",
                    region="us-east-1", zone="us-east-1f", instance_type="p3.2xlarge", spot=True,
                    price_per_hour=0.918, launched_at=DAY0 + 3600.0, ready_at=DAY0 + 3660.0,
                    ended_at=DAY0 + 7200.0, end_reason="completed")
    record_attempt(eng, run_id=f"run-{provider}", pipeline=pipeline, stage="train", attempt=1,
                   provider=provider, status="completed", sessions=[s], events=[],
                   started_at=s.launched_at, ended_at=s.ended_at, start_step=None, final_step=None,
                   total_steps=None, on_demand_price=lambda _s: 3.06)


def test_a_local_fleet_report_says_its_times_are_market_time(tmp_path) -> None:
    eng = make_engine(f"sqlite:///{tmp_path / 'stats.db'}")
    upgrade(eng)
    _record(eng, "emulated", "local")
    _record(eng, "cloud", "skypilot")
    local = build_report(eng, "emulated", tmp_path / "emulated", ReportSelection(("run-local",)),
                         stage_order=["train"])
    assert local.time_note == MARKET_TIME_NOTE
    assert "Times are MARKET time" in local.markdown
    assert "Times are MARKET time" in local.files["md"].read_text()
    assert "Times are MARKET time" in local.files["html"].read_text()
    cloud = build_report(eng, "cloud", tmp_path / "cloud", ReportSelection(("run-skypilot",)),
                         stage_order=["train"])
    assert cloud.time_note is None and "MARKET time" not in cloud.markdown
