"""Hand-worked checks of GFS Eq. 9-11 (SQA) and Eq. 15-17, 19 (PTS scores and costs)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fleet.scheduling.eviction import eviction_score, weighted_eviction_rate
from fleet.scheduling.pts import fragmentation_table, preemption_cost
from fleet.scheduling.sqa import SQAParams, gpu_inventory, spot_quota, update_eta
from fleet.scheduling.state import PTSParams, SimJob

Z90 = 1.2815515655446004  # standard normal 0.9 quantile


def test_inventory_sums_per_org_maxima_over_horizon():
    mu = np.array([[10.0, 20.0, 5.0], [30.0, 5.0, 50.0]])
    zero = np.zeros_like(mu)
    # H=1: 10 + 30 = 40 -> 60 left of 100; H=2: 20 + 30 = 50 -> 50; H=3: 20 + 50 -> 30
    assert gpu_inventory(100, mu, zero, 0.9, 1) == pytest.approx(60)
    assert gpu_inventory(100, mu, zero, 0.9, 2) == pytest.approx(50)
    assert gpu_inventory(100, mu, zero, 0.9, 3) == pytest.approx(30)


def test_inventory_uses_gaussian_quantile_and_floors_at_zero():
    f = gpu_inventory(100, [[10.0]], [[10.0]], 0.9, 1)
    assert f == pytest.approx(100 - (10 + 10 * Z90))
    assert gpu_inventory(100, [[80.0], [30.0]], [[0.0], [0.0]], 0.9, 1) == 0.0
    with pytest.raises(ValueError, match="horizon_h"):
        gpu_inventory(100, [[1.0]], [[0.0]], 0.9, 2)


def test_quota_is_min_of_scaled_inventory_and_idle_plus_guaranteed():
    assert spot_quota(50, 0.8, 20, 30) == pytest.approx(40)  # f*eta binds
    assert spot_quota(50, 1.0, 10, 20) == pytest.approx(30)  # S0 + Sa binds


def test_eta_feedback_three_cases_with_eviction_target_one_minus_p():
    prm = SQAParams(p=0.9, theta_s=3600)
    # target = 0.1. High eviction 0.2 > 0.15: eta * 0.1/0.2
    assert update_eta(1.0, 0.2, 0.0, prm) == pytest.approx(0.5)
    # low eviction 0.02 < 0.05 and long queue: eta * (1.5 - 0.2)
    assert update_eta(1.0, 0.02, 4000.0, prm) == pytest.approx(1.3)
    # low eviction but short queue, or moderate eviction: unchanged
    assert update_eta(1.0, 0.02, 100.0, prm) == 1.0
    assert update_eta(0.7, 0.1, 99999.0, prm) == 0.7
    # clamps keep eta bounded
    assert update_eta(0.06, 1.0, 0.0, prm) == prm.eta_min
    assert update_eta(3.9, 0.0, 1e9, prm) == prm.eta_max


def test_weighted_eviction_rate_and_asymmetric_score():
    e = weighted_eviction_rate(2, 12, gamma=0.8, t_long=24)
    assert e == pytest.approx(0.8 * 2 + 0.2 * 12 / 24)  # 1.7
    assert eviction_score(e, True, 3) == pytest.approx(0.01 * 3**1.7)
    assert eviction_score(e, False, 3) == pytest.approx(1 - 0.01 * 3**1.7)
    # circuit breaker threshold: 0.01 * 3^e >= 1  <=>  e >= log_3(100) ~ 4.19
    assert eviction_score(math.log(100, 3) + 1e-9, False, 3) == 0.0
    assert eviction_score(4.1, False, 3) > 0.0
    assert eviction_score(10.0, True, 3) == 1.0


def test_waste_since_last_checkpoint_eq17():
    job = SimJob(0, 0, 0, False, g=2, w=3, submit=0.0, duration=5000.0, ckpt=600.0)
    job.run_start = 100.0
    assert job.last_checkpoint(1000.0) == 700.0
    assert job.waste(1000.0) == pytest.approx(6 * 300.0)
    nockpt = SimJob(1, 0, 0, False, g=1, w=1, submit=0.0, duration=5000.0, ckpt=0.0)
    nockpt.run_start = 100.0
    assert nockpt.waste(1000.0) == pytest.approx(900.0)


def test_preemption_cost_eq19():
    prm = PTSParams(beta=0.5, usage_window_s=3600)
    # G=10 successes, F=2 evictions, 1 victim wasting 3600 GPU-s on a 16-GPU pool
    c = preemption_cost(1, 3600.0, 10, 2, 16, prm)
    assert c == pytest.approx(3 / 13 + 0.5 * 3600 / (16 * 3600))
    assert preemption_cost(0, 0.0, 10, 2, 16, prm) == pytest.approx(2 / 12)
    assert preemption_cost(2, 0.0, 10, 2, 16, prm) > c - 0.5 * 3600 / (16 * 3600)


def test_fragmentation_table():
    t = fragmentation_table(8, {1: 0.5, 8: 0.5})
    # 8 free: usable by both -> 0; 3 free: 8-GPU requests cannot use them -> 0.5*3
    assert t[8] == 0 and t[3] == pytest.approx(1.5) and t[0] == 0


def test_node_ebar_agrees_with_fleet_stats_eq15():
    """The simulator's per-node Eq. 15 matches fleet.stats' time-based implementation."""
    from fleet.scheduling.state import ClusterState
    from fleet.stats.preemption import weighted_eviction_rate as stats_eq15

    rng = np.random.default_rng(0)
    st = ClusterState(np.zeros(3, dtype=int), np.array([8, 8, 8]), ["p"])
    times = {n: np.sort(rng.uniform(0, 30 * 3600, size=12)) for n in range(3)}
    for n, ts in times.items():
        for x in ts:
            st.record_eviction([n], float(x))
    now = 30 * 3600.0
    got = st.ebar(0, now, PTSParams())
    want = [stats_eq15(times[n] / 3600.0, now / 3600.0) for n in range(3)]
    assert got == pytest.approx(want)
