"""An operator's Terminate stops an elastic group gracefully, as one.

Real processes: two torch elastic agents (c10d rendezvous hosted by the controller), gloo on
127.0.0.1, ``examples/train_elastic.py``. ``request_stop`` (what the node runner calls on the
first SIGINT / SIGTERM of a Dagster Terminate) gives every node the preemption notice a zone
reclaim gives: the group leaves at one agreed step, rank 0 writes the emergency checkpoint at
that step, nothing is relaunched, the sessions are recorded ``cancelled`` (not the market's
preemptions) and the attempt fails saying what was saved. Before, an elastic stage was
cancelled at once on Terminate: every step since the last periodic checkpoint was lost.
Waits are on events; no assertion on a duration.
"""

from __future__ import annotations

import dataclasses

import pytest
from elastic_kit import Watcher, final_state, make_run, train_args

from fleet.providers.local import is_provider_event
from fleet.providers.local.elastic_drill import join_or_cancel, run_in_thread

pytestmark = pytest.mark.slow

ZONES = ("us-east-1a", "us-east-1b")


def test_terminate_saves_the_group_at_one_step_and_relaunches_nothing(tmp_path):
    steps = 600
    w = Watcher()
    run = make_run(tmp_path / "work", tmp_path / "ckpt", nodes=2, zones=ZONES, on_event=w,
                   args=train_args(steps, step_sleep=0.03, periodic_every=200), digests=False,
                   grace_seconds=20.0)
    run.spec = dataclasses.replace(run.spec, terminate_grace_seconds=20.0)
    t, box = run_in_thread(run)
    try:
        # a group of 2 past its bootstrap save, between two periodic checkpoints
        assert w.wait(lambda e: (2 in w.world_sizes() and w.max_step() >= 60) or not t.is_alive(), 300), \
            (w.world_sizes(), box)
        run.request_stop()
    finally:
        ended = join_or_cancel(run, t, 300)
    assert ended, "the stage never stopped"
    err = str(box.get("error"))
    assert "result" not in box, "the Terminate must not complete the stage"
    leaves = [e for e in w.of("exit") if e.data.get("reason") == "preempted"]
    stop = {int(e.data["step"]) for e in leaves}
    assert len(leaves) == 2 and len(stop) == 1, leaves  # both left at the same agreed step
    (stop_step,) = stop
    assert 60 <= stop_step < steps
    emergency = [e for e in w.of("save_committed") if e.data["kind"] == "emergency"]
    assert [int(e.data["step"]) for e in emergency] == [stop_step]  # written once, by rank 0
    assert final_state(tmp_path / "ckpt")["step"] == stop_step  # the latest checkpoint: 0 steps lost
    assert f"saved an emergency checkpoint at step {stop_step}" in err and "(0 steps lost)" in err
    assert "was cancelled (Terminate: every node was asked to save, grace 20 s)" in err
    # nothing relaunched; the sessions are the operator's stop, not the market's preemptions
    assert len(run.sessions) == 2 and {s.end_reason for s in run.sessions} == {"cancelled"}
    assert run.preemptions == 0
    assert not [e for e in w.events if is_provider_event(e) and e.kind == "launch"
                and e.time > leaves[0].time]
    kinds = [e.kind for e in w.events if is_provider_event(e)]
    assert "terminating" in kinds and "cancelled" in kinds
