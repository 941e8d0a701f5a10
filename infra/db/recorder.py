"""Write a stage attempt's node sessions and events into the statistics DB, read them back."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence

import pandas as pd
from sqlalchemy import Engine, select

from checkpointing.events import Event
from fleet.providers.base import NodeSession
from fleet.providers.membership import membership_changes, paused_intervals
from infra.db.accounting import cost_slices
from infra.db.models import (
    CheckpointRecord,
    CostLine,
    MembershipChange,
    NodeSessionRecord,
    PreemptionEvent,
    StageAttempt,
)
from infra.db.session import session_scope


def record_attempt(
    engine: Engine,
    *,
    run_id: str,
    pipeline: str,
    stage: str,
    attempt: int,
    provider: str,
    status: str,
    sessions: Sequence[NodeSession],
    events: Sequence[Event],
    started_at: float,
    ended_at: float | None = None,
    start_step: int | None = None,
    final_step: int | None = None,
    total_steps: int | None = None,
    on_demand_price: Callable[[NodeSession], float] | None = None,
    error: str | None = None,
    root_run_id: str | None = None,
) -> int:
    """Persist one attempt (sessions, preemptions, checkpoints, cost lines); return its id.

    Re-recording the same (run_id, pipeline, stage, attempt) replaces the earlier rows.
    ``root_run_id``: the Dagster run group (``dagster/root_run_id`` of a re-execution or
    retry run); None: the run is its own root.
    ``on_demand_price(session)`` gives the on-demand $/h for a session's node type.
    Every time and duration is in market seconds as the provider reported it (the local
    fleet converts its compressed clock before it reports); nothing here rescales.
    """
    od = on_demand_price or (lambda s: s.price_per_hour)
    with session_scope(engine) as db:
        old = db.scalar(select(StageAttempt).where(
            StageAttempt.run_id == run_id, StageAttempt.pipeline == pipeline,
            StageAttempt.stage == stage, StageAttempt.attempt == attempt))
        if old is not None:
            _delete_attempt(db, old)
        row = StageAttempt(
            run_id=run_id, root_run_id=root_run_id or run_id, pipeline=pipeline, stage=stage,
            attempt=attempt, provider=provider, started_at=started_at, ended_at=ended_at if ended_at is not None else time.time(),
            status=status, start_step=start_step, final_step=final_step, total_steps=total_steps,
            used_on_demand=any(not s.spot for s in sessions), error=(error or None) and error[:2000],
        )
        db.add(row)
        db.flush()
        by_node: dict[str, list[Event]] = {}
        for ev in events:
            by_node.setdefault(ev.node_id or "", []).append(ev)
        paused = paused_intervals(events)  # elastic stages: each node's membership pauses
        for s in sessions:
            node_events = by_node.get(s.node_id, [])
            od_price = float(od(s))
            ns = NodeSessionRecord(
                attempt_id=row.id, node_id=s.node_id, pipeline=pipeline, stage=stage,
                attempt=attempt, provider=s.provider, cloud=s.cloud, region=s.region, zone=s.zone,
                instance_type=s.instance_type, spot=s.spot, price_per_hour=s.price_per_hour,
                on_demand_price_per_hour=od_price, launched_at=s.launched_at, ready_at=s.ready_at,
                ended_at=s.ended_at, end_reason=s.end_reason, notice_at=s.notice_at,
                first_step=s.first_step, last_step=s.last_step,
                last_checkpoint_step=s.last_checkpoint_step, injected=bool(s.injected),
            )
            db.add(ns)
            db.flush()
            if s.end_reason == "preempted":
                notices = [e for e in node_events if e.kind == "notice"]
                emergency = any(e.kind == "save_committed" and e.data.get("kind") == "emergency"
                                for e in node_events)
                db.add(PreemptionEvent(
                    node_session_id=ns.id, node_id=s.node_id, pipeline=pipeline, stage=stage,
                    cloud=s.cloud, zone=s.zone, notice_at=s.notice_at,
                    preempted_at=s.ended_at if s.ended_at is not None else time.time(),
                    notice_source=str(notices[0].data.get("source")) if notices else None,
                    step_at_preemption=s.last_step, last_checkpoint_step=s.last_checkpoint_step,
                    emergency_saved=emergency,
                ))
            for ev in node_events:
                if ev.kind == "save_committed" and ev.data.get("step") is not None:
                    db.add(CheckpointRecord(
                        pipeline=pipeline, stage=stage, attempt=attempt, run_id=run_id,
                        node_id=s.node_id, step=int(ev.data["step"]),
                        kind=str(ev.data.get("kind", "periodic")),
                        bytes=_int(ev.data.get("bytes")), stall_seconds=_float(ev.data.get("stall_seconds")),
                        persist_seconds=_float(ev.data.get("persist_seconds")),
                        location=str(ev.data.get("location")) if ev.data.get("location") else None,
                        committed_at=ev.time,
                    ))
            if s.ended_at is not None:
                for sl in cost_slices(s, node_events, od_price, paused.get(s.node_id, [])):
                    db.add(CostLine(
                        node_session_id=ns.id, run_id=run_id, pipeline=pipeline, stage=stage,
                        zone=s.zone, day=sl.day, spot=s.spot, category=sl.category,
                        seconds=sl.seconds, dollars=sl.dollars, on_demand_dollars=sl.on_demand_dollars,
                    ))
        for ch in membership_changes(events, sessions):  # elastic stages only
            db.add(MembershipChange(
                attempt_id=row.id, run_id=run_id, pipeline=pipeline, stage=stage, attempt=attempt,
                formed_at=ch.formed_at, kind=ch.kind, step=ch.step,
                world_size_before=ch.world_size_before, world_size=ch.world_size,
                state_from=ch.state_from, nodes=",".join(ch.nodes)[:2000],
                pause_seconds=ch.pause_seconds, node_seconds=ch.node_seconds, dollars=ch.dollars))
        return row.id


def _int(v) -> int | None:
    return int(v) if isinstance(v, (int, float)) else None


def _float(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) else None


def _delete_attempt(db, row: StageAttempt) -> None:
    ids = [s.id for s in db.scalars(select(NodeSessionRecord).where(NodeSessionRecord.attempt_id == row.id))]
    for model in (CostLine, PreemptionEvent):
        for r in db.scalars(select(model).where(model.node_session_id.in_(ids))):
            db.delete(r)
    for r in db.scalars(select(CheckpointRecord).where(
            CheckpointRecord.run_id == row.run_id, CheckpointRecord.pipeline == row.pipeline,
            CheckpointRecord.stage == row.stage, CheckpointRecord.attempt == row.attempt)):
        db.delete(r)
    for model in (NodeSessionRecord, MembershipChange):
        for r in db.scalars(select(model).where(model.attempt_id == row.id)):
            db.delete(r)
    db.delete(row)
    db.flush()


def read_table(engine: Engine, model, pipeline: str | None = None) -> pd.DataFrame:
    """All rows of one model (optionally one pipeline's) as a DataFrame."""
    stmt = select(model)
    if pipeline is not None:
        stmt = stmt.where(model.pipeline == pipeline)
    cols = [c.name for c in model.__table__.columns]
    with session_scope(engine) as db:
        rows = [{c: getattr(r, c) for c in cols} for r in db.scalars(stmt)]
    return pd.DataFrame(rows, columns=cols)


def node_sessions_as_dataclasses(engine: Engine, pipeline: str | None = None) -> list[NodeSession]:
    """Recorded sessions as the fleet's ``NodeSession`` (for fleet.stats.session_stats)."""
    df = read_table(engine, NodeSessionRecord, pipeline)
    out: list[NodeSession] = []
    for r in df.to_dict("records"):
        out.append(NodeSession(
            node_id=r["node_id"], stage=r["stage"], attempt=int(r["attempt"]), provider=r["provider"],
            cloud=r["cloud"], region=r["region"], zone=r["zone"], instance_type=r["instance_type"],
            spot=bool(r["spot"]), price_per_hour=float(r["price_per_hour"]),
            launched_at=float(r["launched_at"]), ready_at=_nan_none(r["ready_at"]),
            ended_at=_nan_none(r["ended_at"]), end_reason=r["end_reason"],
            notice_at=_nan_none(r["notice_at"]), first_step=_nan_int(r["first_step"]),
            last_step=_nan_int(r["last_step"]), last_checkpoint_step=_nan_int(r["last_checkpoint_step"]),
            injected=bool(r.get("injected") or False),
        ))
    return out


def _nan_none(v) -> float | None:
    return None if v is None or pd.isna(v) else float(v)


def _nan_int(v) -> int | None:
    return None if v is None or pd.isna(v) else int(v)


def latest_checkpoint_step(engine: Engine, pipeline: str, stage: str, run_id: str | None = None) -> int | None:
    """Highest committed checkpoint step recorded for a stage (one Dagster run, or any)."""
    from sqlalchemy import func

    stmt = select(func.max(CheckpointRecord.step)).where(
        CheckpointRecord.pipeline == pipeline, CheckpointRecord.stage == stage)
    if run_id is not None:
        stmt = stmt.where(CheckpointRecord.run_id == run_id)
    with session_scope(engine) as db:
        return db.scalar(stmt)


def iter_models() -> Iterable[type]:
    return (StageAttempt, NodeSessionRecord, PreemptionEvent, CheckpointRecord, CostLine, MembershipChange)
