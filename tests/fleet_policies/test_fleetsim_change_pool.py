"""Pooled change evidence (``SpotfleetParams.change_pool``, nineteenth round): zones that
change together. The exact pooled posterior against a brute-force sum, v6's per-zone update
as its one-zone case, and what pooling does to a zone the job has not yet seen change."""

from __future__ import annotations

import math
from itertools import product

import numpy as np
import pytest

from fleet.policies.market_view import (
    CHANGE_PRIOR,
    POOL_CONCENTRATION,
    changed_probability_emp,
    changepoint_run_emp,
    pooled_change_posteriors,
    pooled_changed_runs_emp,
)
from fleet.policies.spotfleet import SpotfleetParams, SpotfleetPolicy

GAP = 300.0 / 3600.0


def _brute(l0, l1, prior=CHANGE_PRIOR, c=POOL_CONCENTRATION):
    a, b = prior * c, (1 - prior) * c

    def lbeta(x, y):
        return math.lgamma(x) + math.lgamma(y) - math.lgamma(x + y)

    tot, pz, mp = 0.0, np.zeros(len(l0)), 0.0
    for conf in product([0, 1], repeat=len(l0)):
        k = sum(conf)
        w = math.exp(lbeta(a + k, b + len(l0) - k) - lbeta(a, b)
                     + sum(l1[i] if conf[i] else l0[i] for i in range(len(l0))))
        tot += w
        pz += w * np.array(conf)
        mp += w * (a + k) / (a + b + len(l0))
    return pz / tot, mp / tot


def test_pooled_posterior_is_the_exact_sum_over_configurations():
    rng = np.random.default_rng(3)
    for k in (1, 2, 4, 6):
        l0, l1 = rng.normal(-5, 3, k), rng.normal(-5, 3, k)
        p, m = pooled_change_posteriors(l0, l1)
        bp, bm = _brute(l0, l1)
        assert p == pytest.approx(bp, rel=1e-9)
        assert m == pytest.approx(bm, rel=1e-9)


def test_one_zone_of_evidence_is_v6s_update():
    holds = [(0.2, True), (0.3, True)]
    runs = np.full(10, 12.0)
    (z, p1, _), = pooled_changed_runs_emp([holds, []], [runs, runs], GAP, unseen=False)
    assert z == 0
    assert p1 == pytest.approx(changed_probability_emp(holds, runs, GAP), rel=1e-9)


def test_a_change_in_two_zones_raises_the_third_zones_belief():
    """Two zones preempted the job fast; a third gives one short preempted hold. Alone
    (v6) that hold leaves it probably unchanged; pooled, the market's staleness makes it
    probably changed, and a zone the job never held is shortened too ("all")."""
    runs = [np.full(10, 12.0)] * 4
    fast = [(0.2, True)] * 3
    holds = [fast, fast, [(0.5, True)], []]
    r0 = np.full(4, 12.0)
    v6 = changepoint_run_emp(r0, holds, runs, GAP)
    alone = changed_probability_emp(holds[2], runs[2], GAP)
    pooled = {z: (p1, r1) for z, p1, r1 in pooled_changed_runs_emp(holds, runs, GAP, unseen=True)}
    assert alone < 0.5 < pooled[2][0]
    assert 3 in pooled and pooled[3][0] > CHANGE_PRIOR   # never held: the pooled share
    assert pooled[3][1] < 1.0                            # changed as the held ones did
    mixed = np.array([(1 - pooled[z][0]) * r0[z] + pooled[z][0] * pooled[z][1] for z in range(4)])
    assert mixed[2] < v6[2] and mixed[3] < v6[3] == 12.0


def test_long_holds_elsewhere_lower_a_zones_belief():
    runs = [np.full(10, 12.0)] * 3
    holds = [[(11.0, False)], [(14.0, True)], [(0.5, True)]]
    alone = changed_probability_emp(holds[2], runs[2], GAP)
    pooled = {z: p1 for z, p1, _ in pooled_changed_runs_emp(holds, runs, GAP, unseen=False)}
    assert pooled[2] < alone


def test_change_pool_needs_an_own_evidence_zone_model():
    from fleet.policies.base import JobSpec, Observation

    pre = np.ones((2, 20), dtype=bool)
    obs = Observation(tick=19, gap_hours=GAP, zones=("a", "b"), available=pre[:, -1], history=pre,
                      spot_price=np.array([1.0, 1.0]), on_demand_price=np.array([3.0, 3.0]))
    with pytest.raises(ValueError, match="change_pool"):
        SpotfleetPolicy(SpotfleetParams(zone_model="history", change_pool="seen")).reset(
            JobSpec(5.0, 8.0), obs)
    with pytest.raises(ValueError, match="change_pool 'x'"):
        SpotfleetPolicy(SpotfleetParams(change_pool="x")).reset(JobSpec(5.0, 8.0), obs)
