"""The local fleet's progress watchdog watches an elastic group as one.

Real processes: two torch elastic agents (c10d rendezvous hosted by the controller), gloo
on 127.0.0.1, ``examples/train_elastic.py``. After the group's first committed checkpoint
one node's whole process group is SIGSTOPped (a deadlock: alive, silent, billed); the
other rank blocks in its next all-reduce, so the group reports nothing. The watchdog
(limit 5 wall s) kills both nodes, records them failed with the stall reason, and the
controller launches a new group whose rank 0 restores the latest complete checkpoint; the
stage completes. Before, an elastic stage had no watchdog: it waited until the test's
join timed out (a hung gloo collective waits 30 min by default). Waits are on events;
no assertion on a duration.
"""

from __future__ import annotations

import dataclasses
import os
import signal

import pytest
from elastic_kit import Watcher, make_run, train_args

from fleet.providers.base import StageSpec
from fleet.providers.local import is_provider_event
from fleet.providers.local.elastic_drill import join_or_cancel, run_in_thread

pytestmark = pytest.mark.slow

ZONES = ("us-east-1a", "us-east-1b")


def test_a_hung_elastic_group_is_killed_recorded_and_resumed_from_its_checkpoint(tmp_path):
    steps = 300
    w = Watcher()
    run = make_run(tmp_path / "work", tmp_path / "ckpt", nodes=2, zones=ZONES, on_event=w,
                   args=train_args(steps, step_sleep=0.03, periodic_every=40), digests=False)
    run.spec = dataclasses.replace(run.spec, stall_timeout_seconds=5.0)
    t, box = run_in_thread(run)
    stopped: list[str] = []
    try:
        assert w.wait(lambda e: (2 in w.world_sizes() and any(
            x.data.get("kind") == "periodic" for x in w.of("save_committed"))) or not t.is_alive(), 300), \
            (w.world_sizes(), box)
        rank0 = w.groups()[-1]["node_id"]
        [other] = [n for n in run._nodes if n.node_id != rank0 and n.ended_at is None]
        os.killpg(other.proc.pid, signal.SIGSTOP)  # the agent and its worker: a deadlock
        stopped.append(other.node_id)
        # the watchdog kills the hung group (both nodes); a new group trains to the end
        assert w.wait(lambda e: any(is_provider_event(x) and x.kind == "failed" and x.data.get("stalled")
                                    for x in e) or not t.is_alive(), 300), box
    finally:
        ended = join_or_cancel(run, t, 400)
    assert ended, "the stage never ended"
    assert "error" not in box, box.get("error")
    result = box["result"]
    assert result.completed and result.final_step == steps

    failed = [e for e in result.events if is_provider_event(e) and e.kind == "failed"]
    stalled = [e for e in failed if e.data.get("stalled")]
    assert len(stalled) == 2 and {e.node_id for e in stalled} >= set(stopped)  # the whole group
    for e in stalled:
        assert e.data["reason"].startswith("stalled: no progress for ")
        assert "(limit 5 s); killed and relaunched (the whole elastic group)" in e.data["reason"]
        assert e.data["exit_code"] == -signal.SIGKILL
    first_two = {s.node_id: s for s in result.sessions if s.node_id in {e.node_id for e in stalled}}
    assert {s.end_reason for s in first_two.values()} == {"failed"}
    assert all(s.ended_at is not None for s in first_two.values())  # billed up to the kill
    # the new group restored the latest complete checkpoint the hung group had committed
    committed_before = max(int(e.data["step"]) for e in w.of("save_committed")
                           if e.time <= stalled[0].time)
    restores = w.of("restore")
    assert restores and int(restores[0].data["step"]) == committed_before > 0
    resumed = [g for g in w.groups() if g["state_from"] == "checkpoint"]
    assert resumed and resumed[0]["step"] == committed_before
    assert run.stalls == 1


def test_the_stall_knobs_are_checked_for_an_elastic_stage_too(tmp_path):
    run = make_run(tmp_path / "work", tmp_path / "ckpt", nodes=2, zones=ZONES)
    run.spec = dataclasses.replace(run.spec, stall_timeout_seconds=-1.0)
    with pytest.raises(ValueError, match="StageSpec.stall_timeout_seconds=-1.0 is not a stall limit"):
        run._validate(list(ZONES))
    assert isinstance(run.spec, StageSpec)


class _Running:
    """A live process as the controller sees it (``poll()`` None); never signalled here."""

    pid = 2 ** 22 + 7  # not a process group of this machine: a kill attempt fails the test

    def poll(self):  # noqa: ANN201
        return None


def test_a_late_replacement_after_a_long_wait_below_min_nodes_is_not_a_stall(tmp_path):
    """Reviewer's case (2026-11-28): min_nodes = 2, one node lost, the survivor waits in the
    rendezvous (unwatched) for longer than the start-up allowance until a replacement starts.
    The silence clock must restart when the watch resumes; it kept the last event before the
    wait, so the healthy group was killed as 'stalled' the moment the replacement started."""
    from fleet.providers.events import EventTail
    from fleet.providers.local.multinode import ElasticConfig, _ElasticNode

    run = make_run(tmp_path / "work", tmp_path / "ckpt", nodes=2, zones=ZONES,
                   elastic=ElasticConfig(min_nodes=2))

    def node(i: int, ready: float | None) -> _ElasticNode:
        n = _ElasticNode(node_id=f"n{i}", zone=ZONES[i % 2], region="us-east-1", spot=True, price=1.0,
                         launched_at=0.0, log_path=tmp_path / f"{i}.log", events_path=tmp_path / f"{i}.jsonl",
                         tail=EventTail(tmp_path / f"{i}.jsonl"), slot=i, start_at=0.0, batch="b",
                         ready_at=ready)
        n.proc = _Running()
        return n

    a, b = node(0, 1.0), node(1, 1.0)
    run._nodes = [a, b]
    run._watch.observe("progress", {"step": 10, "mean_step_seconds": 0.01}, 100.0)
    a.ended_at, a.end_reason = 150.0, "preempted"  # lost; the survivor waits for a second node
    run._watch.restart()
    for now in (200.0, 500.0, 900.0):  # below min_nodes: not watched, however long
        run._watch_progress(now)
    c = node(2, None)  # the replacement's process starts (not training yet)
    run._nodes.append(c)
    run._watch_progress(910.0)  # watched again: 10 s of silence, not 810 s
    assert run.stalls == 0 and b.ended_at is None and c.ended_at is None
