"""Fast checks of ``infra.db.pending`` on real SQLite files: a DB that cannot be opened is
retried within the bound and the record is kept; the next run writes it once; an error
in what is written is raised at once. (The end-to-end reproduction with a PostgreSQL
server killed mid-stage is test_fault_stats_db_down.py, slow.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from checkpointing.events import Event
from fleet.providers.base import NodeSession
from infra.db.pending import (
    AttemptRecord,
    RecordNotWritten,
    record_attempt_retrying,
    replay_pending,
)
from infra.db.session import make_engine, upgrade


def _record(run_id: str = "run-1") -> AttemptRecord:
    s = NodeSession(node_id="n0", stage="train", attempt=1, provider="local", cloud="aws", region="us-east-1",
                    zone="us-east-1f", instance_type="p3.2xlarge", spot=True, price_per_hour=0.918,
                    launched_at=1000.0, ready_at=1002.0, ended_at=1100.0, end_reason="preempted",
                    notice_at=1099.0, first_step=0, last_step=40, last_checkpoint_step=40)
    ev = [Event("start", 1002.0, "n0", {}), Event("save_committed", 1050.0, "n0",
                                                 {"step": 40, "kind": "emergency", "bytes": 10})]
    sessions, events = AttemptRecord.wire([s], ev)
    return AttemptRecord(run_id=run_id, pipeline="p", stage="train", attempt=1, provider="local",
                         status="failed", sessions=sessions, events=events, started_at=999.0, ended_at=1101.0,
                         start_step=0, final_step=40, total_steps=100, on_demand_price_per_hour=3.06)


def test_unreachable_db_is_retried_within_the_bound_then_kept_and_replayed_once(tmp_path: Path) -> None:
    down = make_engine(f"sqlite:///{tmp_path / 'no-such-dir' / 'stats.db'}")  # cannot be opened
    waits: list[float] = []
    warnings: list[str] = []
    with pytest.raises(RecordNotWritten) as info:
        record_attempt_retrying(down, _record(), tmp_path / "pending", bound_seconds=3.0,
                                warn=warnings.append, sleep=waits.append)
    assert info.value.path.parent == tmp_path / "pending" and info.value.path.exists()
    assert "is NOT in the DB yet" in str(info.value) and str(info.value.path) in str(info.value)
    # exponential backoff from 0.5 s, one warning per failed try naming the DB
    assert waits[:2] == [0.5, 1.0] and all(w <= 8.0 for w in waits)
    assert len(warnings) == len(waits) and all("no-such-dir/stats.db unreachable" in w for w in warnings)

    up = make_engine(f"sqlite:///{tmp_path / 'stats.db'}")
    upgrade(up)
    assert replay_pending(up, tmp_path / "pending", "p", "other-stage") == 0  # not this stage's
    assert replay_pending(up, tmp_path / "pending", "p", "train") == 1
    assert replay_pending(up, tmp_path / "pending", "p", "train") == 0  # the file is gone
    from assets import cost_tables as ct

    data = ct.load(up, "p")
    assert list(data.attempts["final_step"]) == [40] and list(data.sessions["end_reason"]) == ["preempted"]


def test_an_error_in_the_record_is_not_retried_nor_kept(tmp_path: Path) -> None:
    eng = make_engine(f"sqlite:///{tmp_path / 'stats.db'}")
    upgrade(eng)
    bad = _record()
    bad.sessions[0]["launched_at"] = "not a time"
    with pytest.raises(Exception) as info:
        record_attempt_retrying(eng, bad, tmp_path / "pending", bound_seconds=30.0, sleep=pytest.fail)
    assert not isinstance(info.value, RecordNotWritten)
    assert not (tmp_path / "pending").exists()
