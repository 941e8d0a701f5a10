"""Split each node session's billed time into useful compute and the four taxes.

Pure functions over a ``NodeSession`` and that node's training events. For one
session (times in unix MARKET seconds: real seconds on a real cloud, the emulated
market's clock on the local fleet, which converts before it reports)::

    launched ──restart──▶ compute_start ──active──▶ compute_end ──idle──▶ ended
                                         │ = useful + checkpoint + redo

- restart:    launch to the first sign of training (``restore``/``start``/first ``progress``):
              allocation, preparation, restore.
- checkpoint: the training loop's stall for saves (``save_committed.stall_seconds``).
- redo:       compute on steps that were lost (done after the last checkpoint of a
              preempted or failed node and therefore recomputed later).
- useful:     the rest of the active time.
- idle:       after the last training event until the node ends (notice grace, shutdown).

The five parts add up to the session's duration exactly, so spend per category adds
up to the session's billed cost (reconciliation is checked by an asset check). The
session's cost itself has one definition, ``fleet.contract.session_cost_usd``: a
slice's dollars are that cost times the slice's share of the session's seconds.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass

from checkpointing.events import Event
from fleet.contract import session_cost_usd
from fleet.providers.base import NodeSession

CATEGORIES = ("useful", "checkpoint", "redo", "restart", "idle")


@dataclass(frozen=True)
class SessionBreakdown:
    """Market seconds per category of one session (they sum to ``ended - launched``)."""

    useful: float
    checkpoint: float
    redo: float
    restart: float
    idle: float
    steps_done: int
    steps_lost: int

    def as_dict(self) -> dict[str, float]:
        return {c: getattr(self, c) for c in CATEGORIES}


def _step_of(ev: Event) -> int | None:
    step = ev.data.get("step")
    return int(step) if isinstance(step, (int, float)) else None


def breakdown(session: NodeSession, events: Iterable[Event]) -> SessionBreakdown:
    """Split one ended session; ``events`` may include other nodes' (they are filtered)."""
    start = session.launched_at
    end = session.ended_at if session.ended_at is not None else start
    total = max(0.0, end - start)
    mine = sorted((e for e in events if e.node_id == session.node_id and start - 1 <= e.time <= end + 1),
                  key=lambda e: e.time)
    train = [e for e in mine if e.kind in ("start", "restore", "progress", "save_started",
                                           "save_committed", "save_failed", "interval", "notice", "exit")]
    if not train or total == 0.0:
        return SessionBreakdown(0.0, 0.0, 0.0, total, 0.0, 0, 0)
    first_compute = next((e.time for e in train if e.kind == "progress"), None)
    begin_marks = [e.time for e in train if e.kind in ("restore", "start")]
    compute_start = max(begin_marks) if begin_marks else (first_compute or train[0].time)
    if first_compute is not None and begin_marks:
        compute_start = min(compute_start, first_compute)
    compute_start = min(max(compute_start, start), end)
    activity = [e.time for e in train if e.kind in ("progress", "save_committed", "save_failed", "exit")]
    compute_end = min(max(max(activity) if activity else compute_start, compute_start), end)
    restart = compute_start - start
    idle = end - compute_end
    active = compute_end - compute_start
    stall = sum(float(e.data.get("stall_seconds") or 0.0) for e in train if e.kind == "save_committed")
    checkpoint = min(stall, active)
    compute = active - checkpoint

    steps = [s for s in (_step_of(e) for e in train if e.kind in ("progress", "save_committed", "exit"))
             if s is not None]
    first_step = session.first_step
    if first_step is None:
        restored = [_step_of(e) for e in train if e.kind in ("restore", "start")]
        restored = [s for s in restored if s is not None]
        first_step = restored[-1] if restored else (min(steps) if steps else 0)
    last_step = session.last_step if session.last_step is not None else (max(steps) if steps else first_step)
    steps_done = max(0, last_step - first_step)
    lost = 0
    if session.end_reason in ("preempted", "failed", "cancelled"):
        ckpt = session.last_checkpoint_step
        if ckpt is None:
            committed = [_step_of(e) for e in train if e.kind == "save_committed"]
            committed = [s for s in committed if s is not None]
            ckpt = max(committed) if committed else first_step
        lost = max(0, last_step - max(ckpt, first_step))
    redo = compute * (lost / steps_done) if steps_done > 0 else 0.0
    useful = compute - redo
    return SessionBreakdown(useful, checkpoint, redo, restart, idle, steps_done, lost)


def _day_fractions(start: float, end: float) -> list[tuple[dt.date, float]]:
    """(UTC day, fraction of [start, end) falling on that day)."""
    if end <= start:
        return [(dt.datetime.fromtimestamp(start, dt.UTC).date(), 1.0)]
    out = []
    t = start
    while t < end:
        day = dt.datetime.fromtimestamp(t, dt.UTC).date()
        nxt = dt.datetime.combine(day + dt.timedelta(days=1), dt.time(), dt.UTC).timestamp()
        seg_end = min(nxt, end)
        out.append((day, (seg_end - t) / (end - start)))
        t = seg_end
    return out


@dataclass(frozen=True)
class CostSlice:
    """One cost line: ``seconds`` are billed (market) seconds; money in $."""

    day: dt.date
    category: str
    seconds: float
    dollars: float
    on_demand_dollars: float


def cost_slices(
    session: NodeSession,
    events: Iterable[Event],
    on_demand_price_per_hour: float,
) -> list[CostSlice]:
    """Cost lines of one session per (day, category); dollars sum to the session's cost.

    ``on_demand_dollars`` prices the useful compute at the on-demand rate: what the
    same useful work would have cost without spot.
    """
    b = breakdown(session, events)
    end = session.ended_at if session.ended_at is not None else session.launched_at
    total = end - session.launched_at
    cost = session_cost_usd(session.price_per_hour, session.launched_at, session.ended_at)
    od_cost = session_cost_usd(on_demand_price_per_hour, session.launched_at, session.ended_at)
    out: list[CostSlice] = []
    for day, frac in _day_fractions(session.launched_at, end):
        for cat, secs in b.as_dict().items():
            billed = secs * frac
            share = billed / total if total > 0 else 0.0
            out.append(CostSlice(
                day=day, category=cat, seconds=billed, dollars=cost * share,
                on_demand_dollars=od_cost * share if cat == "useful" else 0.0,
            ))
    return out
