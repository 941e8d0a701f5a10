"""The discrete-event simulator on tiny hand-traced workloads."""

from __future__ import annotations

import numpy as np
import pytest

from fleet.scheduling.baselines import POLICIES, get_policy
from fleet.scheduling.cluster_sim import simulate
from fleet.scheduling.trace_format import JobTrace


def trace(nodes, jobs):
    """jobs: (is_hp, g, w, submit, duration, ckpt)"""
    a = np.array(jobs, dtype=float)
    return JobTrace("t", ["pool"], np.zeros(len(nodes), dtype=int), np.array(nodes), ["o"],
                    np.zeros(len(a), dtype=int), np.zeros(len(a), dtype=int), a[:, 0] > 0,
                    a[:, 1].astype(int), a[:, 2].astype(int), a[:, 3], a[:, 4], a[:, 5])


def no_hp_forecast(tr):
    return np.zeros((1, 1000))


def test_eviction_loses_work_since_checkpoint_and_requeues():
    tr = trace([4], [(0, 4, 1, 0.0, 1000.0, 300.0), (1, 4, 1, 500.0, 100.0, 0.0)])
    r = simulate(tr, get_policy("GFS"), no_hp_forecast(tr))
    # HP arrives at 500, evicts the spot job (saved 300 s, lost 200 s x 4 GPUs), runs 500-600.
    assert r.jct[1] == pytest.approx(100.0) and r.jqt[1] == 0.0
    # spot quota is refreshed every 300 s (Eq. 10 caps it by idle GPUs): restart at 900,
    # 700 s of work left -> finishes at 1600
    assert r.evictions[0] == 1 and r.runs[0] == 2
    assert r.jct[0] == pytest.approx(1600.0)
    assert r.jqt[0] == pytest.approx(400.0)
    assert r.lost_gpu_s[0] == pytest.approx(800.0)
    s = r.summary()
    assert s["spot_evict_pct"] == pytest.approx(50.0)


def test_yarn_is_fcfs_with_head_of_line_blocking():
    # 4 GPUs: job0 takes 3; job1 (2 GPUs) blocks; job2 (1 GPU) must wait under strict FCFS
    tr = trace([4], [(1, 3, 1, 0.0, 100.0, 0.0), (1, 2, 1, 1.0, 10.0, 0.0), (1, 1, 1, 2.0, 10.0, 0.0)])
    yarn = simulate(tr, get_policy("YARN-CS"))
    assert yarn.jqt[2] == pytest.approx(98.0)
    lyra = simulate(tr, get_policy("Lyra"))  # FCFS order but backfills
    assert lyra.jqt[2] == 0.0


def test_chronus_suspends_spot_at_lease_end_without_losing_work():
    tr = trace([4], [(0, 4, 1, 0.0, 1000.0, 0.0), (1, 4, 1, 10.0, 100.0, 0.0)])
    r = simulate(tr, get_policy("Chronus"))
    # no preemption: HP waits for the 300 s spot lease, spot resumes at 400 with 700 s left
    assert r.jqt[1] == pytest.approx(290.0)
    assert r.evictions[0] == 0 and r.suspends[0] == 1
    assert r.jct[0] == pytest.approx(1100.0)


def test_gang_jobs_start_whole_and_every_policy_finishes_everything():
    rng = np.random.default_rng(3)
    jobs = []
    for i in range(300):
        hp = rng.random() < 0.7
        jobs.append((float(hp), int(rng.choice([1, 2, 4, 8])), int(rng.choice([1, 1, 1, 2, 3])),
                     float(i * 60), float(rng.uniform(300, 20000)), 0.0 if hp else 1800.0))
    tr = trace([8] * 6 + [4] * 4, jobs)
    upper = np.full((1, 200), 20.0)
    seen = {}
    for name, pol in POLICIES.items():
        r = simulate(tr, pol, upper if pol.quota == "sqa" else None,
                     hp_backfill=upper / 2 if pol.backfill else None)
        assert r.unfinished == 0, name
        assert np.all(r.jct >= tr.duration - 1e-6), name  # nobody finishes faster than its work
        assert np.all(r.jqt >= 0)
        assert np.all(r.alloc_rate <= 1.0 + 1e-9)
        if pol.preemption == "none":
            assert r.evictions.sum() == 0
        assert r.evictions[tr.is_hp].sum() == 0  # HP is never evicted
        seen[name] = r.summary()
    assert seen["GFS"]["hp_jqt"] <= seen["Chronus"]["hp_jqt"]


def test_quota_blocks_spot_when_hp_forecast_fills_the_pool():
    tr = trace([4], [(0, 1, 1, 10.0, 100.0, 0.0)])
    full = np.full((1, 100), 4.0)
    r = simulate(tr, get_policy("GFS-d"), full, max_time_s=5000.0)
    assert r.unfinished == 1  # f(p, H) = 0 -> quota 0, eta fixed at 1
    r = simulate(tr, get_policy("GFS"), np.zeros((1, 100)))
    assert r.unfinished == 0 and r.jqt[0] <= 300.0


def test_policy_without_forecast_is_rejected():
    tr = trace([4], [(1, 1, 1, 0.0, 10.0, 0.0)])
    with pytest.raises(ValueError, match="hp_upper"):
        simulate(tr, get_policy("GFS"))
    with pytest.raises(ValueError, match="unknown policy"):
        get_policy("nope")
