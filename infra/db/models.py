"""SQLAlchemy 2 typed models of the statistics database.

Times are unix timestamps in MARKET SECONDS (float, UTC) so they match the fleet's
``NodeSession`` and the training events exactly: real seconds on a real cloud; the
local fleet reports its emulated market's clock (fleet/providers/local/clock.py), so
no row carries a time scale (migration 0002 converted the old rows and dropped that column).
Durations (``stall_seconds``, cost-line ``seconds``) are market seconds too; prices in
$/h, money in $ (docs/database.md, "Units").
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import (
    Boolean,
    Date,
    Float,
    ForeignKey,
    Integer,
    MetaData,
    String,
    UniqueConstraint,
    false,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from fleet.contract import session_cost_usd

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class StageAttempt(Base):
    """One attempt of one stage (a Dagster step try); retries are new attempts."""

    __tablename__ = "stage_attempts"
    __table_args__ = (UniqueConstraint("run_id", "pipeline", "stage", "attempt"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(String(64), index=True)
    #: the Dagster run group: ``dagster/root_run_id`` of a re-execution / retry run, else
    #: ``run_id`` (migration 0004; older rows were given their own run id)
    root_run_id: Mapped[str | None] = mapped_column(String(64), nullable=True, index=True)
    pipeline: Mapped[str] = mapped_column(String(128), index=True)
    stage: Mapped[str] = mapped_column(String(128), index=True)
    attempt: Mapped[int] = mapped_column(Integer)
    provider: Mapped[str] = mapped_column(String(32))
    started_at: Mapped[float] = mapped_column(Float)
    ended_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    status: Mapped[str] = mapped_column(String(16))  # running | completed | failed
    start_step: Mapped[int | None] = mapped_column(Integer, nullable=True)  # resumed from
    final_step: Mapped[int | None] = mapped_column(Integer, nullable=True)
    total_steps: Mapped[int | None] = mapped_column(Integer, nullable=True)
    used_on_demand: Mapped[bool] = mapped_column(Boolean, default=False)
    error: Mapped[str | None] = mapped_column(String(2000), nullable=True)

    sessions: Mapped[list[NodeSessionRecord]] = relationship(back_populates="attempt_row")


class NodeSessionRecord(Base):
    """One node's life in a zone: launched, (ready), ended by completion/preemption/failure."""

    __tablename__ = "node_sessions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    attempt_id: Mapped[int | None] = mapped_column(
        ForeignKey("stage_attempts.id", ondelete="CASCADE"), nullable=True, index=True)
    node_id: Mapped[str] = mapped_column(String(128), index=True)
    pipeline: Mapped[str] = mapped_column(String(128), index=True)
    stage: Mapped[str] = mapped_column(String(128))
    attempt: Mapped[int] = mapped_column(Integer)
    provider: Mapped[str] = mapped_column(String(32))
    cloud: Mapped[str] = mapped_column(String(32))
    region: Mapped[str] = mapped_column(String(64))
    zone: Mapped[str] = mapped_column(String(64), index=True)
    instance_type: Mapped[str] = mapped_column(String(64))
    spot: Mapped[bool] = mapped_column(Boolean)
    price_per_hour: Mapped[float] = mapped_column(Float)
    on_demand_price_per_hour: Mapped[float | None] = mapped_column(Float, nullable=True)
    launched_at: Mapped[float] = mapped_column(Float)
    ready_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    ended_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    end_reason: Mapped[str] = mapped_column(String(16))
    notice_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    first_step: Mapped[int | None] = mapped_column(Integer, nullable=True)
    last_step: Mapped[int | None] = mapped_column(Integer, nullable=True)
    last_checkpoint_step: Mapped[int | None] = mapped_column(Integer, nullable=True)
    #: ended by a fault injection, not the market (``NodeSession.injected``; revision 0005)
    injected: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False,
                                           server_default=false())

    attempt_row: Mapped[StageAttempt | None] = relationship(back_populates="sessions")

    @property
    def hours(self) -> float:
        """Billed (market) hours: end - launch; a running session counts zero."""
        if self.ended_at is None:
            return 0.0
        return max(0.0, self.ended_at - self.launched_at) / 3600.0

    @property
    def cost(self) -> float:
        """Billed dollars at the session's price (``fleet.contract.session_cost_usd``)."""
        return session_cost_usd(self.price_per_hour, self.launched_at, self.ended_at)


class PreemptionEvent(Base):
    """A preemption of a node: notice (if any), the kill, and whether an emergency save fit."""

    __tablename__ = "preemption_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    node_session_id: Mapped[int | None] = mapped_column(
        ForeignKey("node_sessions.id", ondelete="CASCADE"), nullable=True, index=True)
    node_id: Mapped[str] = mapped_column(String(128))
    pipeline: Mapped[str] = mapped_column(String(128), index=True)
    stage: Mapped[str] = mapped_column(String(128))
    cloud: Mapped[str] = mapped_column(String(32))
    zone: Mapped[str] = mapped_column(String(64), index=True)
    notice_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    preempted_at: Mapped[float] = mapped_column(Float)
    notice_source: Mapped[str | None] = mapped_column(String(32), nullable=True)
    step_at_preemption: Mapped[int | None] = mapped_column(Integer, nullable=True)
    last_checkpoint_step: Mapped[int | None] = mapped_column(Integer, nullable=True)
    emergency_saved: Mapped[bool] = mapped_column(Boolean, default=False)


class CheckpointRecord(Base):
    """A committed checkpoint (from a ``save_committed`` training event)."""

    __tablename__ = "checkpoints"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    pipeline: Mapped[str] = mapped_column(String(128), index=True)
    stage: Mapped[str] = mapped_column(String(128), index=True)
    attempt: Mapped[int] = mapped_column(Integer)
    run_id: Mapped[str] = mapped_column(String(64))
    node_id: Mapped[str | None] = mapped_column(String(128), nullable=True)
    step: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(16))  # periodic | insurance | emergency
    bytes: Mapped[int | None] = mapped_column(Integer, nullable=True)
    stall_seconds: Mapped[float | None] = mapped_column(Float, nullable=True)
    persist_seconds: Mapped[float | None] = mapped_column(Float, nullable=True)
    location: Mapped[str | None] = mapped_column(String(1000), nullable=True)
    committed_at: Mapped[float] = mapped_column(Float)


class CostLine(Base):
    """One slice of spend: (pipeline, stage, zone, day, node, category) -> seconds and $.

    ``category`` is one of ``useful``, ``checkpoint``, ``membership`` (an elastic stage's
    shrink / grow pauses), ``redo``, ``restart``, ``idle``; the lines of a node session
    add up to that session's billed cost exactly.
    ``on_demand_dollars`` is what on-demand would have cost for the same USEFUL work
    (non-zero only on ``useful`` lines).
    """

    __tablename__ = "cost_lines"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    node_session_id: Mapped[int | None] = mapped_column(
        ForeignKey("node_sessions.id", ondelete="CASCADE"), nullable=True, index=True)
    run_id: Mapped[str] = mapped_column(String(64))
    pipeline: Mapped[str] = mapped_column(String(128), index=True)
    stage: Mapped[str] = mapped_column(String(128))
    zone: Mapped[str] = mapped_column(String(64))
    day: Mapped[dt.date] = mapped_column(Date)
    spot: Mapped[bool] = mapped_column(Boolean)
    category: Mapped[str] = mapped_column(String(16))
    seconds: Mapped[float] = mapped_column(Float)
    dollars: Mapped[float] = mapped_column(Float)
    on_demand_dollars: Mapped[float] = mapped_column(Float, default=0.0)


COST_CATEGORIES = ("useful", "checkpoint", "membership", "redo", "restart", "idle")


class MembershipChange(Base):
    """One group an elastic multi-node stage formed (rank 0's ``membership`` event).

    ``kind``: ``form`` (the attempt's first group), ``shrink`` / ``grow`` / ``reform``
    (fewer / more / as many nodes as the group before, state handed over in memory),
    ``restore`` (every node was lost: the group read the checkpoint; its cost is in
    the ``restart`` category). The TAX of a shrink / grow / reform: every member that was
    training pauses from its own hand-off to the group's first completed step;
    ``node_seconds`` is the sum of those pauses, ``pause_seconds`` the longest, ``dollars``
    at each member's price (fleet/providers/membership.py). Billed (market) seconds; the
    same seconds are the members' ``membership`` cost lines (attempts recorded since
    that category exists; earlier ones kept them inside ``useful``).
    """

    __tablename__ = "membership_changes"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    attempt_id: Mapped[int | None] = mapped_column(
        ForeignKey("stage_attempts.id", ondelete="CASCADE"), nullable=True, index=True)
    run_id: Mapped[str] = mapped_column(String(64))
    pipeline: Mapped[str] = mapped_column(String(128), index=True)
    stage: Mapped[str] = mapped_column(String(128))
    attempt: Mapped[int] = mapped_column(Integer)
    formed_at: Mapped[float] = mapped_column(Float)  # the group's first completed step
    kind: Mapped[str] = mapped_column(String(16))  # form | shrink | grow | reform | restore
    step: Mapped[int] = mapped_column(Integer)
    world_size_before: Mapped[int | None] = mapped_column(Integer, nullable=True)
    world_size: Mapped[int] = mapped_column(Integer)
    state_from: Mapped[str] = mapped_column(String(16))  # handoff | peer | checkpoint | fresh
    nodes: Mapped[str] = mapped_column(String(2000))  # node ids of the group, by rank
    pause_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    node_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    dollars: Mapped[float] = mapped_column(Float, default=0.0)
