"""The twenty-first and twenty-second rounds' candidates, ``SpotfleetParams(model_check=...)``:
once the job's own holds reject what its model expected (``"holds"``: the expected runs, a
Poisson test; ``"holds_law"``: each zone's own run law, Fisher's test), every ranking uses runs
capped by the job's own evidence. The tests and the caps as pure functions, the behaviour on a
market whose calm history lies (cheap zones flap from the job's start), and what it leaves
alone: a market whose history is true, and which zones are worth trying at all."""

from __future__ import annotations

import numpy as np
import pytest

from fleet.policies.base import JobSpec
from fleet.policies.market_view import holds_reject_model, holds_reject_run_law, own_evidence_caps
from fleet.policies.spotfleet import RANK_AFTER_USD, SpotfleetParams, SpotfleetPolicy
from fleet.simulation.engine import simulate
from fleet.simulation.market import Market

HIST = 288  # 24 h of 300 s ticks before the job


def test_caps_use_each_zones_own_holds_and_the_pooled_rate_for_unseen_zones():
    holds = [[(0.5, True), (0.3, True)],   # preempted twice in 0.8 h: at most 0.4 h
             [(6.0, False)],               # held, never preempted: keeps its run
             [],                           # never held: at most 6.8 h / 2 = 3.4 h
             []]
    run = np.array([10.0, 20.0, 30.0, 2.0])
    assert own_evidence_caps(run, holds) == pytest.approx([0.4, 20.0, 3.4, 2.0])
    assert own_evidence_caps(run, [[], [], [], []]) == pytest.approx(run)  # no evidence, no cap


def test_the_holds_test_rejects_only_more_preemptions_than_the_expected_runs_predict():
    # three holds of 0.3-0.5 h, each ended by a preemption, where 10 h runs were expected
    assert holds_reject_model([(0.4, True, 10.0), (0.3, True, 10.0), (0.5, True, 10.0)])
    # one quick preemption is what a heavy-tailed run law produces often: never enough
    assert not holds_reject_model([(0.1, True, 10.0)])
    # preemptions as often as expected (runs of 1 h expected, seen)
    assert not holds_reject_model([(1.2, True, 1.0), (0.8, True, 1.0), (1.5, False, 1.0)])
    # a preemption at the launch itself (no run expected: inf) still counts as one seen
    assert holds_reject_model([(0.0, True, np.inf), (0.2, True, 10.0), (0.2, True, 10.0)])


def test_the_run_law_test_knows_a_flickering_history_from_a_calm_one():
    """Three holds of about a minute, each ended by a preemption: expected where the history
    flickers (the April 2023 trace's us-west-2b: runs of one or two 32 s ticks between long
    ones), significant where it is calm (runs of 10-15 h)."""
    gap = 32.0 / 3600.0
    flicker = np.array([gap, 2 * gap, gap, 1.0, gap, 2 * gap, 1.0, gap, 3 * gap, 1.0])
    calm = np.array([10.0, 12.0, 15.0, 11.0, 14.0, 13.0])
    short = [(gap, True, True), (2 * gap, True, True), (gap, True, True)]
    assert not holds_reject_run_law([short], [flicker], gap)
    assert holds_reject_run_law([short], [calm], gap)
    # one short hold is never enough, and holds that ran as long as the law says are fine
    assert not holds_reject_run_law([short[:1]], [calm], gap)
    assert not holds_reject_run_law([[(11.0, True, True), (9.0, True, True)]], [calm], gap)
    # spread over zones: each hold is judged by its own zone's law
    assert not holds_reject_run_law([short[:2], short[2:], []], [flicker, flicker, calm], gap)
    assert holds_reject_run_law([short[:2], short[2:], []], [calm, calm, flicker], gap)


def test_the_residual_test_weighs_runs_by_length_for_holds_that_began_mid_run():
    """Twenty-third round (``model_check="holds_residual"``): a calm history with a few short
    runs makes short holds that began with a run plausible, but not short holds that began
    in the middle of one (a launch into a zone that was already up samples runs by their
    length); holds that began at a recovery the job saw are judged as v7 judges them."""
    gap = 300.0 / 3600.0
    runs = np.array([0.1, 0.2, 0.1, 12.0, 15.0, 10.0, 14.0, 11.0])
    fresh = [(0.2, True, True, True), (0.3, True, True, True)]
    mid = [(0.2, True, True, False), (0.3, True, True, False)]
    assert not holds_reject_run_law([fresh], [runs], gap, residual=True)
    assert not holds_reject_run_law([mid], [runs], gap)  # v7 reads every hold as fresh
    assert holds_reject_run_law([mid], [runs], gap, residual=True)
    # one exponential is memoryless: its residual life is the run itself
    one = np.array([10.0])
    for x in (0.5, 2.0, 8.0):
        assert holds_reject_run_law([[(x, True, True, False)] * 3], [one], gap, residual=True) == \
            holds_reject_run_law([[(x, True, True, True)] * 3], [one], gap)


def test_a_hold_seen_as_zero_hours_counts_as_one_tick():
    calm = np.array([10.0, 12.0, 15.0])
    zero = [(0.0, True, True), (0.0, True, True)]
    gap = 300.0 / 3600.0
    ticks = [(gap, True, True), (gap, True, True)]
    assert holds_reject_run_law([zero], [calm], gap) == holds_reject_run_law([ticks], [calm], gap)


def _lying_market(cheap: int = 5) -> Market:
    """One region: zone 0 dear (1.6 $/h) and always up; ``cheap`` zones at 1.0 $/h, up for the
    whole 24 h history but for a 10-min outage every 8 h; from the job's start they are up
    for 1 tick and down for 5, out of phase."""
    n = HIST + 400
    nz = cheap + 1
    up = np.ones((nz, n), dtype=bool)
    job = np.arange(n - HIST)
    for z in range(1, nz):
        up[z, 10 * z:HIST:96] = False
        up[z, HIST:] = (job + z) % 6 == 0
    price = np.array([[1.6]] + [[1.0]] * cheap) * np.ones((1, n))
    return Market(zones=tuple(f"r-{chr(97 + z)}" for z in range(nz)), gap_seconds=300.0,
                  available=up, regions=("r",) * nz, clouds=("aws",) * nz, spot_price=price,
                  on_demand_price=np.full(nz, 3.4))


def _run(params: SpotfleetParams, market: Market, spec: JobSpec):
    pol = SpotfleetPolicy(params)
    tl: list[tuple[int, int]] = []
    res = simulate(pol, market, spec, HIST, timeline=tl)
    return pol, res, tl


@pytest.mark.parametrize("check", ["holds", "holds_law", "holds_residual"])
def test_a_lying_history_is_rejected_and_the_job_stays_where_its_own_holds_last(check):
    m = _lying_market()
    spec = JobSpec(work_hours=6.0, deadline_hours=9.0, notice_seconds=120.0)
    v6, r6, _ = _run(SpotfleetParams(model_check="off"), m, spec)
    cand, rc, tl = _run(SpotfleetParams(model_check=check), m, spec)
    assert r6.deadline_met and rc.deadline_met
    assert cand._rejected
    # v6 keeps going back to the cheap zones whose calm history it believes
    assert r6.preemptions >= 2 * rc.preemptions > 0
    assert rc.cost < r6.cost
    # once rejected, the job holds the dear zone to the end
    assert tl[-1][1] == 0


@pytest.mark.parametrize("check", ["holds", "holds_law", "holds_residual"])
def test_a_true_history_is_not_rejected_and_nothing_changes(check):
    """The same zones, but the cheap ones keep their calm history during the job."""
    m = _lying_market()
    av = m.available.copy()
    av[1:, HIST:] = True
    true_m = Market(zones=m.zones, gap_seconds=300.0, available=av, regions=m.regions,
                    clouds=m.clouds, spot_price=m.spot_price, on_demand_price=m.on_demand_price)
    spec = JobSpec(work_hours=6.0, deadline_hours=9.0, notice_seconds=0.0)
    _, r6, t6 = _run(SpotfleetParams(model_check="off"), true_m, spec)
    cand, rc, tc = _run(SpotfleetParams(model_check=check), true_m, spec)
    assert not cand._rejected
    assert rc.cost == r6.cost and tc == t6


def test_ranking_caps_never_make_a_zone_unworthy_of_a_try():
    """Zones the capped runs make worthless (cost per useful hour inf) keep v6's order,
    after every zone the caps leave finite."""
    pol = SpotfleetPolicy(SpotfleetParams(model_check="holds"))
    eff = np.array([2.0, 1.0, 1.5])

    pol.cost_per_useful_hour = lambda state, obs, held=None: np.array([np.inf, 3.0, np.inf])
    ranked = pol._rank_eff(None, None, eff)
    assert ranked[1] == 3.0
    assert ranked[2] == RANK_AFTER_USD + 1.5 < ranked[0] == RANK_AFTER_USD + 2.0


def test_model_check_is_v8s_default_v5_ignores_it_and_a_bad_value_is_refused():
    assert SpotfleetParams().model_check == "holds_residual"  # v8, the default since session 13
    m = _lying_market()
    spec = JobSpec(work_hours=6.0, deadline_hours=9.0, notice_seconds=120.0)
    # v5 (zone_model="history") keeps no holds: the check never acts, whatever it says
    v5 = [_run(SpotfleetParams(zone_model="history", model_check=c), m, spec) for c in
          ("off", "holds", "holds_law", "holds_residual")]
    assert not any(p._rejected for p, _, _ in v5)
    assert len({(r.cost, tuple(tl)) for _, r, tl in v5}) == 1
    with pytest.raises(ValueError, match="model_check 'x'"):
        simulate(SpotfleetPolicy(SpotfleetParams(model_check="x")), m, spec, HIST)
