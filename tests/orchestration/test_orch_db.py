"""Statistics DB: migrations, recording a stage attempt, cost lines that reconcile (SQLite + PostgreSQL)."""

from __future__ import annotations

import datetime as dt

import pytest
from alembic import command
from sqlalchemy import Date, bindparam, inspect, text

from checkpointing.events import Event
from fleet.providers.base import NodeSession
from infra.db.accounting import breakdown, cost_slices
from infra.db.models import (
    CheckpointRecord,
    CostLine,
    NodeSessionRecord,
    PreemptionEvent,
    StageAttempt,
)
from infra.db.recorder import node_sessions_as_dataclasses, read_table, record_attempt
from infra.db.session import (
    _alembic_config,
    current_revision,
    head_revision,
    make_engine,
    session_scope,
    upgrade,
)

T0 = 1_700_000_000.0  # unix seconds


def _session(node: str, launched: float, ended: float, reason: str, first: int, last: int, ckpt: int,
             zone: str = "us-east-1f", spot: bool = True) -> NodeSession:
    return NodeSession(node_id=node, stage="pretrain", attempt=1, provider="local", cloud="aws",
                       region=zone[:-1], zone=zone, instance_type="p3.2xlarge", spot=spot,
                       price_per_hour=0.918 if spot else 3.06, launched_at=launched, ready_at=launched + 2,
                       ended_at=ended, end_reason=reason, notice_at=ended - 1 if reason == "preempted" else None,
                       first_step=first, last_step=last, last_checkpoint_step=ckpt)


def _events(node: str, t: float, first: int, last: int, saves: list[int], notice: bool, step_s: float = 0.1):
    ev = [Event("start", t + 2.0, node, {"resumed_from_step": first or None})]
    if first:
        ev.append(Event("restore", t + 2.5, node, {"step": first, "location": "x", "fell_back": False}))
    now = t + 2.5
    for s in range(first + 1, last + 1):
        now += step_s
        if s % 5 == 0 or s == last:
            ev.append(Event("progress", now, node, {"step": s, "total_steps": 100, "mean_step_seconds": step_s}))
        if s in saves:
            ev.append(Event("save_committed", now + 0.01, node, {"step": s, "kind": "periodic", "bytes": 1000,
                                                                "stall_seconds": 0.05, "persist_seconds": 0.2,
                                                                "location": f"/ck/{s}"}))
    if notice:
        ev.append(Event("notice", now + 0.05, node, {"source": "signal", "deadline_unix": now + 3}))
    ev.append(Event("exit", now + 0.1, node, {"reason": "preempted" if notice else "completed", "step": last}))
    return ev, now + 0.1


def _attempt():
    ev1, end1 = _events("n0", T0, 0, 47, [20, 40], notice=True)
    s1 = _session("n0", T0, end1 + 1.0, "preempted", 0, 47, 40)
    t2 = end1 + 5.0
    ev2, end2 = _events("n1", t2, 40, 100, [60, 80, 100], notice=False)
    s2 = _session("n1", t2, end2 + 0.5, "completed", 40, 100, 100, zone="us-west-2b")
    return [s1, s2], ev1 + ev2


def test_migrations_create_every_table_and_are_idempotent(db_url):
    eng = make_engine(db_url)
    assert current_revision(eng) is None
    assert upgrade(eng) == head_revision()
    assert upgrade(eng) == head_revision()  # a second upgrade is a no-op
    tables = set(inspect(eng).get_table_names())
    assert {"stage_attempts", "node_sessions", "preemption_events", "checkpoints", "cost_lines"} <= tables


def test_record_attempt_persists_events_and_costs_reconcile(db_url):
    eng = make_engine(db_url)
    upgrade(eng)
    sessions, events = _attempt()
    record_attempt(eng, run_id="run-1", pipeline="demo", stage="pretrain", attempt=1, provider="local",
                   status="completed", sessions=sessions, events=events, started_at=T0, ended_at=T0 + 60,
                   start_step=0, final_step=100, total_steps=100, on_demand_price=lambda s: 3.06)
    ns = read_table(eng, NodeSessionRecord, "demo")
    assert len(ns) == 2 and set(ns["end_reason"]) == {"preempted", "completed"}
    pre = read_table(eng, PreemptionEvent, "demo")
    assert len(pre) == 1 and pre.iloc[0]["step_at_preemption"] == 47 and pre.iloc[0]["last_checkpoint_step"] == 40
    assert pre.iloc[0]["notice_source"] == "signal"
    ck = read_table(eng, CheckpointRecord, "demo")
    assert sorted(ck["step"]) == [20, 40, 60, 80, 100]
    lines = read_table(eng, CostLine, "demo")
    billed = sum((s.ended_at - s.launched_at) / 3600.0 * s.price_per_hour for s in sessions)
    assert lines["dollars"].sum() == pytest.approx(billed, rel=1e-12)
    by_cat = lines.groupby("category")["dollars"].sum()
    assert by_cat["redo"] > 0  # 7 steps after the last checkpoint of the preempted node
    assert by_cat["useful"] > by_cat["redo"] and by_cat["restart"] > 0
    # on-demand equivalent prices only the useful work
    assert lines["on_demand_dollars"].sum() == pytest.approx(by_cat["useful"] * 3.06 / 0.918, rel=1e-9)
    att = read_table(eng, StageAttempt, "demo")
    assert att.iloc[0]["final_step"] == 100 and att.iloc[0]["status"] == "completed"
    # sessions come back as the fleet's dataclass, unchanged
    back = sorted(node_sessions_as_dataclasses(eng, "demo"), key=lambda s: s.launched_at)
    assert back == sessions


def test_recording_the_same_attempt_twice_replaces_it(db_url):
    eng = make_engine(db_url)
    upgrade(eng)
    sessions, events = _attempt()
    for _ in range(2):
        record_attempt(eng, run_id="r", pipeline="demo", stage="pretrain", attempt=1, provider="local",
                       status="completed", sessions=sessions, events=events, started_at=T0)
    assert len(read_table(eng, NodeSessionRecord, "demo")) == 2
    assert len(read_table(eng, StageAttempt, "demo")) == 1
    assert len(read_table(eng, CheckpointRecord, "demo")) == 5


def test_breakdown_parts_sum_to_the_session_and_redo_matches_lost_steps():
    sessions, events = _attempt()
    s1 = sessions[0]
    b = breakdown(s1, events)
    assert sum(b.as_dict().values()) == pytest.approx(s1.ended_at - s1.launched_at, rel=1e-12)
    assert b.steps_done == 47 and b.steps_lost == 7
    assert b.redo / (b.useful + b.redo) == pytest.approx(7 / 47, rel=1e-9)
    assert b.checkpoint == pytest.approx(0.1)  # two saves, 0.05 s stall each
    assert b.restart == pytest.approx(2.0)  # launch -> start event
    s2 = sessions[1]
    assert breakdown(s2, events).redo == 0.0  # completed nodes lose nothing


def test_cost_slices_split_a_session_across_midnight():
    midnight = dt.datetime(2026, 1, 2, tzinfo=dt.UTC).timestamp()
    s = _session("n9", midnight - 1800, midnight + 5400, "completed", 0, 10, 10)
    slices = cost_slices(s, [], on_demand_price_per_hour=3.06)
    days = {sl.day for sl in slices}
    assert days == {dt.date(2026, 1, 1), dt.date(2026, 1, 2)}
    per_day = {d: sum(sl.dollars for sl in slices if sl.day == d) for d in days}
    assert per_day[dt.date(2026, 1, 1)] == pytest.approx(0.5 * 0.918)
    assert per_day[dt.date(2026, 1, 2)] == pytest.approx(1.5 * 0.918)


def test_a_membership_slice_keeps_the_split_equal_to_the_session_cost():
    """An elastic node's shrink / grow pauses are their own category: clipped to the active
    time, taken out of the compute (not useful, no on-demand equivalent), and the slices
    across midnight still sum to ``session_cost_usd`` exactly."""
    from fleet.contract import session_cost_usd

    midnight = dt.datetime(2026, 1, 2, tzinfo=dt.UTC).timestamp()
    s = _session("n9", midnight - 1800, midnight + 5400, "preempted", 0, 100, 80)
    events = [Event("start", s.launched_at + 100, "n9", {}),
              *[Event("progress", s.launched_at + 100 + 70 * k, "n9", {"step": k}) for k in range(1, 101)],
              Event("exit", s.ended_at - 100, "n9", {"reason": "preempted", "step": 100})]
    # one pause across midnight (900 s), one that runs past the last training event (100 s inside)
    paused = [(midnight - 300, midnight + 600), (s.ended_at - 200, s.ended_at + 50)]
    b = breakdown(s, events, paused)
    assert b.membership == pytest.approx(1000.0)
    assert sum(b.as_dict().values()) == pytest.approx(s.ended_at - s.launched_at, rel=1e-12)
    # redo is the lost steps' share of the compute; a pause computes no step
    assert b.redo / (b.useful + b.redo) == pytest.approx(20 / 100, rel=1e-9)
    without = breakdown(s, events, [])
    assert without.membership == 0.0
    assert without.useful + without.redo - (b.useful + b.redo) == pytest.approx(1000.0, rel=1e-9)
    slices = cost_slices(s, events, on_demand_price_per_hour=3.06, paused=paused)
    cost = session_cost_usd(s.price_per_hour, s.launched_at, s.ended_at)
    assert sum(sl.dollars for sl in slices) == pytest.approx(cost, rel=1e-12)
    member = [sl for sl in slices if sl.category == "membership"]
    assert {sl.day for sl in member} == {dt.date(2026, 1, 1), dt.date(2026, 1, 2)}
    assert sum(sl.dollars for sl in member) == pytest.approx(1000.0 * 0.918 / 3600.0, rel=1e-12)
    assert sum(sl.on_demand_dollars for sl in slices) == pytest.approx(b.useful * 3.06 / 3600.0, rel=1e-12)
    assert all(sl.on_demand_dollars == 0.0 for sl in slices if sl.category != "useful")


def test_db_cli_upgrades_and_reports_the_revision(tmp_path, capsys):
    from pipelines.cli import main

    url = f"sqlite:///{tmp_path / 'cli.db'}"
    assert main(["db", "upgrade", "--url", url]) == 0
    assert f"at revision {head_revision()}" in capsys.readouterr().out
    assert main(["db", "current", "--url", url]) == 0
    assert "up to date" in capsys.readouterr().out


def test_db_current_reports_an_empty_database_as_never_migrated(tmp_path, capsys):
    from pipelines.cli import main

    (tmp_path / "empty.db").touch()  # an existing file: read, not refused
    assert main(["db", "current", "--url", f"sqlite:///{tmp_path / 'empty.db'}"]) == 0
    assert "revision (none)" in capsys.readouterr().out


@pytest.mark.parametrize("how", ["--url", "default", "$SPOTFLEET_DB_URL"])
def test_db_current_on_a_missing_database_creates_nothing(tmp_path, capsys, monkeypatch, how):
    """`db current` only reads. Until 2026-11-27 it created an empty SQLite file there (and
    ./var for the default) and said "revision (none)"."""
    from pipelines.cli import main

    for k in ("SPOTFLEET_DB_URL", "SPOTFLEET_VAR_DIR"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.chdir(tmp_path)
    missing = tmp_path / ("var" if how == "default" else "nowhere") / "spotfleet.db"
    args = ["--url", f"sqlite:///{missing}"] if how == "--url" else []
    if how == "$SPOTFLEET_DB_URL":
        monkeypatch.setenv("SPOTFLEET_DB_URL", f"sqlite:///{missing}")
    assert main(["db", "current", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"spotfleet db: error: statistics DB {missing} does not exist (URL "
                          f"'sqlite:///{missing}', from {'the default' if how == 'default' else how}), "
                          "so it has no revision to show; nothing was created. Point --url (or "
                          "$SPOTFLEET_DB_URL) at an existing database, or create it at the newest "
                          "revision with `spotfleet db upgrade`")
    assert list(tmp_path.iterdir()) == []  # no database, no var folder


def test_no_time_scale_column_anywhere(db_url):
    """The DB stores market seconds only: no table has a time-scale column (migration 0002)."""
    eng = make_engine(db_url)
    upgrade(eng)
    insp = inspect(eng)
    for table in insp.get_table_names():
        cols = {c["name"] for c in insp.get_columns(table)}
        assert not any("scale" in c for c in cols), (table, cols)


def _old_schema_rows(eng, k: float):
    """One attempt as the local fleet recorded it before 0002: wall times + time_scale k."""
    ev1, end1 = _events("n0", T0 + 5, 0, 47, [20, 40], notice=True)
    s1 = _session("n0", T0 + 5, end1 + 1.0, "preempted", 0, 47, 40)
    with eng.begin() as c:
        c.execute(text("INSERT INTO stage_attempts (id, run_id, pipeline, stage, attempt, provider, started_at, "
                       "ended_at, status, used_on_demand) VALUES (1, 'run-old', 'demo', 'pretrain', 1, 'local', "
                       ":t0, :t1, 'failed', false)"), {"t0": T0, "t1": end1 + 2})
        c.execute(text(
            "INSERT INTO node_sessions (id, attempt_id, node_id, pipeline, stage, attempt, provider, cloud, region, "
            "zone, instance_type, spot, price_per_hour, on_demand_price_per_hour, launched_at, ready_at, ended_at, "
            "end_reason, notice_at, first_step, last_step, last_checkpoint_step, time_scale) VALUES (1, 1, 'n0', "
            "'demo', 'pretrain', 1, 'local', 'aws', 'us-east-1', 'us-east-1f', 'p3.2xlarge', true, 0.918, 3.06, "
            ":l, :r, :e, 'preempted', :n, 0, 47, 40, :k)"),
            {"l": s1.launched_at, "r": s1.ready_at, "e": s1.ended_at, "n": s1.notice_at, "k": k})
        c.execute(text("INSERT INTO preemption_events (node_session_id, node_id, pipeline, stage, cloud, zone, "
                       "notice_at, preempted_at, emergency_saved) VALUES (1, 'n0', 'demo', 'pretrain', 'aws', "
                       "'us-east-1f', :n, :e, false)"), {"n": s1.notice_at, "e": s1.ended_at})
        for e in ev1:
            if e.kind == "save_committed":
                c.execute(text("INSERT INTO checkpoints (pipeline, stage, attempt, run_id, node_id, step, kind, "
                               "stall_seconds, persist_seconds, committed_at) VALUES ('demo', 'pretrain', 1, "
                               "'run-old', 'n0', :s, 'periodic', 0.05, 0.2, :t)"), {"s": e.data["step"], "t": e.time})
        # the old recorder's cost lines: wall seconds x k, at the session's price
        for cat, secs in breakdown(s1, ev1).as_dict().items():
            c.execute(text("INSERT INTO cost_lines (node_session_id, run_id, pipeline, stage, zone, day, spot, "
                           "category, seconds, dollars, on_demand_dollars) VALUES (1, 'run-old', 'demo', 'pretrain', "
                           "'us-east-1f', :d, true, :c, :s, :usd, 0.0)").bindparams(bindparam("d", type_=Date())),
                      {"d": dt.datetime.fromtimestamp(s1.launched_at, dt.UTC).date(), "c": cat, "s": secs * k,
                       "usd": secs * k / 3600.0 * 0.918})
    return s1


def test_migration_0002_converts_wall_rows_to_market_seconds(db_url):
    """A row written under the old schema (wall clock + time_scale 120) keeps its billed seconds and
    cost through the upgrade; its times become market time anchored at the run's start."""
    eng = make_engine(db_url)
    assert upgrade(eng, "0001") == "0001"
    k = 120.0
    s1 = _old_schema_rows(eng, k)
    billed_s = (s1.ended_at - s1.launched_at) * k
    assert upgrade(eng, "0002") == "0002"  # this revision converts the rows
    # the later ones only add tables / columns (0005: node_sessions.injected, which the
    # model reads), so read the converted rows at the head
    assert upgrade(eng) == head_revision()
    ns = read_table(eng, NodeSessionRecord, "demo").iloc[0]
    assert "time_scale" not in ns.index
    assert ns["ended_at"] - ns["launched_at"] == pytest.approx(billed_s, rel=1e-12)
    assert ns["launched_at"] == pytest.approx(T0 + 5 * k)  # anchored at the run's first attempt start
    assert ns["ready_at"] - ns["launched_at"] == pytest.approx(2.0 * k)  # R in market seconds
    with session_scope(eng) as db:
        row = db.get(NodeSessionRecord, 1)
        assert row.hours == pytest.approx(billed_s / 3600.0, rel=1e-12)
        assert row.cost == pytest.approx(billed_s / 3600.0 * 0.918, rel=1e-12)
    pre = read_table(eng, PreemptionEvent, "demo").iloc[0]
    assert pre["preempted_at"] == pytest.approx(ns["ended_at"])
    assert pre["notice_at"] == pytest.approx(ns["notice_at"])
    ck = read_table(eng, CheckpointRecord, "demo")
    assert ck["stall_seconds"].tolist() == pytest.approx([0.05 * k] * len(ck))  # market seconds
    assert ck["persist_seconds"].tolist() == pytest.approx([0.2 * k] * len(ck))
    assert ((ck["committed_at"] > ns["launched_at"]) & (ck["committed_at"] < ns["ended_at"])).all()
    lines = read_table(eng, CostLine, "demo")
    assert lines["seconds"].sum() == pytest.approx(billed_s, rel=1e-12)
    assert lines["dollars"].sum() == pytest.approx(row.cost, rel=1e-12)
    # the lines now cover the days the market-time session covers
    days = {dt.datetime.fromtimestamp(t, dt.UTC).date() for t in (ns["launched_at"], ns["ended_at"])}
    assert set(lines["day"]) == days
    # and the downgrade re-adds the column with scale 1 (market seconds): billed seconds unchanged
    cfg = _alembic_config(eng)
    with eng.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0001")
    with eng.connect() as c:  # raw SQL: the model has columns of later revisions (0004, 0005)
        assert c.execute(text("SELECT count(*) FROM stage_attempts")).scalar_one() == 1
        scale, secs = c.execute(text("SELECT time_scale, ended_at - launched_at FROM node_sessions")).one()
    assert scale == 1.0 and secs == pytest.approx(billed_s, rel=1e-12)


def test_migration_0004_stores_the_root_run_and_downgrades(db_url):
    """0004 adds stage_attempts.root_run_id; rows recorded before it get their own run id
    (each run its own root, what every reader assumed); the downgrade drops the column and
    keeps the rows; record_attempt stores the root it is given."""
    eng = make_engine(db_url)
    assert upgrade(eng, "0003") == "0003"
    with eng.begin() as c:
        c.execute(text("INSERT INTO stage_attempts (run_id, pipeline, stage, attempt, provider, started_at, "
                       "status, used_on_demand) VALUES ('run-old', 'demo', 'pretrain', 1, 'local', :t, "
                       "'completed', false)"), {"t": T0})
    assert upgrade(eng, "0004") == "0004"
    assert "root_run_id" in {c["name"] for c in inspect(eng).get_columns("stage_attempts")}
    old = read_table(eng, StageAttempt, "demo")
    assert list(old["root_run_id"]) == ["run-old"]
    assert upgrade(eng) == head_revision()  # the recorder writes 0005's node_sessions.injected too
    sessions, events = _attempt()
    record_attempt(eng, run_id="reexec", root_run_id="run-old", pipeline="demo", stage="pretrain", attempt=1,
                   provider="local", status="completed", sessions=sessions, events=events, started_at=T0 + 10)
    record_attempt(eng, run_id="plain", pipeline="demo", stage="finetune", attempt=1, provider="local",
                   status="completed", sessions=[], events=[], started_at=T0 + 20)
    roots = dict(zip(*read_table(eng, StageAttempt, "demo")[["run_id", "root_run_id"]].to_numpy().T, strict=True))
    assert roots == {"run-old": "run-old", "reexec": "run-old", "plain": "plain"}
    cfg = _alembic_config(eng)
    with eng.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0003")
    assert current_revision(eng) == "0003"
    assert "root_run_id" not in {c["name"] for c in inspect(eng).get_columns("stage_attempts")}
    with eng.connect() as c:  # nothing lost (a batch table copy would cascade into node_sessions)
        assert c.execute(text("SELECT count(*) FROM stage_attempts")).scalar_one() == 3
        assert c.execute(text("SELECT count(*) FROM node_sessions")).scalar_one() == len(sessions) == 2
        assert c.execute(text("SELECT count(*) FROM cost_lines")).scalar_one() > 0
    assert upgrade(eng) == head_revision()  # and up again


def test_migration_0005_keeps_injected_sessions_apart(db_url):
    """0005 adds node_sessions.injected: a session a fault injection ended reads back as
    injected (so the statistics leave it out); rows recorded before it read false; the
    downgrade drops the column and keeps the rows."""
    import dataclasses

    eng = make_engine(db_url)
    assert upgrade(eng, "0004") == "0004"
    old_sessions, old_events = _attempt()
    with eng.begin() as c:  # a row written by the 0004 schema (raw SQL: the model has 0005's column)
        c.execute(text("INSERT INTO node_sessions (node_id, pipeline, stage, attempt, provider, cloud, "
                       "region, zone, instance_type, spot, price_per_hour, launched_at, end_reason) VALUES "
                       "('old', 'demo', 'pretrain', 1, 'local', 'aws', 'us-east-1', 'us-east-1f', "
                       "'p3.2xlarge', true, 0.918, :t, 'preempted')"), {"t": T0})
    assert upgrade(eng) == head_revision()
    s1, s2 = old_sessions
    record_attempt(eng, run_id="run-1", pipeline="demo", stage="pretrain", attempt=1, provider="local",
                   status="completed", sessions=[dataclasses.replace(s1, injected=True), s2],
                   events=old_events, started_at=T0, ended_at=T0 + 60)
    back = {s.node_id: s.injected for s in node_sessions_as_dataclasses(eng, "demo")}
    assert back == {"old": False, "n0": True, "n1": False}
    cfg = _alembic_config(eng)
    with eng.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0004")
    assert "injected" not in {c["name"] for c in inspect(eng).get_columns("node_sessions")}
    with eng.connect() as c:
        assert c.execute(text("SELECT count(*) FROM node_sessions")).scalar_one() == 3


@pytest.mark.postgres
def test_a_postgres_scheme_url_reaches_the_same_database(pg_fresh_url):
    """``postgres://`` (what many hosted databases hand out; SQLAlchemy dropped the alias)
    and plain ``postgresql://`` both use the installed psycopg 3 driver, same database."""
    scheme, rest = pg_fresh_url.split("://", 1)
    assert scheme == "postgresql+psycopg"
    eng = make_engine(pg_fresh_url)
    assert upgrade(eng) == head_revision()
    for alias in (f"postgres://{rest}", f"postgresql://{rest}"):
        assert current_revision(make_engine(alias)) == head_revision()
