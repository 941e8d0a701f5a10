"""spotfleet's v6 fourth-round candidate (``SpotfleetParams.hold_ranking``, issue 10; tried
2026-11-26 and not adopted): the run laws a launch meets (plain, residual and "since
last seen down", renewal theory on the tick grid) on hand-made run lists with known
answers, the hold they give, the fallback to v5 for zones with few preemptions, and the
default reproducing v5's decisions and costs bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from v5_pins import V5

from fleet.market.regimes import regime_market, volatile_config
from fleet.policies.base import IDLE, JobSpec, JobState, Observation
from fleet.policies.market_view import (
    PriorStats,
    expected_hold_hours,
    run_law,
    run_law_since,
    up_run_ticks,
)
from fleet.policies.spotfleet import HOLD_MIN_PREEMPTIONS, SpotfleetParams, SpotfleetPolicy
from fleet.simulation.engine import simulate


def _history(*runs: tuple[bool, int]) -> np.ndarray:
    return np.concatenate([np.full(n, up, dtype=bool) for up, n in runs])


def test_up_run_ticks_counts_runs_cut_by_the_window_at_their_observed_length():
    up = _history((True, 3), (False, 2), (True, 1), (False, 5), (True, 4), (False, 1), (True, 2))
    assert up_run_ticks(up).tolist() == [3, 1, 4, 2]
    assert up_run_ticks(_history((False, 3))).size == 0
    assert up_run_ticks(_history((True, 7))).tolist() == [7]


def test_plain_law_is_the_share_of_runs_and_residual_law_is_length_biased():
    runs = np.array([1, 3, 3])
    np.testing.assert_allclose(run_law(runs, residual=False), [1 / 3, 0, 2 / 3])
    # 7 up ticks; remaining j ticks: 1 from each run (3), 2 and 3 from each 3-tick run (2 each)
    np.testing.assert_allclose(run_law(runs, residual=True), [3 / 7, 2 / 7, 2 / 7])
    assert run_law(np.zeros(0, dtype=int), residual=True).size == 0


def test_run_law_since_goes_from_the_plain_law_to_the_residual_law():
    runs = np.array([1, 3, 3, 7, 2])
    np.testing.assert_allclose(run_law_since(runs, 1), run_law(runs, residual=False))
    np.testing.assert_allclose(run_law_since(runs, 7), run_law(runs, residual=True))
    np.testing.assert_allclose(run_law_since(runs, 50), run_law(runs, residual=True))
    # age below 2 ticks: each run of >= 2 ticks is met at its first or second tick
    # (j = L or L - 1), a 1-tick run at its only one: 9 ticks in all
    np.testing.assert_allclose(run_law_since(runs, 2), np.array([2, 3, 2, 0, 0, 1, 1]) / 9)
    assert run_law_since(np.zeros(0, dtype=int), 3).size == 0


def test_deterministic_runs_leave_half_a_run_on_average():
    # runs of a fixed k ticks: residual mean (k + 1) / 2 ticks, i.e. L / 2 as ticks shrink
    for k, gap in ((1, 1.0), (4, 0.5), (12, 1 / 12), (600, 0.01)):
        law = run_law(np.full(5, k), residual=True)
        assert expected_hold_hours(law, gap, np.inf) == pytest.approx((k + 1) / 2 * gap)
        assert expected_hold_hours(run_law(np.full(5, k), residual=False), gap, np.inf) == \
            pytest.approx(k * gap)
    law = run_law(np.full(3, 6000), residual=True)  # L = 6 h on a 1 ms grid
    assert expected_hold_hours(law, 0.001, np.inf) == pytest.approx(3.0, rel=1e-3)
    # capped at a need c < L: E[min(U L, c)] = c - c^2 / (2 L)
    assert expected_hold_hours(law, 0.001, 2.0) == pytest.approx(2.0 - 4.0 / 12.0, rel=1e-3)


def test_memoryless_runs_meet_the_same_law_fresh_or_residual():
    # geometric runs on the grid (the discrete exponential): P(k) = q (1 - q)^(k - 1);
    # the residual law is the same geometric law, and E[min(K g, c)] is known in closed form
    q, gap, cap = 0.05, 0.25, 3.0
    ks = np.arange(1, 4000)
    counts = np.round(1e6 * q * (1 - q) ** (ks - 1)).astype(int)
    runs = np.repeat(ks, counts)
    fresh, resid = run_law(runs, residual=False), run_law(runs, residual=True)
    m = int(cap / gap)  # E[min(K, m)] = sum_{j=1..m} P(K >= j) = (1 - (1 - q)^m) / q
    exact = (1 - (1 - q) ** m) / q * gap
    assert expected_hold_hours(fresh, gap, cap) == pytest.approx(exact, rel=2e-3)
    assert expected_hold_hours(resid, gap, cap) == pytest.approx(exact, rel=2e-3)
    np.testing.assert_allclose(resid[:60], fresh[:60], rtol=1e-3)  # (rounded counts beyond)


def test_heavy_tailed_runs_residual_hold_exceeds_fresh_hold():
    # many 1-tick runs and a few long ones: a fresh launch is usually preempted at once,
    # a launch at an arbitrary time usually lands inside a long run
    runs = np.array([1] * 18 + [200] * 2)
    fresh, resid = run_law(runs, residual=False), run_law(runs, residual=True)
    assert expected_hold_hours(fresh, 0.1, 8.0) == pytest.approx(0.9 * 0.1 + 0.1 * 8.0)
    assert expected_hold_hours(resid, 0.1, 8.0) > 4.0


def test_prior_stats_keep_the_run_lists_only_when_asked():
    up = _history((True, 3), (False, 2), (True, 1), (False, 5), (True, 4), (False, 1), (True, 2))
    hist = np.vstack([up, up, np.ones_like(up)])
    off = PriorStats.from_history(hist, 1.0, 100.0, regions=("r", "r", "s"))
    assert off.up_runs_ticks is None and off.preemptions is None
    on = PriorStats.from_history(hist, 1.0, 100.0, regions=("r", "r", "s"), run_lists=True)
    assert on.up_runs_ticks[0].tolist() == [3, 1, 4, 2]
    assert on.preemptions.tolist() == [3, 3, 0]
    # zone 1 is up at each of zone 0's 3 drops? no: they drop together, so no samples
    assert on.neighbour_remaining_ticks[1].size == 0
    np.testing.assert_array_equal(on.mean_up_hours, off.mean_up_hours)


def _observation(hist: np.ndarray, gap: float) -> Observation:
    return Observation(tick=hist.shape[1] - 1, gap_hours=gap, zones=("flaky", "steady"),
                       regions=("r1", "r2"), available=hist[:, -1], history=hist)


def test_hold_ranking_tells_apart_zones_v5_cannot():
    # 5-minute ticks; about the same mean up-run (4 h) in both zones: "flaky" has it as
    # forty 5-minute runs and one 167 h run, "steady" as 4 h runs. v5's capped mean
    # nearly ties them. Met fresh (the plain run law), "flaky" usually loses its instance
    # at once; met at an arbitrary up tick (the residual law), a launch almost surely
    # lands inside the long run, while a 4 h run leaves 2 h on average.
    gap = 5 / 60
    flaky = _history(*([(True, 1), (False, 1)] * 40 + [(True, 2000), (False, 1)]))
    steady = _history(*([(True, 48), (False, 1)] * 44))
    n = min(flaky.size, steady.size)
    hist = np.vstack([flaky[-n:], steady[-n:]])
    hist[:, -1] = True
    spec = JobSpec(8.0, 16.0, notice_seconds=120.0)
    state = JobState(tick=hist.shape[1] - 1, start_tick=hist.shape[1] - 1, elapsed_hours=0.0,
                     spec=spec, location=IDLE, committed_hours=0.0)
    effs = {}
    for mode in ("off", "renewal", "fresh"):
        pol = SpotfleetPolicy(SpotfleetParams(hold_ranking=mode))
        obs = _observation(hist, gap)
        pol.reset(spec, obs)
        effs[mode] = pol.cost_per_useful_hour(state, obs)
    assert abs(effs["off"][0] - effs["off"][1]) < 0.01 * effs["off"][1]
    assert effs["fresh"][1] < 0.8 * effs["fresh"][0]
    assert effs["renewal"][0] < effs["renewal"][1]
    # a zone believed down is met fresh under "renewal" too
    down = hist.copy()
    down[0, -1] = False
    pol = SpotfleetPolicy(SpotfleetParams(hold_ranking="renewal"))
    pol.reset(spec, _observation(hist, gap))
    assert pol.cost_per_useful_hour(state, _observation(down, gap))[0] == pytest.approx(effs["fresh"][0])


def test_zones_with_few_preemptions_keep_v5s_estimate():
    gap = 0.25
    few = _history((True, 100), (False, 2), (True, 100), (False, 2), (True, 100))
    assert up_run_ticks(few).size == HOLD_MIN_PREEMPTIONS  # 2 preemptions, 3 runs
    hist = np.vstack([few, few])
    spec = JobSpec(8.0, 16.0)
    state = JobState(tick=hist.shape[1] - 1, start_tick=hist.shape[1] - 1, elapsed_hours=0.0,
                     spec=spec, location=IDLE, committed_hours=0.0)
    obs = _observation(hist, gap)
    v5, cand = SpotfleetPolicy(), SpotfleetPolicy(SpotfleetParams(hold_ranking="renewal"))
    for pol in (v5, cand):
        pol.reset(spec, obs)
    np.testing.assert_array_equal(cand.cost_per_useful_hour(state, obs),
                                  v5.cost_per_useful_hour(state, obs))


def test_the_candidate_runs_and_meets_deadlines_on_a_small_market():
    m = regime_market(volatile_config(hours=24.0 * 8), 2)
    spec = JobSpec(8.0, 12.0, notice_seconds=0.0, checkpoint_gb=10.0)
    for mode in ("renewal", "fresh", "renewal_since"):
        for s, _, _ in V5[("volatile", 0.0)]:
            assert simulate(SpotfleetPolicy(SpotfleetParams(hold_ranking=mode)), m, spec, s).deadline_met
