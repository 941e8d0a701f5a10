"""Eq. 11's eviction rate e over the past H hours, on a hand-traced run, and the Wilson
evidence rule of its cut branch."""

from __future__ import annotations

import numpy as np
import pytest

from fleet.scheduling.baselines import get_policy
from fleet.scheduling.cluster_sim import simulate
from fleet.scheduling.sqa import (
    SQAParams,
    eta_eviction_rate,
    update_eta,
    wilson_lower,
    window_eviction_rate,
)
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
    #  e = 1 > 1.5 * 0.1 -> eta = 1 * 0.1 / 1 = 0.1 with the point estimate. (Dividing by
    #  the runs that started in the window read e = 0 here and left eta at 1.) With the
    #  default Wilson evidence rule the cut uses the lower 90% bound of 2 of 2, 0.549:
    #  eta = 0.1 / 0.549 = 0.182.
    tr = trace([(0, 2, 3000.0, 20000.0), (0, 2, 3000.0, 20000.0), (1, 4, 4000.0, 6000.0)])
    for rule, eta_after in (("point", 0.1), ("wilson", 0.1 / wilson_lower(2, 2, 0.9))):
        r = simulate(tr, get_policy("GFS"), np.zeros((1, 100)), sqa=SQAParams(eta_evidence=rule))
        assert r.evictions.tolist() == [1, 1, 0]
        eta_at = dict(zip(r.quota_t.tolist(), r.eta[:, 0].tolist(), strict=True))
        assert eta_at[3600.0] == pytest.approx(1.0)
        assert eta_at[6900.0] == pytest.approx(1.0)
        assert eta_at[7200.0] == pytest.approx(eta_after), rule
    assert 0.1 / wilson_lower(2, 2, 0.9) == pytest.approx(0.182, abs=0.001)


def test_wilson_cut_acts_on_evidence_not_on_one_eviction_among_few_runs():
    prm = SQAParams()  # p = 0.9: target 0.1, cut when e > 0.15
    assert wilson_lower(0, 0, 0.9) == 0.0 and wilson_lower(0, 10, 0.9) == 0.0
    # one eviction among two ended runs: point e = 0.5 cuts eta to 0.2; its lower 90%
    # bound is 0.164, a cut to ~0.6
    e_cut, e = eta_eviction_rate(1, 2, prm)
    assert e == 0.5 and e_cut == pytest.approx(0.165, abs=0.002)
    assert update_eta(1.0, e, 0.0, prm) == pytest.approx(0.2)
    assert update_eta(1.0, e, 0.0, prm, cut_rate=e_cut) == pytest.approx(0.1 / e_cut)
    # one of six: the observed 0.167 would cut, the evidence (lower bound 0.05) does not
    e_cut, e = eta_eviction_rate(1, 6, prm)
    assert e > 0.15 and e_cut < 0.15
    assert update_eta(1.0, e, 0.0, prm, cut_rate=e_cut) == 1.0
    # many runs: the bound approaches the observed share (the paper's ~160 runs an hour)
    assert 0.45 < wilson_lower(100, 200, 0.9) < 0.5
    assert eta_eviction_rate(1, 2, SQAParams(eta_evidence="point")) == (0.5, 0.5)
    with pytest.raises(ValueError, match="eta_evidence"):
        SQAParams(eta_evidence="bayes")
