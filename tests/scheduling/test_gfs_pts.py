"""Alg. 1-3 on small hand-built clusters."""

from __future__ import annotations

import numpy as np

from fleet.scheduling.pts import non_preemptive, preemptive, pts_schedule
from fleet.scheduling.state import ClusterState, PTSParams, SimJob

PRM = PTSParams()


def cluster(totals):
    return ClusterState(np.zeros(len(totals), dtype=int), np.array(totals), ["pool"])


def run(st, jid, is_hp, g, w, nodes, t=0.0, ckpt=0.0):
    job = SimJob(jid, 0, 0, is_hp, g, w, submit=t, duration=1e6, ckpt=ckpt)
    job.run_start = t
    st.jobs[jid] = job
    st.allocate(job, nodes)
    return job


def new(jid, is_hp, g, w=1):
    return SimJob(jid, 0, 0, is_hp, g, w, submit=0.0, duration=100.0)


def test_alg1_packing_then_homogeneous_colocation():
    st = cluster([8, 8, 8])
    run(st, 1, True, 6, 1, [1])  # node1: 6 HP
    run(st, 2, False, 6, 1, [2])  # node2: 6 spot
    # Score1 ties nodes 1 and 2 (2 idle of 8); Score2 sends HP to the HP node, spot to spot
    assert non_preemptive(st, new(10, True, 2), 0.0, PRM).nodes == [1]
    assert non_preemptive(st, new(11, False, 2), 0.0, PRM).nodes == [2]
    # a request that only the empty node fits goes there
    assert non_preemptive(st, new(12, True, 4), 0.0, PRM).nodes == [0]
    # pure packing (GFS-s) breaks the tie by index, ignoring the workload type
    assert non_preemptive(st, new(13, False, 2), 0.0, PRM, mode="pack").nodes == [1]


def test_alg1_eviction_awareness_and_circuit_breaker():
    st = cluster([4, 4])
    st.record_eviction([1], 0.0)
    # equal packing and co-location: spot avoids the evicted node, HP prefers it
    assert non_preemptive(st, new(1, False, 1), 10.0, PRM).nodes == [0]
    assert non_preemptive(st, new(2, True, 1), 10.0, PRM).nodes == [1]
    # 6 recent evictions: e_bar = 0.8*6 + 0.2*6/24 = 4.85 > log3(100) -> node 1 blacklisted
    st.record_eviction([1] * 5, 20.0)
    run(st, 3, True, 4, 1, [0])  # fill node 0
    assert non_preemptive(st, new(4, False, 1), 30.0, PRM) is None
    assert non_preemptive(st, new(5, True, 1), 30.0, PRM).nodes == [1]
    # after 24 h the history expires and the node is usable again
    assert non_preemptive(st, new(6, False, 1), 30.0 + 86401.0, PRM).nodes == [1]


def test_alg1_gang_is_all_or_nothing():
    st = cluster([8, 8])
    run(st, 1, True, 4, 1, [1])
    plan = non_preemptive(st, new(2, True, 4, w=3), 0.0, PRM)
    # first pod packs the half-full node 1, then node 0 twice
    assert sorted(plan.nodes) == [0, 0, 1]
    assert non_preemptive(st, new(3, True, 4, w=4), 0.0, PRM) is None
    assert list(st.free) == [8, 4]  # planning never mutates the state


def test_alg2_spares_high_waste_tasks_and_picks_min_cost_node():
    st = cluster([8, 8])
    t = 5000.0
    # node 0: two 4-GPU spot jobs; A checkpointed 0 s ago... B long ago unsaved
    a = run(st, 1, False, 4, 1, [0], t=0.0, ckpt=1000.0)  # last ckpt 5000 -> waste 0
    b = run(st, 2, False, 4, 1, [0], t=100.0, ckpt=10000.0)  # waste 4*4900
    # node 1: one 8-GPU spot job with waste 8*100
    run(st, 3, False, 8, 1, [1], t=4900.0, ckpt=10000.0)
    st.spot_succeeded, st.spot_evicted = 10, 0
    hp = new(10, True, 4)
    plan = preemptive(st, hp, t, PRM)
    # node 0: sorted by waste desc [B, A]; B spared (A's 4 GPUs suffice) -> evict A (waste 0)
    # cost node0 = 1/11 + 0; node1 = 1/11 + 0.5*800/(16*3600) -> node 0 wins
    assert plan.nodes == [0] and plan.victims == {a.id}
    assert b.id not in plan.victims
    # random preemption (GFS-p) still produces a feasible plan
    rplan = preemptive(st, hp, t, PRM, mode="random", rng=np.random.default_rng(1))
    assert len(rplan.nodes) == 1 and rplan.victims


def test_alg2_gang_victim_frees_pods_on_other_nodes():
    st = cluster([4, 4])
    run(st, 1, False, 4, 2, [0, 1], t=0.0)  # one spot gang on both nodes
    plan = preemptive(st, new(2, True, 4, w=2), 10.0, PRM)
    assert sorted(plan.nodes) == [0, 1] and plan.victims == {1}


def test_alg2_fails_when_hp_holds_the_gpus():
    st = cluster([4])
    run(st, 1, True, 4, 1, [0])
    assert preemptive(st, new(2, True, 1), 0.0, PRM) is None


def test_alg3_quota_and_spot_never_preempts():
    st = cluster([4])
    run(st, 1, False, 4, 1, [0])
    assert pts_schedule(st, new(2, False, 1), 0.0, PRM) is None  # spot: no preemption
    assert pts_schedule(st, new(3, True, 1), 0.0, PRM, quota_ok=False) is None
    plan = pts_schedule(st, new(4, True, 2), 0.0, PRM)
    assert plan.nodes == [0] and plan.victims == {1}


def test_lyra_and_yarn_victim_choice():
    st = cluster([4, 4])
    run(st, 1, False, 2, 1, [0], t=0.0)
    run(st, 2, False, 2, 1, [0], t=50.0)  # youngest on node 0
    run(st, 3, False, 2, 3, [1, 1], t=10.0)  # gang of 3 pods: 2 here, 1 elsewhere (virtual)
    st.jobs[3].pods = {1: 4}
    hp = new(10, True, 2)
    assert preemptive(st, hp, 60.0, PRM, mode="youngest").victims == {2}
    # Lyra counts whole gangs: evicting a 2-GPU job beats a 6-GPU gang
    assert preemptive(st, hp, 60.0, PRM, mode="lyra").victims in ({1}, {2})
