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


def test_a_schema_error_on_sqlite_is_not_taken_for_a_db_that_is_down(tmp_path: Path) -> None:
    """SQLite raises OperationalError for "no such table" too: an old DB file without the
    migrations must fail at once naming the table, not be retried for a minute, spooled, and
    make every later run fail "the DB does not answer" (review, session 20)."""
    eng = make_engine(f"sqlite:///{tmp_path / 'stats.db'}")  # opens, but no tables
    with pytest.raises(Exception, match="no such table") as info:
        record_attempt_retrying(eng, _record(), tmp_path / "pending", bound_seconds=30.0, sleep=pytest.fail)
    assert not isinstance(info.value, RecordNotWritten)
    assert not (tmp_path / "pending").exists()


def test_a_unique_key_race_with_an_abandoned_try_is_retried(tmp_path: Path, monkeypatch) -> None:
    """A try that timed out may still commit once a frozen server wakes; the next try then
    loses the unique-key race. That IntegrityError is the race, not bad data: it is retried
    (and the retry replaces the rows), where it used to fail the stage with the record in."""
    from sqlalchemy.exc import IntegrityError

    import infra.db.pending as pending

    eng = make_engine(f"sqlite:///{tmp_path / 'stats.db'}")
    upgrade(eng)
    outcomes = [pending.DBNotAnswering("no answer"), IntegrityError("INSERT", {}, Exception("UNIQUE"))]
    real = pending.call_with_deadline

    def flaky(fn, seconds, what):
        if outcomes:
            raise outcomes.pop(0)
        return real(fn, seconds, what)

    monkeypatch.setattr(pending, "call_with_deadline", flaky)
    assert record_attempt_retrying(eng, _record(), tmp_path / "pending", bound_seconds=30.0,
                                   warn=lambda _m: None, sleep=lambda _s: None) > 0
    # without an earlier timeout the same error is a bug in the record: raised at once
    outcomes[:] = [IntegrityError("INSERT", {}, Exception("UNIQUE"))]
    with pytest.raises(IntegrityError):
        record_attempt_retrying(eng, _record("run-2"), tmp_path / "pending", bound_seconds=30.0,
                                sleep=pytest.fail)


def test_an_unreadable_pending_file_is_set_aside_naming_it(tmp_path: Path) -> None:
    """A truncated or foreign file in db_pending no longer fails every later run of the stage
    before launch with an error that does not name it."""
    from infra.db.pending import pending_records, spool

    eng = make_engine(f"sqlite:///{tmp_path / 'stats.db'}")
    upgrade(eng)
    pend = tmp_path / "pending"
    good = spool(_record("run-1"), pend)
    (pend / "p__train__run-0__a1.json").write_text('{"run_id": "run-0", "pipeline"', encoding="utf-8")
    spool(AttemptRecord(**{**_record("run-3").__dict__, "stage": "train__x"}), pend)  # another stage
    assert {p.name for p in pending_records(pend, "p", "train")} == {good.name, "p__train__run-0__a1.json"}
    said: list[str] = []
    assert replay_pending(eng, pend, "p", "train", info=said.append) == 1
    assert (pend / "unreadable" / "p__train__run-0__a1.json").exists()
    assert any("p__train__run-0__a1.json cannot be read" in m for m in said)
    assert [p.name for p in pending_records(pend, "p", "train__x")] == ["p__train__x__run-3__a1.json"]
