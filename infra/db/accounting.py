"""Split each node session's billed time into useful compute and the five taxes.

Pure functions over a ``NodeSession`` and that node's training events. For one
session (times in unix MARKET seconds: real seconds on a real cloud, the emulated
market's clock on the local fleet, which converts before it reports)::

    launched ──restart──▶ compute_start ──active──▶ compute_end ──idle──▶ ended
                                         │ = useful + checkpoint + membership + redo

- restart:    launch to the first sign of training: the last ``restore``/``start`` before
              the first completed step (``progress``, or in an elastic group the first
              ``membership``), else that step: allocation, preparation, restore. (An
              elastic member emits ``start`` again at every re-formation: not a relaunch.)
- checkpoint: the training loop's stall for saves (``save_committed.stall_seconds``).
- membership: an elastic multi-node stage's shrink / grow / re-form (docs/elastic.md):
              the node's pause from its own hand-off to the new group's first
              completed step (``fleet.providers.membership.paused_intervals``, the
              same seconds the ``membership_changes`` table sums per change), clipped
              to the active time. Zero for single-node stages.
- redo:       compute on steps that were lost (done after the last checkpoint of a
              preempted or failed node and therefore recomputed later); compute is the
              active time less checkpoint and membership (a pause computes no step).
- useful:     the rest of the active time.
- idle:       after the last training event until the node ends (notice grace, shutdown).

The six parts add up to the session's duration exactly, so spend per category adds
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
from fleet.providers.membership import paused_intervals

CATEGORIES = ("useful", "checkpoint", "membership", "redo", "restart", "idle")


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
    membership: float = 0.0

    def as_dict(self) -> dict[str, float]:
        return {c: getattr(self, c) for c in CATEGORIES}


def _step_of(ev: Event) -> int | None:
    step = ev.data.get("step")
    return int(step) if isinstance(step, (int, float)) else None


def _covered(spans: Iterable[tuple[float, float]], lo: float, hi: float) -> float:
    """Seconds of [lo, hi] covered by the union of ``spans``."""
    clipped = sorted((max(a, lo), min(b, hi)) for a, b in spans)
    total, reach = 0.0, lo
    for a, b in clipped:
        a = max(a, reach)
        if b > a:
            total += b - a
            reach = b
    return total


def breakdown(session: NodeSession, events: Iterable[Event],
              paused: Iterable[tuple[float, float]] | None = None) -> SessionBreakdown:
    """Split one ended session; ``events`` may include other nodes' (they are filtered).

    ``paused``: this node's membership pauses (``paused_intervals(attempt events)[node]``);
    None derives them from ``events``, which then must hold the attempt's membership
    events of every node (a node's own events alone do not say what its group was).
    """
    events = list(events)
    if paused is None:
        paused = paused_intervals(events).get(session.node_id, [])
    start = session.launched_at
    end = session.ended_at if session.ended_at is not None else start
    total = max(0.0, end - start)
    mine = sorted((e for e in events if e.node_id == session.node_id and start - 1 <= e.time <= end + 1),
                  key=lambda e: e.time)
    train = [e for e in mine if e.kind in ("start", "restore", "progress", "save_started",
                                           "save_committed", "save_failed", "interval", "notice", "exit",
                                           "membership", "handoff")]
    if not train or total == 0.0:
        return SessionBreakdown(0.0, 0.0, 0.0, total, 0.0, 0, 0, 0.0)
    # a completed step: ``progress`` (rank 0 of any stage), or the ``membership`` event every
    # member of an elastic group emits after the group's first step -- an elastic member
    # emits ``start`` again at each re-formation, which is not a relaunch
    first_compute = next((e.time for e in train if e.kind in ("progress", "membership")), None)
    begin_marks = [e.time for e in train if e.kind in ("restore", "start")]
    if first_compute is not None:  # the last begin mark before the first step
        before = [t for t in begin_marks if t <= first_compute]
        compute_start = max(before) if before else first_compute
    else:
        compute_start = max(begin_marks) if begin_marks else train[0].time
    compute_start = min(max(compute_start, start), end)
    activity = [e.time for e in train if e.kind in ("progress", "save_committed", "save_failed", "exit",
                                                     "membership", "handoff")]
    compute_end = min(max(max(activity) if activity else compute_start, compute_start), end)
    restart = compute_start - start
    idle = end - compute_end
    active = compute_end - compute_start
    stall = sum(float(e.data.get("stall_seconds") or 0.0) for e in train if e.kind == "save_committed")
    checkpoint = min(stall, active)
    membership = min(_covered(paused, compute_start, compute_end), active - checkpoint)
    compute = active - checkpoint - membership

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
    return SessionBreakdown(useful, checkpoint, redo, restart, idle, steps_done, lost, membership)


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
    paused: Iterable[tuple[float, float]] | None = None,
) -> list[CostSlice]:
    """Cost lines of one session per (day, category); dollars sum to the session's cost.

    ``on_demand_dollars`` prices the useful compute at the on-demand rate: what the
    same useful work would have cost without spot. ``paused``: see :func:`breakdown`.
    """
    b = breakdown(session, events, paused)
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
