"""A 2-node elastic stage on the local fleet insures against losing the WHOLE group.

Real processes: two torch elastic agents (``checkpointing.elastic_run``, c10d rendezvous
hosted by the controller), gloo on 127.0.0.1, ``examples/train_elastic.py``; the zone
reclaim goes through the injector (notice, then SIGKILL after the grace window). Waits
are on events, never on timing; no assertion on a duration.

Before: ``ElasticStageRun`` passed its nodes no MTTP, R, checkpoint time or statistics
file, so rank 0 emitted no ``interval`` event at all (a bootstrap save at step 10, then
periodic saves only) and the stage's preemptions never reached it. Now each node gets one
zone's MTTP, R, C and the number of zones the group spans (``SPOTFLEET_LOSS_UNITS``), and
the stage's statistics file is rewritten whenever a node is launched or ends.

Priors (the drill's market seconds are wall seconds): MTTP 4 s per zone, R 1 s, C 0.05
s: the group's MTTP is (3 lam + mu) / (2 lam^2) = 14 s and tau = sqrt(2 C (14 + 1)) =
1.22 s (one node's would be 0.71 s).
"""

from __future__ import annotations

import pytest
from elastic_kit import Watcher, make_run, train_args

from checkpointing.intervals import group_loss_mttp_seconds, thesis_optimum_seconds
from fleet.contract import RunPriors
from fleet.providers.local.elastic_drill import join_or_cancel, run_in_thread

pytestmark = pytest.mark.slow

ZONES = ("us-east-1a", "us-east-1b")
K = 1.0  # market seconds per wall (process) second: the drill's TimeScale(3600)
PRIORS = RunPriors(mttp_seconds={z: 4.0 for z in ZONES}, restart_seconds=1.0,
                   checkpoint_seconds=0.05)


def _rank0_intervals(w: Watcher) -> list[dict]:
    rank0 = {g["node_id"] for g in w.groups()}
    return [dict(e.data, node_id=e.node_id) for e in w.of("interval") if e.node_id in rank0]


def test_rank0_insures_against_losing_every_zone_and_follows_the_observed_preemptions(tmp_path):
    steps = 900
    w = Watcher()
    run = make_run(tmp_path / "work", tmp_path / "ckpt", nodes=2, zones=ZONES, on_event=w,
                   args=train_args(steps, step_sleep=0.03, periodic_every=0), digests=False,
                   priors=PRIORS)
    t, box = run_in_thread(run)
    try:
        # (the wait also ends when the stage does: before, no interval event ever came)
        w.wait(lambda e: (2 in w.world_sizes() and _rank0_intervals(w) and w.max_step() >= 60)
               or not t.is_alive(), 300)
        assert 2 in w.world_sizes() and _rank0_intervals(w), \
            (w.world_sizes(), [(e.data["step"], e.data["kind"]) for e in w.of("save_committed")])
        first = _rank0_intervals(w)[0]
        # one zone's MTTP, R and the two zones as told; the group's MTTP from them
        assert first["node_mttp_seconds"] == pytest.approx(4.0)
        assert first["restart_seconds"] == pytest.approx(1.0)
        assert first["loss_units"] == 2
        group = group_loss_mttp_seconds(4.0, 1.0, 2)
        assert group == pytest.approx(14.0)
        assert first["mttp_seconds"] == pytest.approx(group, rel=1e-9)
        # reported when rank 0 opens its session, before any save: the plan's C as delta
        assert first["measured_saves"] == 0 and first["delta_seconds"] == pytest.approx(0.05)
        assert first["tau_seconds"] == pytest.approx(thesis_optimum_seconds(0.05, group, 1.0), rel=1e-9)
        # the insurance save that interval schedules (no bootstrap: C is known)
        rank0 = w.groups()[0]["node_id"]
        assert w.wait(lambda e: any(x.node_id == rank0 and x.data.get("kind") == "insurance"
                                    for x in w.of("save_committed")), 300)

        # the other zone is reclaimed: the group shrinks to rank 0's zone (one unit)
        zone_of = {e.node_id: e.data["zone"] for e in w.of("launch")}
        other = next(z for z in ZONES if z != zone_of[rank0])
        lost = run.reclaim_zone(other)
        assert len(lost) == 1, lost
        assert w.wait(lambda e: w.world_sizes()[-1:] == [1]
                      and any(d["loss_units"] == 1 for d in _rank0_intervals(w)), 300), \
            (w.world_sizes(), _rank0_intervals(w))
        run.regain_zone(other)  # a replacement joins: two zones again
        assert w.wait(lambda e: w.world_sizes()[-1:] == [2] and len(w.world_sizes()) >= 3
                      and _rank0_intervals(w)[-1]["loss_units"] == 2, 300), \
            (w.world_sizes(), _rank0_intervals(w))
        after = _rank0_intervals(w)[-1]
    finally:
        ended = join_or_cancel(run, t, 400.0)
    assert ended, "the elastic stage did not end"
    assert "result" in box, box.get("error")
    assert box["result"].completed and box["result"].final_step == steps

    # every interval rank 0 used is one the controller wrote (stats events, market s):
    # the preempted zone's session and the measured starts refined MTTP and R
    stats = [e.data for e in w.of("stats")]
    assert stats[0]["loss_units"] == 2 and stats[0]["mttp_seconds"] == pytest.approx(4.0 * K)
    assert stats[0]["group_mttp_seconds"] == pytest.approx(group_loss_mttp_seconds(4.0 * K, 1.0 * K, 2))

    def told(d: dict) -> int:
        return next(i for i, s in enumerate(stats)
                    if s["loss_units"] == d["loss_units"]
                    and s["mttp_seconds"] == pytest.approx(d["node_mttp_seconds"] * K, rel=1e-5)
                    and s["restart_seconds"] == pytest.approx(d["restart_seconds"] * K, rel=1e-5))

    for d in _rank0_intervals(w):
        told(d)  # StopIteration: rank 0 used values the controller never wrote
        assert d["tau_seconds"] == pytest.approx(
            thesis_optimum_seconds(d["delta_seconds"], d["mttp_seconds"], d["restart_seconds"]), rel=1e-9)
        assert d["mttp_seconds"] == pytest.approx(
            group_loss_mttp_seconds(d["node_mttp_seconds"], d["restart_seconds"], d["loss_units"]),
            rel=1e-9)
    assert told(after) > 0, "after the preemption rank 0 still had the plan's priors"
    assert (after["node_mttp_seconds"], after["restart_seconds"]) != (4.0, 1.0)
    # checkpoints come from rank 0 only, insurance saves among them
    commits = [(e.data["step"], e.data["kind"]) for e in w.of("save_committed")]
    assert len({s for s, _ in commits}) == len(commits), commits
    assert "insurance" in {k for _, k in commits}
