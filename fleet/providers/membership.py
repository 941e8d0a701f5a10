"""Membership changes of elastic multi-node stages and the tax of each shrink / grow.

An elastic stage (``nodes: K > 1``, docs/elastic.md) trains on a group of nodes that
changes when a zone is reclaimed (shrink) or capacity returns (grow). Every member of a
group emits one ``membership`` training event after the group's first completed step
(``rank``, ``step``, ``world_size``, ``state_from``: handoff | peer | checkpoint |
fresh); a member of a group that stops for a change emits a ``handoff`` event when it
has put its state aside. Pure functions of those events (the recorder stores the result
in ``membership_changes``; the local fleet reports it in ``StageResult.info``).

The TAX of a change (shrink, grow, or a re-form at the same size) is the time the nodes
that were training are billed without training: for each member of the new group that
handed off, from its own last ``handoff`` event to its own ``membership`` event of the
new group (the new group's first completed step)::

    node_seconds = sum over those members of (membership.time - handoff.time)
    dollars      = sum over those members of (membership.time - handoff.time) x price / 3600
    pause        = the longest of those intervals

Newly joined members (no hand-off) are starting up: their wait is the ``launch`` /
``restart`` part of their own sessions, not counted again here. A survivor that missed
a round (it joins the one after) is charged from its own hand-off, so its whole wait is
counted once. The workers' ``pause_seconds`` measure the same interval from the group's
earliest hand-off file write (milliseconds before the event). The kind follows who paused,
not where the state came from: a group that read the checkpoint although some member had
handed off (the members' hand-offs were older than a complete checkpoint,
checkpointing/elastic.py ``ElasticSession.start``) paused those members like any change,
so it is a shrink / grow / re-form by size with ``state_from="checkpoint"``, taxed the
same way. Only a group in which no member handed off (every node of the previous group
was lost) is a ``restore``: its cost is the ``restart`` category of the new sessions, not
a membership tax.

The same per-node intervals (:func:`paused_intervals`) are the ``membership`` category
of the node sessions' cost split (infra/db/accounting.py): the paused seconds are billed
there, not as ``useful``, so the two agree to float rounding.

Seconds are the events' clock: market seconds, as every provider reports its events
(the local fleet converts its compressed clock, fleet/providers/local/clock.py), i.e.
billed seconds like the node sessions. The workers' ``pause_seconds`` stay in their own
wall seconds (x the local fleet's ``time_scale.factor`` to compare).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from checkpointing.events import Event
from fleet.contract import billed_usd
from fleet.providers.base import NodeSession

KINDS = ("form", "shrink", "grow", "reform", "restore")
TAXED = ("shrink", "grow", "reform")


@dataclass(frozen=True)
class Change:
    """One group an elastic stage formed (market seconds, $)."""

    formed_at: float
    kind: str
    step: int
    world_size_before: int | None
    world_size: int
    state_from: str
    nodes: tuple[str, ...]  # by rank
    pause_seconds: float  # the longest member pause
    node_seconds: float
    dollars: float


def _groups(events: Iterable[Event]) -> tuple[list[list[Event]], dict[int, tuple[float, float]]]:
    """The groups in the order they formed (each: its members' ``membership`` events) and
    each member's pause interval (its own last hand-off, its own ``membership`` event),
    keyed by ``id()`` of that membership event.

    A group is NOT identified by its step: under load the rendezvous can close a round
    before every node has re-joined, and a later group may resume from an older hand-off
    (the same step as an earlier group). Groups form one at a time (one rendezvous round
    at a time; the next opens only when every member of the old one has left), so a
    group's ``membership`` events are consecutive among the attempt's ``membership``
    events: a new group starts at a different step or world size, at a rank the current
    group already has, or once the current group has all its ``world_size`` members."""
    evs = sorted(events, key=lambda e: e.time)
    groups: list[list[Event]] = []
    last_handoff: dict[str, float] = {}  # node -> its latest hand-off not yet followed by a group
    pauses: dict[int, tuple[float, float]] = {}
    for e in evs:
        if e.kind == "handoff" and e.node_id:
            last_handoff[e.node_id] = e.time
        elif e.kind == "membership" and isinstance(e.data.get("step"), (int, float)):
            cur = groups[-1] if groups else None
            key = (int(e.data["step"]), e.data.get("world_size"))
            if (cur is None or key != (int(cur[0].data["step"]), cur[0].data.get("world_size"))
                    or any(m.data.get("rank") == e.data.get("rank") for m in cur)
                    or len(cur) >= int(cur[0].data.get("world_size") or 0)):
                groups.append([e])
            else:
                cur.append(e)
            t = last_handoff.pop(e.node_id, None) if e.node_id else None
            if t is not None:
                pauses[id(e)] = (t, max(t, e.time))
    return groups, pauses


def _changes(events: Iterable[Event], price: dict[str, float]
             ) -> tuple[list[Change], dict[str, list[tuple[float, float]]]]:
    groups, pauses = _groups(events)
    out: list[Change] = []
    paused: dict[str, list[tuple[float, float]]] = {}
    before: int | None = None
    for group in groups:
        e = next((m for m in group if m.data.get("rank") == 0), None)
        if e is None:  # rank 0's event is missing: the group is not known well enough to tax
            continue
        step, size = int(e.data["step"]), int(e.data["world_size"])
        source = str(e.data.get("state_from") or "fresh")
        group = sorted(group, key=lambda m: int(m.data.get("rank") or 0))
        nodes = tuple(m.node_id or "" for m in group)
        if before is None:
            kind = "form"
        elif source in ("handoff", "peer") or any(id(m) in pauses for m in group):
            # members that handed off were paused, whatever state the group resumed from
            kind = "shrink" if size < before else "grow" if size > before else "reform"
        else:  # no member handed off: every node of the previous group was lost
            kind = "restore"
        spans = ({m.node_id or "": pauses[id(m)] for m in group if id(m) in pauses}
                 if kind in TAXED else {})
        for n, span in spans.items():
            paused.setdefault(n, []).append(span)
        paid = {n: b - a for n, (a, b) in spans.items()}
        out.append(Change(formed_at=e.time, kind=kind, step=step, world_size_before=before,
                          world_size=size, state_from=source, nodes=nodes,
                          pause_seconds=max(paid.values(), default=0.0),
                          node_seconds=sum(paid.values()),
                          dollars=sum(billed_usd(price.get(n, 0.0), p) for n, p in paid.items())))
        before = size
    return out, paused


def membership_changes(events: Iterable[Event], sessions: Sequence[NodeSession]) -> list[Change]:
    """The groups of one attempt, in order, from its training events (empty: not elastic)."""
    return _changes(events, {s.node_id: s.price_per_hour for s in sessions})[0]


def paused_intervals(events: Iterable[Event]) -> dict[str, list[tuple[float, float]]]:
    """Per node, the (hand-off, membership) intervals the changes of one attempt tax
    (event seconds): what :func:`membership_changes` sums into ``node_seconds``, per node,
    so that the session breakdown (infra/db/accounting.py) bills the same seconds as
    the ``membership`` category. Empty for a stage that is not elastic."""
    return _changes(events, {})[1]
