"""The cost report of an elastic stage: node-hours per node and the tax of each shrink / grow.

An elastic attempt's event log (4 nodes; zone B reclaimed at step 62: 4 -> 2; two
replacements join at step 200: 2 -> 4) goes through the real recorder (infra/db, SQLite)
and the real report builder. The report's membership tax must equal what the event log
says: per change, each member that was training pauses from its own hand-off to the new
group's first completed step (the interval the workers report as ``pause_seconds``), at
its price, in billed seconds. The same seconds are the `membership` category of the cost
split: the split still sums to each session's cost, the report's useful work is reduced
by exactly the tax, and the FOCUS export carries it as ``x_MembershipTaxCost``.
"""

from __future__ import annotations

import dataclasses

import pytest

from assets import cost_tables as ct
from assets import focus
from assets.cost_report import ReportSelection, build_report
from checkpointing.events import Event
from fleet.contract import session_cost_usd
from fleet.providers.base import NodeSession
from fleet.providers.local.clock import MarketClock
from fleet.providers.membership import membership_changes, paused_intervals
from infra.db.accounting import breakdown, cost_slices
from infra.db.models import CostLine, NodeSessionRecord
from infra.db.recorder import read_table, record_attempt
from infra.db.session import make_engine, upgrade

T0 = 1_700_000_000.0
FACTOR = 120.0  # market seconds per wall second (the local fleet's compressed clock)
CLOCK = MarketClock(T0, FACTOR)
PRICE = {"n0": 0.9, "n1": 0.9, "n2": 1.1, "n3": 1.1, "n4": 1.3, "n5": 1.3}
ZONE = {"n0": "us-east-1a", "n1": "us-east-1a", "n2": "us-east-1b", "n3": "us-east-1b",
        "n4": "us-east-1b", "n5": "us-east-1b"}


def _membership(t: float, node: str, rank: int, step: int, world: int, source: str,
                pause: float | None) -> Event:
    data = {"rank": rank, "world_size": world, "step": step, "state_from": source, "src_rank": 0}
    if pause is not None:
        data.update(pause_seconds=pause, lost_at=t - pause, first_step_at=t)
    return Event("membership", t, node, data)


def _wall_log() -> tuple[list[NodeSession], list[Event]]:
    """The attempt on the wall clock, as the node processes and the controller see it."""
    ev: list[Event] = []
    for r, n in enumerate(["n0", "n1", "n2", "n3"]):  # the first group: 4 nodes, fresh
        ev += [Event("start", T0 + 5, n, {}), _membership(T0 + 5.2, n, r, 0, 4, "fresh", None)]
    # zone B reclaimed: n2, n3 leave at step 62; n0, n1 hand off and re-form at world 2
    t1 = T0 + 30.0
    ev += [Event("exit", t1, n, {"reason": "preempted", "step": 62, "world_size": 4}) for n in ("n2", "n3")]
    ev += [Event("handoff", t1 + 0.001 * i, n, {"step": 62, "reason": "peer_leaving", "world_size": 4})
           for i, n in enumerate(("n0", "n1"))]
    # every member starts again in the new group (the worker emits ``start`` at each formation)
    ev += [Event("start", t1 + 1.5, n, {"resumed_from_step": 62}) for n in ("n0", "n1")]
    ev += [_membership(t1 + 1.7, "n0", 0, 62, 2, "handoff", 1.7),
           _membership(t1 + 1.7005, "n1", 1, 62, 2, "peer", 1.7005)]
    # capacity returns: n4, n5 join at step 200 and receive the state from a peer
    t2 = T0 + 80.0
    ev += [Event("handoff", t2 + 0.002 * i, n, {"step": 200, "reason": "peer_joining", "world_size": 2})
           for i, n in enumerate(("n0", "n1"))]
    ev += [Event("start", t2 + 2.0, n, {"resumed_from_step": 200}) for n in ("n0", "n1", "n4", "n5")]
    ev += [_membership(t2 + 2.2, n, r, 200, 4, "handoff" if r == 0 else "peer", 2.2)
           for r, n in enumerate(("n0", "n1", "n4", "n5"))]
    t3 = T0 + 120.0
    ev += [Event("exit", t3, n, {"reason": "completed", "step": 300, "world_size": 4})
           for n in ("n0", "n1", "n4", "n5")]
    ends = {"n2": t1 + 0.5, "n3": t1 + 0.5}
    starts = {"n4": t2 - 10.0, "n5": t2 - 10.0}
    sessions = [NodeSession(node_id=n, stage="train", attempt=1, provider="local", cloud="aws",
                            region=ZONE[n][:-1], zone=ZONE[n], instance_type="p3.2xlarge", spot=True,
                            price_per_hour=PRICE[n], launched_at=starts.get(n, T0),
                            ready_at=starts.get(n, T0) + 1, ended_at=ends.get(n, t3 + 0.5),
                            end_reason="preempted" if n in ends else "completed",
                            notice_at=t1 - 0.5 if n in ends else None, first_step=0, last_step=300,
                            last_checkpoint_step=300)
                for n in PRICE]
    return sessions, ev


def _attempt_log() -> tuple[list[NodeSession], list[Event]]:
    """What leaves the local fleet: sessions and events in market time (the workers'
    pause_seconds stay in their own wall seconds)."""
    sessions, ev = _wall_log()
    return [CLOCK.session(x) for x in sessions], [CLOCK.event(e) for e in ev]


def _record(eng, sessions, events):
    record_attempt(eng, run_id="run-e", pipeline="demo", stage="train", attempt=1, provider="local",
                   status="completed", sessions=sessions, events=events, started_at=T0, ended_at=T0 + 121,
                   start_step=0, final_step=300, total_steps=300, on_demand_price=lambda s: 3.06)


@pytest.fixture
def recorded(tmp_path):
    eng = make_engine(f"sqlite:///{tmp_path / 'stats.db'}")
    upgrade(eng)
    sessions, events = _attempt_log()
    _record(eng, sessions, events)
    _record(eng, sessions, events)  # re-recording the attempt replaces its rows
    return eng, sessions, events


@pytest.fixture
def report(recorded, tmp_path):
    eng, sessions, events = recorded
    rep = build_report(eng, "demo", tmp_path / "reports", ReportSelection(run_ids=("run-e",)),
                       stage_order=["train"], write_focus=False)
    return rep, sessions, events


def _tax_from_the_log(events, sessions, step):
    """(node-seconds, $) of the group that starts at ``step``, straight from the event log:
    every member that handed off pauses from its own hand-off to its own membership event."""
    price = {s.node_id: s.price_per_hour for s in sessions}
    node_s = usd = 0.0
    for m in events:
        if m.kind == "membership" and m.data["step"] == step:
            offs = [h.time for h in events if h.kind == "handoff" and h.node_id == m.node_id and h.time < m.time]
            if offs:
                pause = m.time - max(offs)
                node_s += pause
                usd += pause * price[m.node_id] / 3600.0
    return node_s, usd


def test_report_membership_tax_equals_the_event_log(report):
    rep, sessions, events = report
    m = rep.membership
    assert list(m["kind"]) == ["shrink", "grow"]
    assert list(m["world_sizes"]) == ["4 -> 2", "2 -> 4"]
    assert list(m["step"]) == [62, 200]
    want = [_tax_from_the_log(events, sessions, step) for step in (62, 200)]
    # unix-second floats: 2e-7 s resolution
    assert m["node_seconds"].tolist() == pytest.approx([w[0] for w in want], rel=1e-6)
    assert m["membership_tax_usd"].tolist() == pytest.approx([w[1] for w in want], rel=1e-6)
    # the workers' own pause_seconds (rank 0 of each group) say the same, to the ms:
    # shrink: both survivors paused; grow: the two running nodes paused, the two new
    # ones were starting up (their own sessions' launch time, not a membership tax)
    logged = {e.data["step"]: e.data["pause_seconds"] for e in events
              if e.kind == "membership" and e.data["rank"] == 0 and "pause_seconds" in e.data}
    assert m["node_seconds"].tolist() == pytest.approx([2 * logged[62] * FACTOR, 2 * logged[200] * FACTOR],
                                                       rel=1e-3)
    assert m["pause_seconds"].tolist() == pytest.approx([logged[62] * FACTOR, logged[200] * FACTOR], rel=1e-3)
    # the rendered report says the same
    total = sum(w[1] for w in want)
    assert "### Elastic stages: membership changes" in rep.markdown
    assert f"**${total:,.4f}** over 2 change(s)" in rep.markdown
    assert "| train | 1 | 62 | shrink | 4 -> 2 |" in rep.markdown


def _split_without_membership(sessions, events):
    """$ and seconds per category if the pauses were not their own category (as before)."""
    usd: dict[str, float] = {}
    secs: dict[str, float] = {}
    od = 0.0
    for s in sessions:
        for sl in cost_slices(s, [e for e in events if e.node_id == s.node_id], 3.06, paused=[]):
            usd[sl.category] = usd.get(sl.category, 0.0) + sl.dollars
            secs[sl.category] = secs.get(sl.category, 0.0) + sl.seconds
            od += sl.on_demand_dollars
    return usd, secs, od


def test_the_split_sums_to_each_session_cost_with_a_membership_slice(recorded):
    eng, sessions, events = recorded
    paused = paused_intervals(events)
    assert set(paused) == {"n0", "n1"}  # the nodes that were training; n4, n5 were starting up
    lines = read_table(eng, CostLine, "demo")
    nodes = read_table(eng, NodeSessionRecord, "demo").set_index("id")["node_id"]
    lines["node_id"] = lines["node_session_id"].map(nodes)
    for s in sessions:
        mine = lines[lines["node_id"] == s.node_id]
        cost = session_cost_usd(s.price_per_hour, s.launched_at, s.ended_at)
        assert mine["dollars"].sum() == pytest.approx(cost, rel=1e-12)
        member = mine.loc[mine["category"] == "membership", "seconds"].sum()
        assert member == pytest.approx(sum(b - a for a, b in paused.get(s.node_id, [])), rel=1e-9)
        assert (member > 0) == (s.node_id in ("n0", "n1"))
    # a member's ``start`` at each re-formation is not a relaunch: a survivor's restart
    # tax ends at its first group's first step, whichever rank it has
    b = {s.node_id: breakdown(s, [e for e in events if e.node_id == s.node_id], paused.get(s.node_id, []))
         for s in sessions}
    first_start = {n: min(e.time for e in events if e.kind == "start" and e.node_id == n) for n in b}
    for s in sessions:
        assert b[s.node_id].restart == pytest.approx(first_start[s.node_id] - s.launched_at, rel=1e-9)
    # per change, the category bills exactly the seconds the membership table sums
    changes = [c for c in membership_changes(events, sessions) if c.kind in ("shrink", "grow")]
    assert lines.loc[lines["category"] == "membership", "seconds"].sum() == pytest.approx(
        sum(c.node_seconds for c in changes), rel=1e-9)


def test_report_useful_is_reduced_by_exactly_the_membership_tax(report):
    """The paused node-time moves out of `useful` (and out of the on-demand comparison)
    into the `membership` tax; spend is unchanged."""
    rep, sessions, events = report
    tax_usd = float(rep.membership["membership_tax_usd"].sum())
    tax_s = float(rep.membership["node_seconds"].sum())
    assert tax_usd > 0
    before_usd, before_s, before_od = _split_without_membership(sessions, events)
    assert "membership" not in before_usd or before_usd["membership"] == 0.0
    t = rep.totals
    assert t["membership_usd"] == pytest.approx(tax_usd, rel=1e-9)
    assert before_usd["useful"] - t["useful_usd"] == pytest.approx(tax_usd, rel=1e-9)
    assert before_s["useful"] / 3600.0 - rep.table["useful_hours"].sum() == pytest.approx(tax_s / 3600.0, rel=1e-9)
    assert rep.table["membership_hours"].sum() == pytest.approx(tax_s / 3600.0, rel=1e-9)
    assert t["spend_usd"] == pytest.approx(sum(before_usd.values()), rel=1e-12)  # same bill, split differently
    assert t["spend_usd"] == pytest.approx(rep.reconcile[1], rel=1e-12)
    assert before_od - t["on_demand_usd"] == pytest.approx(tax_s * 3.06 / 3600.0, rel=1e-9)
    assert t["taxes_usd"] == pytest.approx(t["spend_usd"] - t["useful_usd"], rel=1e-9)
    # observed effective cost: the same spend over fewer useful hours
    assert rep.break_even.observed.useful_hours == pytest.approx(rep.table["useful_hours"].sum(), rel=1e-12)
    # the rendered report: its own tax row and column, and the elastic section says where it is
    assert "| membership (elastic stages: nodes paused by a shrink / grow) |" in rep.markdown
    assert "Membership tax ($)" in rep.markdown
    assert "moved out of `useful`" in rep.markdown


def test_focus_export_carries_the_membership_tax(recorded):
    eng, _, _ = recorded
    data = ct.load(eng, "demo")
    frame = focus.focus_frame(data)
    assert focus.validate(frame) == []
    changes = ct.membership_table(ct.load_membership(eng, "demo"))
    assert frame["x_MembershipTaxCost"].sum() == pytest.approx(changes["membership_tax_usd"].sum(), rel=1e-9)
    by_node = dict(zip(frame["ResourceId"], frame["x_MembershipTaxCost"], strict=True))
    assert by_node["n0"] > 0 and by_node["n1"] > 0 and by_node["n4"] == 0.0 and by_node["n2"] == 0.0
    # dropping the new column is caught, not silently skipped
    problems = focus.validate(frame.drop(columns=["x_MembershipTaxCost"]))
    assert any(p.startswith("x_MembershipTaxCost: missing from the x_ cost split") for p in problems), problems


def test_a_survivor_that_missed_a_round_pays_its_whole_wait_once():
    """4 -> 2, then a grow that forms 3 (survivor n1 misses the round) and then 4."""
    sessions, events = _wall_log()  # the derivation is clock-agnostic
    events = [e for e in events if not (e.data.get("step") == 200 and e.kind in ("handoff", "membership"))]
    t2 = T0 + 80.0
    events += [Event("handoff", t2, n, {"step": 200, "reason": "peer_joining"}) for n in ("n0", "n1")]
    events += [_membership(t2 + 2.0, n, r, 200, 3, "handoff" if r == 0 else "peer", 2.0)
               for r, n in enumerate(("n0", "n4", "n5"))]
    events += [Event("handoff", t2 + 2.1, n, {"step": 201, "reason": "peer_joining"}) for n in ("n0", "n4", "n5")]
    events += [_membership(t2 + 4.5, n, r, 201, 4, "peer", 4.5) for r, n in enumerate(("n1", "n0", "n4", "n5"))]
    ch = membership_changes(events, sessions)
    assert [(c.kind, c.world_size) for c in ch] == [("form", 4), ("shrink", 2), ("grow", 3), ("grow", 4)]
    assert ch[2].node_seconds == pytest.approx(2.0)  # n0 only: n4, n5 were starting up
    # n1 from its hand-off at t2 (4.5 s), n0, n4, n5 from theirs at t2 + 2.1 (2.4 s each)
    assert ch[3].node_seconds == pytest.approx(4.5 + 3 * 2.4)
    assert ch[3].pause_seconds == pytest.approx(4.5)
    assert ch[3].dollars == pytest.approx((4.5 * 0.9 + 2.4 * (0.9 + 1.3 + 1.3)) / 3600.0)


def test_report_lists_node_hours_per_node_of_the_elastic_stage(report):
    rep, sessions, _ = report
    nodes = rep.elastic_nodes
    assert sorted(nodes["node_id"]) == sorted(PRICE)
    by_node = dict(zip(nodes["node_id"], nodes["billed_hours"], strict=True))
    for s in sessions:
        assert by_node[s.node_id] == pytest.approx((s.ended_at - s.launched_at) / 3600.0)  # market s
    assert nodes["cost_usd"].sum() == pytest.approx(rep.reconcile[1])  # = the run's sessions
    assert "### Elastic stages: node-hours per node" in rep.markdown


def test_single_node_stage_has_no_membership_rows():
    s = NodeSession(node_id="a", stage="x", attempt=1, provider="local", cloud="aws", region="us-east-1",
                    zone="us-east-1a", instance_type="p3.2xlarge", spot=True, price_per_hour=1.0,
                    launched_at=T0, ready_at=T0, ended_at=T0 + 10, end_reason="completed")
    assert membership_changes([Event("start", T0 + 1, "a", {}), Event("exit", T0 + 9, "a", {"step": 5})], [s]) == []
    assert ct.membership_table(ct.pd.DataFrame()).empty


def test_all_nodes_lost_is_a_restore_without_membership_tax():
    sessions, events = _wall_log()
    t = T0 + 200.0
    events = events + [_membership(t, n, r, 300, 4, "checkpoint", None)
                       for r, n in enumerate(("n0", "n1", "n4", "n5"))]
    changes = membership_changes(events, sessions)
    assert [c.kind for c in changes] == ["form", "shrink", "grow", "restore"]
    assert changes[-1].dollars == 0.0 and changes[-1].node_seconds == 0.0


def _stale_handoffs_then_checkpoint_log() -> tuple[list[NodeSession], list[Event]]:
    """After the 4-node group of step 200 every member hands off at step 260, but the round
    closes with n4, n5 only (n0, n1 miss it and keep their step-260 hand-offs); n4, n5 train
    to step 300, rank 0 commits that checkpoint, and both are reclaimed. n0, n1 then form a
    group whose rank 0 restores the checkpoint (300, newer than their hand-offs):
    ``state_from="checkpoint"`` although both were paused, billed, since their hand-off."""
    sessions, ev = _wall_log()
    ev = [e for e in ev if not (e.kind == "exit" and e.data.get("reason") == "completed")]
    t3 = T0 + 100.0
    ev += [Event("handoff", t3, n, {"step": 260, "reason": "peer_leaving", "world_size": 4})
           for n in ("n0", "n1", "n4", "n5")]
    ev += [Event("start", t3 + 1.8, n, {"resumed_from_step": 260}) for n in ("n4", "n5")]
    ev += [_membership(t3 + 2.0, "n4", 0, 260, 2, "handoff", 2.0),
           _membership(t3 + 2.0, "n5", 1, 260, 2, "peer", 2.0)]
    ev += [Event("exit", t3 + 15.0, n, {"reason": "preempted", "step": 300, "world_size": 2})
           for n in ("n4", "n5")]
    ev += [Event("start", t3 + 21.5, n, {"resumed_from_step": 300}) for n in ("n0", "n1")]
    ev += [_membership(t3 + 22.0, n, r, 300, 2, "checkpoint", None) for r, n in enumerate(("n0", "n1"))]
    ev += [Event("exit", t3 + 40.0, n, {"reason": "completed", "step": 400, "world_size": 2})
           for n in ("n0", "n1")]
    ends = {"n4": (t3 + 15.5, "preempted"), "n5": (t3 + 15.5, "preempted"),
            "n0": (t3 + 40.5, "completed"), "n1": (t3 + 40.5, "completed")}
    sessions = [dataclasses.replace(s, ended_at=ends[s.node_id][0], end_reason=ends[s.node_id][1],
                                    last_step=400 if s.node_id in ("n0", "n1") else 300)
                if s.node_id in ends else s for s in sessions]
    return sessions, ev


def test_a_checkpoint_group_after_hand_offs_is_taxed_as_a_change_and_reconciles(tmp_path):
    """A group that restored a checkpoint newer than its members' hand-offs paused those
    members like any change: a ``reform`` (2 -> 2) with ``state_from="checkpoint"``, taxed
    from each member's own hand-off (22 s each), and the session split bills the same
    seconds as ``membership``. Before: a ``restore``, no tax, the 44 node-seconds in
    neither the table nor the category (left as useful work)."""
    sessions, events = _stale_handoffs_then_checkpoint_log()
    ch = membership_changes(events, sessions)
    assert [(c.kind, c.world_size_before, c.world_size, c.state_from) for c in ch] == [
        ("form", None, 4, "fresh"), ("shrink", 4, 2, "handoff"), ("grow", 2, 4, "handoff"),
        ("shrink", 4, 2, "handoff"), ("reform", 2, 2, "checkpoint")]
    last = ch[-1]
    assert last.nodes == ("n0", "n1") and last.step == 300
    assert last.node_seconds == pytest.approx(2 * 22.0) and last.pause_seconds == pytest.approx(22.0)
    assert last.dollars == pytest.approx(22.0 * (PRICE["n0"] + PRICE["n1"]) / 3600.0)
    assert (last.node_seconds, last.dollars) == pytest.approx(_tax_from_the_log(events, sessions, 300))
    paused = paused_intervals(events)
    assert paused["n0"][-1] == pytest.approx((T0 + 100.0, T0 + 122.0))
    assert paused["n1"][-1] == pytest.approx((T0 + 100.0, T0 + 122.0))
    # the session breakdown bills the same seconds and $ as the membership changes
    eng = make_engine(f"sqlite:///{tmp_path / 'stats.db'}")
    upgrade(eng)
    _record(eng, sessions, events)
    lines = read_table(eng, CostLine, "demo")
    member = lines[lines["category"] == "membership"]
    assert member["seconds"].sum() == pytest.approx(sum(c.node_seconds for c in ch), rel=1e-9)
    assert member["dollars"].sum() == pytest.approx(sum(c.dollars for c in ch), rel=1e-9)
    table = ct.membership_table(ct.load_membership(eng, "demo"))
    row = table.iloc[-1]
    assert (row["kind"], row["state_from"], row["world_sizes"]) == ("reform", "checkpoint", "2 -> 2")
    assert row["membership_tax_usd"] == pytest.approx(last.dollars)


def _stale_handoff_log() -> tuple[list[NodeSession], list[Event]]:
    """A loaded machine: the rendezvous closes rounds of 2 before all 4 nodes re-join, and
    a later group resumes from an older hand-off, so two groups start at the same step."""
    def group(t: float, step: int, members: list[tuple[str, str]]) -> list[Event]:
        return [x for r, (n, src) in enumerate(members)
                for x in (Event("start", t - 0.2, n, {"resumed_from_step": step}),
                          _membership(t, n, r, step, len(members), src, None))]

    def handoff(t: float, step: int, nodes: tuple[str, ...]) -> list[Event]:
        return [Event("handoff", t, n, {"step": step, "reason": "peer_joining"}) for n in nodes]

    ev = group(T0 + 5, 0, [("n0", "fresh"), ("n1", "fresh")])
    ev += handoff(T0 + 10, 4, ("n0", "n1"))
    ev += group(T0 + 12, 4, [("n1", "handoff"), ("n2", "peer")])  # n0 misses this round
    ev += handoff(T0 + 14, 5, ("n1", "n2"))
    ev += group(T0 + 16, 4, [("n0", "handoff"), ("n3", "peer")])  # n0's step-4 state: step 4 again
    ev += handoff(T0 + 18, 6, ("n0", "n3"))
    ev += group(T0 + 20, 6, [("n0", "handoff"), ("n1", "peer"), ("n2", "peer"), ("n3", "peer")])
    nodes = ("n0", "n1", "n2", "n3")
    ev += [Event("exit", T0 + 40, n, {"reason": "completed", "step": 100}) for n in nodes]
    sessions = [NodeSession(node_id=n, stage="train", attempt=1, provider="local", cloud="aws",
                            region=ZONE[n][:-1], zone=ZONE[n], instance_type="p3.2xlarge", spot=True,
                            price_per_hour=PRICE[n], launched_at=T0, ready_at=T0 + 1, ended_at=T0 + 41,
                            end_reason="completed", first_step=0, last_step=100, last_checkpoint_step=100)
                for n in nodes]
    return sessions, ev


def test_groups_that_start_at_the_same_step_are_taxed_once_and_reconcile(tmp_path):
    """Regression (a load-dependent failure of test_elastic_pipeline): grouping members by
    their step merged the two step-4 groups, so each charged both pauses and the
    ``membership_changes`` dollars exceeded the ``membership`` cost lines."""
    sessions, events = _stale_handoff_log()
    ch = membership_changes(events, sessions)
    assert [(c.kind, c.step, c.nodes) for c in ch] == [
        ("form", 0, ("n0", "n1")), ("reform", 4, ("n1", "n2")), ("reform", 4, ("n0", "n3")),
        ("grow", 6, ("n0", "n1", "n2", "n3"))]
    # n1 from its hand-off at +10; n0 (missed a round) from +10; then n0, n3 from +18, n1, n2 from +14
    assert [c.node_seconds for c in ch] == pytest.approx([0.0, 2.0, 6.0, 2 + 6 + 6 + 2])
    assert ch[3].dollars == pytest.approx((2 * PRICE["n0"] + 6 * PRICE["n1"] + 6 * PRICE["n2"]
                                           + 2 * PRICE["n3"]) / 3600.0)
    eng = make_engine(f"sqlite:///{tmp_path / 'stats.db'}")
    upgrade(eng)
    _record(eng, sessions, events)
    lines = read_table(eng, CostLine, "demo")
    assert lines.loc[lines["category"] == "membership", "dollars"].sum() == pytest.approx(
        sum(c.dollars for c in ch), rel=1e-9)
