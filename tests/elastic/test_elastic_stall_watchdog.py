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
