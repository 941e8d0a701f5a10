"""Eq. 11's eviction rate e over the past H hours, on a hand-traced run."""

from __future__ import annotations

import numpy as np
import pytest

from fleet.scheduling.baselines import get_policy
from fleet.scheduling.cluster_sim import simulate
from fleet.scheduling.sqa import window_eviction_rate
from fleet.scheduling.trace_format import JobTrace


def trace(jobs):
    """jobs: (is_hp, g, submit, duration) on one 4-GPU node"""
    a = np.array(jobs, dtype=float)
    n = len(a)
    return JobTrace("t", ["pool"], np.zeros(1, dtype=int), np.array([4]), ["o"],
                    np.zeros(n, dtype=int), np.zeros(n, dtype=int), a[:, 0] > 0,
                    a[:, 1].astype(int), np.ones(n, dtype=int), a[:, 2], a[:, 3], np.zeros(n))


def test_window_rate_is_the_share_of_ended_runs_that_were_evictions():
    assert window_eviction_rate(2, 2) == 1.0
    assert window_eviction_rate(1, 4) == 0.25
    assert window_eviction_rate(0, 0) == 0.0
    with pytest.raises(ValueError, match="ended runs"):
        window_eviction_rate(3, 1)


def test_evictions_of_runs_started_before_the_window_cut_eta():
    # spot A and B (2 GPUs each) start at 3,000 s; HP (4 GPUs) arrives at 4,000 s, evicts
    # both and holds the node until 10,000 s. eta is updated every H = 1 h:
    #  t = 3,600: window [0, 3600]: 2 runs, 0 evictions -> e = 0, no wait > theta: eta 1
    #  t = 7,200: window [3600, 7200]: no new start; 2 runs ended, both by eviction ->
    #  e = 1 > 1.5 * 0.1 -> eta = 1 * 0.1 / 1 = 0.1. (Dividing by the runs that started
    #  in the window read e = 0 here and left eta at 1.)
    tr = trace([(0, 2, 3000.0, 20000.0), (0, 2, 3000.0, 20000.0), (1, 4, 4000.0, 6000.0)])
    r = simulate(tr, get_policy("GFS"), np.zeros((1, 100)))
    assert r.evictions.tolist() == [1, 1, 0]
    eta_at = dict(zip(r.quota_t.tolist(), r.eta[:, 0].tolist(), strict=True))
    assert eta_at[3600.0] == pytest.approx(1.0)
    assert eta_at[6900.0] == pytest.approx(1.0)
    assert eta_at[7200.0] == pytest.approx(0.1)
