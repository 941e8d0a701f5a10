"""The hourly HP demand series GDE learns from (and SQA's Eq. 9 bounds): peak concurrency."""

from __future__ import annotations

import numpy as np

from fleet.scheduling.trace_format import JobTrace


def trace(jobs, orgs=("a", "b")):
    """jobs: (org, is_hp, g, submit, duration)"""
    a = np.array(jobs, dtype=float)
    n = len(a)
    return JobTrace("t", ["pool"], np.zeros(2, dtype=int), np.array([8, 8]), list(orgs),
                    np.zeros(n, dtype=int), a[:, 0].astype(int), a[:, 1] > 0,
                    a[:, 2].astype(int), np.ones(n, dtype=int), a[:, 3], a[:, 4], np.zeros(n))


def test_back_to_back_short_jobs_count_once_not_per_job():
    # six 10-minute 4-GPU HP jobs one after another in hour 0: 4 GPUs are ever held at once
    # (the old overlap count said 24); hour 1 holds nothing.
    tr = trace([(0, 1, 4, 600.0 * i, 600.0) for i in range(6)])
    d = tr.hp_demand(n_hours=2)
    assert d.shape == (1, 2, 2)
    assert d[0, 0].tolist() == [4.0, 0.0]
    assert d[0, 1].tolist() == [0.0, 0.0]


def test_peak_within_the_hour_carry_over_orgs_and_spot_ignored():
    jobs = [
        (0, 1, 2, 0.0, 7200.0),  # org a: 2 GPUs for hours 0-1
        (0, 1, 3, 1800.0, 600.0),  # org a: +3 in 1800-2400 -> peak 5 in hour 0
        (0, 1, 1, 3000.0, 3000.0),  # org a: +1 from 3000 to 6000 -> hour 1 starts at 3
        (1, 1, 4, 5400.0, 5400.0),  # org b: 4 GPUs from 1.5 h to 3 h
        (1, 0, 8, 0.0, 10000.0),  # spot: not HP demand
    ]
    d = trace(jobs).hp_demand(n_hours=4)
    assert d[0, 0].tolist() == [5.0, 3.0, 0.0, 0.0]
    assert d[0, 1].tolist() == [0.0, 4.0, 4.0, 0.0]  # ends exactly at 3 h: not in hour 3


def test_a_release_and_a_start_at_the_same_instant_do_not_stack():
    d = trace([(0, 1, 4, 0.0, 1800.0), (0, 1, 4, 1800.0, 1800.0)]).hp_demand(n_hours=1)
    assert d[0, 0, 0] == 4.0
