"""market seconds only: drop node_sessions.time_scale

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-26 11:10:00

Before this revision the local fleet recorded its sessions on the WALL clock with a
``time_scale`` column (market seconds per wall second) and every reader multiplied.
From now on every provider records market seconds (the local fleet converts its
compressed clock itself, fleet/providers/local/clock.py), so the column goes.

Upgrade: rows written with ``time_scale = k != 1`` are converted to market time with
the same affine map the local fleet now uses, anchored at the start of the row's
Dagster run (the earliest ``stage_attempts.started_at`` of its ``run_id``; a session
without an attempt is anchored at its own launch)::

    t -> anchor + (t - anchor) x k

for ``node_sessions`` (launched_at, ready_at, ended_at, notice_at), their
``preemption_events`` (notice_at, preempted_at) and ``checkpoints`` (committed_at;
stall_seconds and persist_seconds x k). ``cost_lines`` already held billed seconds and
dollars; they are re-split over the UTC days the converted session now covers (same
totals per category). Billed seconds (ended - launched) x k and cost are unchanged.
``stage_attempts`` times are the orchestrator's wall clock and stay as they are.

Downgrade: re-adds ``time_scale`` = 1.0 (the rows stay in market seconds, which is
what scale 1 means), so billed seconds are unchanged both ways.
"""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from alembic import op

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def _day_fractions(start: float, end: float) -> list[tuple[dt.date, float]]:
    """(UTC day, share of [start, end) on that day); a copy, so the migration never changes."""
    if end <= start:
        return [(dt.datetime.fromtimestamp(start, dt.UTC).date(), 1.0)]
    out, t = [], start
    while t < end:
        day = dt.datetime.fromtimestamp(t, dt.UTC).date()
        nxt = dt.datetime.combine(day + dt.timedelta(days=1), dt.time(), dt.UTC).timestamp()
        seg = min(nxt, end)
        out.append((day, (seg - t) / (end - start)))
        t = seg
    return out


def _map(t: float | None, anchor: float, k: float) -> float | None:
    return None if t is None else anchor + (t - anchor) * k


def upgrade() -> None:
    conn = op.get_bind()
    run_start = dict(conn.execute(sa.text(
        "SELECT run_id, MIN(started_at) FROM stage_attempts GROUP BY run_id")).all())
    run_of = dict(conn.execute(sa.text("SELECT id, run_id FROM stage_attempts")).all())
    sessions = conn.execute(sa.text(
        "SELECT id, attempt_id, node_id, pipeline, stage, attempt, launched_at, ready_at, ended_at, "
        "notice_at, time_scale FROM node_sessions WHERE time_scale IS NOT NULL AND time_scale <> 1.0")).all()
    for s in sessions:
        k = float(s.time_scale)
        run_id = run_of.get(s.attempt_id)
        anchor = float(run_start.get(run_id, s.launched_at)) if run_id is not None else float(s.launched_at)
        launched, ended = _map(s.launched_at, anchor, k), _map(s.ended_at, anchor, k)
        conn.execute(sa.text(
            "UPDATE node_sessions SET launched_at = :l, ready_at = :r, ended_at = :e, notice_at = :n "
            "WHERE id = :id"), {"l": launched, "r": _map(s.ready_at, anchor, k), "e": ended,
                                "n": _map(s.notice_at, anchor, k), "id": s.id})
        for p in conn.execute(sa.text(
                "SELECT id, notice_at, preempted_at FROM preemption_events WHERE node_session_id = :id"),
                {"id": s.id}).all():
            conn.execute(sa.text("UPDATE preemption_events SET notice_at = :n, preempted_at = :p WHERE id = :id"),
                         {"n": _map(p.notice_at, anchor, k), "p": _map(p.preempted_at, anchor, k), "id": p.id})
        if run_id is not None:
            for c in conn.execute(sa.text(
                    "SELECT id, committed_at, stall_seconds, persist_seconds FROM checkpoints "
                    "WHERE run_id = :run AND pipeline = :pl AND stage = :st AND attempt = :at AND node_id = :node"),
                    {"run": run_id, "pl": s.pipeline, "st": s.stage, "at": s.attempt, "node": s.node_id}).all():
                conn.execute(sa.text(
                    "UPDATE checkpoints SET committed_at = :c, stall_seconds = :s, persist_seconds = :p "
                    "WHERE id = :id"),
                    {"c": _map(c.committed_at, anchor, k),
                     "s": None if c.stall_seconds is None else c.stall_seconds * k,
                     "p": None if c.persist_seconds is None else c.persist_seconds * k, "id": c.id})
        lines = conn.execute(sa.text(
            "SELECT id, run_id, pipeline, stage, zone, spot, category, seconds, dollars, on_demand_dollars "
            "FROM cost_lines WHERE node_session_id = :id"), {"id": s.id}).all()
        if not lines:
            continue
        totals: dict[str, list[float]] = {}
        for ln in lines:
            acc = totals.setdefault(ln.category, [0.0, 0.0, 0.0])
            acc[0] += float(ln.seconds)
            acc[1] += float(ln.dollars)
            acc[2] += float(ln.on_demand_dollars or 0.0)
        first = lines[0]
        conn.execute(sa.text("DELETE FROM cost_lines WHERE node_session_id = :id"), {"id": s.id})
        end = ended if ended is not None else launched
        for day, frac in _day_fractions(launched, end):
            for cat, (secs, usd, od) in totals.items():
                conn.execute(sa.text(
                    "INSERT INTO cost_lines (node_session_id, run_id, pipeline, stage, zone, day, spot, "
                    "category, seconds, dollars, on_demand_dollars) VALUES (:sid, :run, :pl, :st, :z, :day, "
                    ":spot, :cat, :secs, :usd, :od)").bindparams(
                        sa.bindparam("day", type_=sa.Date()), sa.bindparam("spot", type_=sa.Boolean())),
                    {"sid": s.id, "run": first.run_id, "pl": first.pipeline, "st": first.stage,
                     "z": first.zone, "day": day, "spot": first.spot, "cat": cat, "secs": secs * frac,
                     "usd": usd * frac, "od": od * frac})
    # a plain ALTER TABLE (SQLite >= 3.35 drops a column natively): a batch "move and copy"
    # would DROP the old table, and with foreign keys on that cascades into the child rows
    op.drop_column('node_sessions', 'time_scale')


def downgrade() -> None:
    op.add_column('node_sessions', sa.Column('time_scale', sa.Float(), nullable=False,
                                             server_default=sa.text('1.0')))
