"""spotfleet's opt-in ``SpotfleetParams.zone_model="changepoint"`` (thirteenth round,
session 8, issue 10; docs/fleet-policies-tuning-log.md): the posterior probability that a
held zone changed, the averaged expected run, and its wiring into the policy. That the
default (``"history"``) is v5 bit for bit is pinned in ``test_fleetsim_v5_pins.py``."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fleet.policies.base import IDLE, JobSpec, JobState, Observation
from fleet.policies.market_view import CHANGE_PRIOR, changed_probability, changepoint_run
from fleet.policies.spotfleet import SpotfleetParams, SpotfleetPolicy

GAP = 1.0 / 6


def test_changed_probability_is_bayes_rule_on_the_two_likelihoods():
    m, n, h, b = 12.0, 2, 1.0, GAP
    l0 = m ** -n * math.exp(-h / m)
    l1 = b * math.factorial(n) / (b + h) ** (n + 1)
    odds = CHANGE_PRIOR / (1 - CHANGE_PRIOR) * l1 / l0
    assert changed_probability(m, n, h, b) == pytest.approx(odds / (1 + odds), rel=1e-12)


def test_short_holds_that_end_in_preemptions_say_changed_long_holds_say_unchanged():
    p = [changed_probability(12.0, n, 0.5 * n, GAP) for n in (1, 2, 3, 4)]
    assert p == sorted(p) and p[0] < 0.5 < p[-1]
    # one early preemption is weak evidence (heavy-tailed laws give those often)
    assert p[0] < 0.4
    # hours held without a preemption, or preemptions at the history's pace: unchanged
    assert changed_probability(12.0, 0, 6.0, GAP) < 0.01
    assert changed_probability(12.0, 3, 36.0, GAP) < 0.01


def test_changepoint_run_leaves_unheld_zones_alone_and_pulls_held_ones_to_their_evidence():
    run = np.array([12.0, 12.0, 6.0])
    out = changepoint_run(run, run, np.array([3, 0, 0]), np.array([1.0, 0.0, 4.0]), GAP)
    assert out[1] == 12.0                       # never held: v5's run
    assert out[0] < 1.0                         # 3 preemptions in 1 h: about (b + 1) / 4
    assert out[0] > (GAP + 1.0) / 4 - 1e-12
    assert 5.5 < out[2] <= 6.0                  # held 4 h, never preempted: v5's, nearly


def _decide_after_preemptions(params: SpotfleetParams, times: int):
    spec = JobSpec(20.0, 30.0, notice_seconds=120.0)
    pre = np.ones((2, 120), dtype=bool)  # 20 h before the job, both zones always up
    prices, od = np.array([10.0, 12.0]), np.array([80.0, 80.0])

    def obs(t):
        hist = np.ones((2, t + 1), dtype=bool)
        return Observation(tick=t, gap_hours=GAP, zones=("a", "b"), available=hist[:, -1],
                           history=hist, spot_price=prices, on_demand_price=od)

    pol = SpotfleetPolicy(params)
    pol.reset(spec, Observation(tick=119, gap_hours=GAP, zones=("a", "b"), available=pre[:, -1],
                                history=pre, spot_price=prices, on_demand_price=od))
    t, start = 120, 119
    act = None
    for k in range(times):  # hold zone 0 for a tick, then lose it
        pol.decide(JobState(tick=t, start_tick=start, elapsed_hours=(t - start) * GAP, spec=spec,
                            location=0), obs(t))
        act = pol.decide(JobState(tick=t + 1, start_tick=start, elapsed_hours=(t + 1 - start) * GAP,
                                  spec=spec, location=IDLE, preemptions=k + 1,
                                  last_preempted_zone=0, just_preempted=True), obs(t + 1))
        t += 2
    return act


def test_the_policy_leaves_a_zone_that_keeps_preempting_it():
    """History: zone 0 (10 $/h) and zone 1 (12 $/h) never preempted. The job is preempted
    in zone 0 after one tick, three times: v5 still relaunches there (its history says the
    zone holds), the candidate goes to zone 1."""
    assert _decide_after_preemptions(SpotfleetParams(zone_model="history"), 3).target == 0
    assert _decide_after_preemptions(SpotfleetParams(zone_model="changepoint"), 3).target == 1
    # one early preemption is not enough to leave
    assert _decide_after_preemptions(SpotfleetParams(zone_model="changepoint"), 1).target == 0


def test_an_unknown_zone_model_names_the_field_and_the_choices():
    spec = JobSpec(20.0, 30.0)
    hist = np.ones((1, 10), dtype=bool)
    obs = Observation(tick=9, gap_hours=GAP, zones=("a",), available=hist[:, -1], history=hist)
    with pytest.raises(ValueError, match="zone_model 'bayes': one of history, changepoint"):
        SpotfleetPolicy(SpotfleetParams(zone_model="bayes")).reset(spec, obs)


# ------------------------------------------- fourteenth round: zone_model="changepoint_emp"
def test_run_law_likelihood_is_the_mixture_density_and_survival():
    from fleet.policies.market_view import run_law_log_likelihood

    runs = np.array([0.1, 2.0, 10.0])
    holds = [(0.5, True), (3.0, False)]
    f = np.mean(np.exp(-0.5 / runs) / runs)
    surv = np.mean(np.exp(-3.0 / runs))
    assert run_law_log_likelihood(holds, runs) == pytest.approx(math.log(f) + math.log(surv))


def test_short_holds_are_no_change_where_the_history_has_short_runs():
    """Two preempted holds of 0.1 h: against an exponential with the history's mean (2 h) they
    say "changed"; against a history whose runs include such short ones they do not."""
    from fleet.policies.market_view import changed_probability_emp

    holds = [(0.1, True), (0.1, True)]
    b = 32.0 / 3600
    calm = np.full(12, 2.0)                                  # every run 2 h
    bursty = np.array([0.08, 0.1, 0.12] + [2.6] * 9)         # the same mean, some short runs
    assert changed_probability(2.0, 2, 0.2, b) > 0.4
    assert changed_probability_emp(holds, calm, b) > 0.4
    assert changed_probability_emp(holds, bursty, b) < 0.15


def test_changed_run_is_the_posterior_mean_of_the_run():
    from fleet.policies.market_view import changepoint_run_emp

    b = GAP
    holds = [[(0.2, True)] * 4, [], [(3.0, False)]]
    runs = [np.full(10, 12.0)] * 3
    out = changepoint_run_emp(np.array([12.0, 12.0, 12.0]), holds, runs, b)
    assert out[1] == 12.0                                   # never held
    assert out[0] == pytest.approx((b + 0.8) / 4, rel=0.02)  # clearly changed: (b + H) / n
    assert out[2] > 11.9                                    # held 3 h, not preempted


def test_changepoint_emp_records_one_hold_per_stay():
    pol = SpotfleetPolicy(SpotfleetParams(zone_model="changepoint_emp"))
    _decide_with(pol, 3)
    assert [len(h) for h in pol._holds] == [3, 0]
    assert all(h[1] for h in pol._holds[0])
    assert all(h[2] for h in pol._holds[0])  # v6 (hold_start="run"): every hold a fresh run
    # each hold runs from the decision that launched it to the preemption (the first one
    # from the job's first decision), and together they are the hours held there
    assert [h[0] for h in pol._holds[0]] == pytest.approx([GAP, 2 * GAP, 2 * GAP])
    assert sum(h[0] for h in pol._holds[0]) == pytest.approx(pol._held_h[0])


def _decide_with(pol, times):
    spec = JobSpec(20.0, 30.0, notice_seconds=120.0)
    pre = np.ones((2, 120), dtype=bool)
    prices, od = np.array([10.0, 12.0]), np.array([80.0, 80.0])

    def obs(t):
        hist = np.ones((2, t + 1), dtype=bool)
        return Observation(tick=t, gap_hours=GAP, zones=("a", "b"), available=hist[:, -1],
                           history=hist, spot_price=prices, on_demand_price=od)

    pol.reset(spec, Observation(tick=119, gap_hours=GAP, zones=("a", "b"), available=pre[:, -1],
                                history=pre, spot_price=prices, on_demand_price=od))
    t, start = 120, 119
    for k in range(times):
        pol.decide(JobState(tick=t, start_tick=start, elapsed_hours=(t - start) * GAP, spec=spec,
                            location=0), obs(t))
        pol.decide(JobState(tick=t + 1, start_tick=start, elapsed_hours=(t + 1 - start) * GAP,
                            spec=spec, location=IDLE, preemptions=k + 1, last_preempted_zone=0,
                            just_preempted=True), obs(t + 1))
        t += 2


# -------------------------------------------- fifteenth round: zone_model="changepoint_updown"
def test_updown_outages_seen_by_the_job_lengthen_the_expected_wait():
    """History: zone 0 goes down for 10 min every 2 h. The job then sees it down at every
    launch try for 6 h: v5 still expects a 10-minute wait, the candidate expects the outage
    it is seeing; zone 1, never tried, keeps the history's."""
    spec = JobSpec(20.0, 60.0)
    pre = np.ones((2, 240), dtype=bool)
    pre[0, ::12] = False
    prices, od = np.array([10.0, 12.0]), np.array([80.0, 80.0])
    pols = {m: SpotfleetPolicy(SpotfleetParams(zone_model=m)) for m in ("history", "changepoint_updown")}
    for pol in pols.values():
        pol.reset(spec, Observation(tick=239, gap_hours=GAP, zones=("a", "b"), available=pre[:, -1],
                                    history=pre, spot_price=prices, on_demand_price=od, probed=True,
                                    last_seen_tick=np.array([-1, -1])))
    for t in range(240, 276):
        hist = np.hstack([pre, np.ones((2, t - 239), dtype=bool)])
        hist[0, 240:] = False
        obs = Observation(tick=t, gap_hours=GAP, zones=("a", "b"), available=hist[:, -1],
                          history=hist, spot_price=prices, on_demand_price=od, probed=True,
                          last_seen_tick=np.array([t, -1]))
        st = JobState(tick=t, start_tick=239, elapsed_hours=(t - 239) * GAP, spec=spec, location=IDLE)
        for pol in pols.values():
            pol.decide(st, obs)
    v5 = pols["history"].mean_down_hours(obs)
    cand = pols["changepoint_updown"].mean_down_hours(obs)
    assert v5[0] == pytest.approx(pols["history"].prior.mean_down_hours[0])
    assert cand[0] > 4.0 > v5[0]
    assert cand[1] == v5[1]
    # an hour after the last try: v5 believes the zone is back, the candidate much less
    later = Observation(tick=obs.tick + 6, gap_hours=GAP, zones=obs.zones,
                        available=obs.available, history=np.hstack([obs.history] + [obs.history[:, -1:]] * 6),
                        spot_price=prices, on_demand_price=od, probed=True,
                        last_seen_tick=np.array([obs.tick, -1]))
    b5, bc = pols["history"].belief(later)[0], pols["changepoint_updown"].belief(later)[0]
    assert b5 > 0.8 and bc < 0.5


# ---------------------------------- sixteenth round: interval_hazard="mixture" (not adopted)
def test_hazard_mixture_is_the_posterior_mean_rate():
    from fleet.policies.market_view import (
        changed_probability_emp,
        changepoint_hazard_emp,
        changepoint_run_emp,
    )

    runs = [np.array([6.0, 8.0, 10.0]), np.array([6.0, 8.0, 10.0])]
    holds = [[(0.4, True), (0.3, True)], []]
    p1 = changed_probability_emp(holds[0], runs[0], GAP)
    haz = changepoint_hazard_emp(np.array([8.0, 8.0]), holds, runs, GAP)
    assert haz[0] == pytest.approx((1 - p1) / 8.0 + p1 * 3 / (GAP + 0.7), rel=1e-12)
    assert haz[1] == pytest.approx(1 / 8.0)  # no evidence: the history's rate
    # the mean hazard is at least the inverse of the averaged run (Jensen)
    run = changepoint_run_emp(np.array([8.0, 8.0]), holds, runs, GAP)
    assert haz[0] > 1 / run[0]


def test_mixture_interval_is_shorter_only_where_the_job_has_evidence():
    """Without a notice, after short holds ending in preemptions, the candidate saves more
    often than v6; with no holds it sets the same interval."""
    spec = JobSpec(20.0, 30.0)  # no notice: periodic saves
    hist = np.ones((2, 200), dtype=bool)
    hist[:, 40::60] = False  # calm: up-runs of about 5 h
    prices = np.array([1.0, 2.5])  # zone 1 dearer: the job relaunches in zone 0

    def obs(t):
        return Observation(tick=t, gap_hours=GAP, zones=("a", "b"), available=hist[:, -1],
                           history=hist, spot_price=prices, on_demand_price=np.array([3.0, 3.0]))

    out = {}
    for hz in ("run", "mixture"):
        pol = SpotfleetPolicy(SpotfleetParams(interval_hazard=hz))
        pol.reset(spec, obs(199))
        first = pol.decide(JobState(tick=200, start_tick=199, elapsed_hours=GAP, spec=spec,
                                    location=IDLE), obs(200))
        t = 200
        for k in range(2):  # hold zone 0 for two ticks, then lose it
            pol.decide(JobState(tick=t + 1, start_tick=199, elapsed_hours=(t + 1 - 199) * GAP,
                                spec=spec, location=0), obs(t + 1))
            act = pol.decide(JobState(tick=t + 3, start_tick=199, elapsed_hours=(t + 3 - 199) * GAP,
                                      spec=spec, location=IDLE, preemptions=k + 1,
                                      last_preempted_zone=0, just_preempted=True), obs(t + 3))
            t += 3
        out[hz] = (first.checkpoint_interval_hours, act.target, act.checkpoint_interval_hours)
    assert out["run"][0] == out["mixture"][0]  # before any evidence: the same
    assert out["run"][1] == out["mixture"][1] == 0  # back to zone 0, which preempted it twice
    assert out["mixture"][2] < 0.9 * out["run"][2]  # so: saves more often there
    with pytest.raises(ValueError, match="interval_hazard 'x': one of run, mixture"):
        SpotfleetPolicy(SpotfleetParams(interval_hazard="x")).reset(spec, obs(199))


# ------------------------------- seventeenth round: h1_rate_ratio (H1's prior from the history)
def test_h1_prior_from_the_history_makes_the_update_independent_of_the_tick():
    """The same holds (hours) against the same history: with v6's prior (one tick) the
    posterior run depends on whether the trace ticks every 32 s or every 10 min; with
    ``h1_rate_ratio`` it does not, and H1's prior mean rate is that ratio x the history's."""
    from fleet.policies.market_view import changepoint_run_emp, h1_prior_hours

    mean = np.array([4.0, 4.0, 8.0])
    holds = [[(0.3, True), (0.5, True)], [], [(1.0, True)]]
    runs = [np.full(10, 4.0), np.full(10, 4.0), np.full(10, 8.0)]
    fine, coarse = 32.0 / 3600, 600.0 / 3600

    def post(gap, ratio):
        return changepoint_run_emp(mean, holds, runs, h1_prior_hours(mean, gap, ratio))

    assert not np.allclose(post(fine, 0.0), post(coarse, 0.0))           # v6: the tick matters
    assert post(fine, 50.0) == pytest.approx(post(coarse, 50.0))          # not any more
    assert h1_prior_hours(mean, coarse, 0.0) == pytest.approx([coarse] * 3)
    assert 1.0 / h1_prior_hours(mean, coarse, 50.0) == pytest.approx(50.0 / mean)
    assert post(fine, 50.0)[1] == 4.0                                     # never held: history
    # one value per zone is the same as one call per zone with that zone's value
    b = h1_prior_hours(mean, coarse, 50.0)
    one = [changepoint_run_emp(mean, holds, runs, float(b[z]))[z] for z in range(3)]
    assert changepoint_run_emp(mean, holds, runs, b) == pytest.approx(one)


def test_the_policy_takes_h1s_prior_from_its_history_means():
    pol = SpotfleetPolicy(SpotfleetParams(h1_rate_ratio=40.0))
    _decide_with(pol, 2)
    obs = Observation(tick=200, gap_hours=GAP, zones=("a", "b"), available=np.ones(2, bool),
                      history=np.ones((2, 201), bool), spot_price=np.array([10.0, 12.0]),
                      on_demand_price=np.array([80.0, 80.0]))
    assert pol._h1_b(obs) == pytest.approx(pol.prior.mean_up_hours / 40.0)
    assert pol._h1_b(obs, down=True) == pytest.approx(pol.prior.mean_down_hours / 40.0)
    v6 = SpotfleetPolicy()
    _decide_with(v6, 2)
    assert v6._h1_b(obs) == pytest.approx([GAP, GAP])


# ---------------------------- seventeenth round: hold_start="seen" (residual life of mid-run holds)
def test_a_mid_run_hold_is_the_run_laws_residual_life():
    """A hold that began mid-run samples runs by their length. With one run length the law
    is exponential and memoryless: mid-run and fresh read the same. With a few short runs
    in the history, a short preempted hold is plausible as a fresh run and not as the rest of
    a run the job walked into."""
    from fleet.policies.market_view import changed_probability_emp, run_law_log_likelihood

    flat = np.full(8, 2.0)
    for x, pre in ((0.3, True), (1.7, False)):
        assert run_law_log_likelihood([(x, pre, False)], flat) == pytest.approx(
            run_law_log_likelihood([(x, pre, True)], flat))
    r = np.array([0.5, 4.0])
    # residual density S(x) / E[R] and survival E[R e^(-x/R)] / E[R], by hand
    dens = (math.exp(-0.2 / 0.5) + math.exp(-0.2 / 4.0)) / 2 / 2.25
    surv = (0.5 * math.exp(-0.2 / 0.5) + 4.0 * math.exp(-0.2 / 4.0)) / 2 / 2.25
    assert run_law_log_likelihood([(0.2, True, False)], r) == pytest.approx(math.log(dens))
    assert run_law_log_likelihood([(0.2, False, False)], r) == pytest.approx(math.log(surv))
    bursty = np.array([0.08, 0.1, 0.12] + [2.6] * 9)
    b = 32.0 / 3600
    fresh = [(0.1, True, True), (0.1, True, True)]
    mid = [(0.1, True, False), (0.1, True, False)]
    assert changed_probability_emp(fresh, bursty, b) < 0.15
    assert changed_probability_emp(mid, bursty, b) > 0.5


def test_hold_start_seen_marks_a_hold_fresh_only_after_a_watched_outage():
    spec = JobSpec(20.0, 60.0, notice_seconds=120.0)
    pre = np.ones((2, 240), dtype=bool)
    prices, od = np.array([10.0, 12.0]), np.array([80.0, 80.0])

    def obs(t, up0, seen0):
        hist = np.hstack([pre, np.ones((2, t - 239), dtype=bool)])
        hist[0, -1] = up0
        return Observation(tick=t, gap_hours=GAP, zones=("a", "b"), available=hist[:, -1],
                           history=hist, spot_price=prices, on_demand_price=od, probed=True,
                           last_seen_tick=np.array([seen0, -1]))

    def st(t, loc, **kw):
        return JobState(tick=t, start_tick=239, elapsed_hours=(t - 239) * GAP, spec=spec,
                        location=loc, **kw)

    pol = SpotfleetPolicy(SpotfleetParams(hold_start="seen"))
    pol.reset(spec, Observation(tick=239, gap_hours=GAP, zones=("a", "b"), available=pre[:, -1],
                                history=pre, spot_price=prices, on_demand_price=od, probed=True,
                                last_seen_tick=np.array([-1, -1])))
    pol.decide(st(240, 0), obs(240, True, 240))        # at the start: walked into a run
    pol.decide(st(242, IDLE, preemptions=1, last_preempted_zone=0, just_preempted=True),
               obs(242, False, 242))                    # preempted: the job watches the outage
    pol.decide(st(243, IDLE, preemptions=1), obs(243, False, 243))
    pol.decide(st(245, 0, preemptions=1), obs(245, True, 244))  # launched as it came back
    pol.decide(st(247, IDLE, preemptions=2, last_preempted_zone=0, just_preempted=True),
               obs(247, False, 247))
    assert [h[2] for h in pol._holds[0]] == [False, True]
    assert [h[1] for h in pol._holds[0]] == [True, True]
    v6 = SpotfleetPolicy()
    with pytest.raises(ValueError, match="hold_start"):
        SpotfleetPolicy(SpotfleetParams(hold_start="seen", zone_model="changepoint_emp")).reset(
            spec, Observation(tick=239, gap_hours=GAP, zones=("a", "b"), available=pre[:, -1],
                              history=pre, spot_price=prices, on_demand_price=od))
    assert v6.p.hold_start == "run"


# ------------------------ eighteenth round: zone_cost="mixture" (the cost averaged, not the run)
def test_mixture_cost_is_the_posterior_average_of_the_two_costs():
    """A held zone that preempted the job three times in a few ticks: v6 costs its averaged
    run (the history's long run still weighs in), the candidate averages the two costs."""
    from fleet.policies.market_view import changed_runs_emp

    pols = {c: SpotfleetPolicy(SpotfleetParams(zone_cost=c)) for c in ("run", "mixture")}
    for pol in pols.values():
        _decide_with(pol, 3)
    spec = JobSpec(20.0, 30.0)  # no notice: a short run buys little progress
    hist = np.ones((2, 127), dtype=bool)
    obs = Observation(tick=126, gap_hours=GAP, zones=("a", "b"), available=hist[:, -1], history=hist,
                      spot_price=np.array([10.0, 12.0]), on_demand_price=np.array([80.0, 80.0]))
    st = JobState(tick=126, start_tick=119, elapsed_hours=7 * GAP, spec=spec, location=IDLE)
    v6 = pols["run"].cost_per_useful_hour(st, obs)
    mix = pols["mixture"].cost_per_useful_hour(st, obs)
    pol = pols["mixture"]
    (z, p1, r1), = list(changed_runs_emp(pol._holds_now(), pol._emp_runs, pol._h1_b(obs)))
    assert z == 0 and 0.0 < p1 < 1.0
    r0 = pol._history_runs(obs)[0]
    rem = spec.work_hours
    e0 = pol._eff(spec, 10.0, r0, spec.restart_hours, 0.0, rem)
    e1 = min(pol._eff(spec, 10.0, r1, spec.restart_hours, 0.0, rem),
             pol.on_demand_cost_per_useful_hour(st, pol._od_price(st, obs)))
    assert mix[0] == pytest.approx((1 - p1) * e0 + p1 * e1)
    assert mix[0] > v6[0]          # the changed branch is costed, not averaged away
    assert mix[1] == v6[1]          # a zone the job never held: unchanged
