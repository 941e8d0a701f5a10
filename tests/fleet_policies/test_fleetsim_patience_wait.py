"""spotfleet's v6 candidates for the patience rule on SkyNomad's 6 H100 zones
(``SpotfleetParams.patience_wait="observed"`` and ``stats_rule="online"``, tried
2026-11-26 and not adopted): the pure statistics on hand-made histories, the wiring, and
the defaults reproducing v5's decisions and costs bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from fleet.policies.base import JobSpec, Observation
from fleet.policies.market_view import (
    PriorStats,
    current_down_hours,
    mean_down_with_current,
    run_stats,
)
from fleet.policies.spotfleet import SpotfleetParams, SpotfleetPolicy


def _history(*runs: tuple[bool, int]) -> np.ndarray:
    return np.concatenate([np.full(n, up, dtype=bool) for up, n in runs])


def test_current_down_hours_is_the_trailing_down_run():
    hist = np.vstack([_history((True, 3), (False, 2)),   # down for the last 2 ticks
                      _history((False, 2), (True, 3)),   # up now
                      _history((False, 5))])             # never up: the whole history
    np.testing.assert_allclose(current_down_hours(hist, 0.5), [1.0, 0.0, 2.5])
    with pytest.raises(ValueError):
        current_down_hours(np.ones(3, dtype=bool), 1.0)


def test_mean_down_with_current_counts_the_outage_in_progress():
    # 3 h down in 2 regains before, 2 h into the current outage: (3 + 2) / (2 + 1)
    out = mean_down_with_current(np.array([3.0, 0.0, 0.0]), np.array([2, 0, 0]),
                                 np.array([2.0, 0.0, 4.0]), 0.25)
    np.testing.assert_allclose(out, [5.0 / 3.0, 0.25, 4.0])  # floor: one tick


def test_run_stats_equals_prior_stats_on_the_same_window():
    rng = np.random.default_rng(0)
    hist = rng.random((4, 300)) < 0.7
    a, up, down = run_stats(hist, 0.5, 100.0)
    prior = PriorStats.from_history(hist, 0.5, 100.0)
    np.testing.assert_allclose(a, prior.availability)
    np.testing.assert_allclose(up, prior.mean_up_hours)
    np.testing.assert_allclose(down, prior.mean_down_hours)
    # the window is the last lookback hours: 100 h of 0.5 h ticks = the last 200 ticks
    a2, _, _ = run_stats(hist, 0.5, 100.0)
    np.testing.assert_allclose(a2, hist[:, -200:].mean(axis=1))


def test_patience_wait_grows_with_the_observed_outage():
    gap = 1.0
    # zone 0 never down before the job; the job has seen it down for the last 3 ticks
    pre = np.ones((2, 20), dtype=bool)
    obs0 = Observation(tick=19, gap_hours=gap, zones=("a", "b"), available=pre[:, -1], history=pre)
    spec = JobSpec(8.0, 16.0, notice_seconds=120.0)
    hist = np.hstack([pre, np.vstack([np.zeros(3, dtype=bool), np.ones(3, dtype=bool)])])
    obs = Observation(tick=22, gap_hours=gap, zones=("a", "b"), available=hist[:, -1], history=hist)
    waits = {}
    for name in ("prior", "observed"):
        pol = SpotfleetPolicy(SpotfleetParams(patience_wait=name))
        pol.reset(spec, obs0)
        waits[name] = pol.patience_wait_hours(obs)
    np.testing.assert_allclose(waits["prior"], [1.0, 1.0])  # v5: one tick, however long
    np.testing.assert_allclose(waits["observed"], [3.0, 1.0])


def test_online_stats_are_refreshed_from_the_observation_at_each_decision():
    from fleet.policies.base import JobState

    gap = 1.0
    pre = np.ones((2, 20), dtype=bool)
    obs0 = Observation(tick=19, gap_hours=gap, zones=("a", "b"), available=pre[:, -1], history=pre)
    spec = JobSpec(8.0, 40.0, notice_seconds=120.0)
    hist = np.hstack([pre, np.vstack([np.zeros(3, dtype=bool), np.ones(3, dtype=bool)])])
    obs = Observation(tick=22, gap_hours=gap, zones=("a", "b"), available=hist[:, -1], history=hist)
    state = JobState(tick=22, start_tick=19, elapsed_hours=3.0, spec=spec)
    for rule, down0 in (("prior", 1.0), ("online", 3.0)):
        pol = SpotfleetPolicy(SpotfleetParams(stats_rule=rule))
        pol.reset(spec, obs0)
        pol.decide(state, obs)
        assert pol.prior.mean_down_hours[0] == pytest.approx(down0)
        assert pol.prior.availability[0] == pytest.approx(1.0 if rule == "prior" else 20 / 23)


def test_patience_pays_stops_waiting_once_the_idle_time_outweighs_the_saving():
    from fleet.policies.base import IDLE, JobState

    gap = 1.0 / 6
    pre = np.ones((2, 120), dtype=bool)
    prices = np.array([10.0, 12.0])  # zone 0 cheapest
    od = np.array([80.0, 80.0])
    spec = JobSpec(20.0, 30.0, notice_seconds=120.0)
    obs0 = Observation(tick=119, gap_hours=gap, zones=("a", "b"), available=pre[:, -1],
                       history=pre, spot_price=prices, on_demand_price=od)
    # zone 0 was seen down a tick ago (it may be back: probed belief), zone 1 is up
    hist = np.hstack([pre, np.vstack([np.zeros(2, dtype=bool), np.ones(2, dtype=bool)])])
    obs = Observation(tick=121, gap_hours=gap, zones=("a", "b"), available=hist[:, -1],
                      history=hist, spot_price=prices, on_demand_price=od, probed=True,
                      last_seen_tick=np.array([120, 121]))
    state = JobState(tick=121, start_tick=119, elapsed_hours=2 * gap, spec=spec, location=IDLE)
    acts = {}
    for pays, idle_h in ((False, 0.0), (True, 0.0), (True, 5.0)):
        pol = SpotfleetPolicy(SpotfleetParams(patience_pays=pays))
        pol.reset(spec, obs0)
        pol._idle_h = idle_h  # hours this job has already spent idle
        a = pol.decide(state, obs)
        acts[(pays, idle_h)] = (a.target, tuple(a.fallbacks))
    # v5 and the candidate with no idle time yet wait for zone 0 only
    assert acts[(False, 0.0)] == (0, (IDLE,))
    assert acts[(True, 0.0)] == (0, (IDLE,))
    # 5 h idle x ~12 $/h > (12 - 10) $/h x 20 h: try zone 1 too
    assert acts[(True, 5.0)] == (0, (1, IDLE))


# --------------------------------------------------- patience_wait="residual" (4th candidate)
def test_ended_down_runs_leave_out_the_outage_in_progress():
    from fleet.policies.market_view import ended_down_run_ticks

    up = _history((False, 2), (True, 3), (False, 4), (True, 1), (False, 1), (True, 2), (False, 3))
    # the first run counts from the history's start; the trailing 3-tick outage is left out
    np.testing.assert_array_equal(ended_down_run_ticks(up), [2, 4, 1])
    assert ended_down_run_ticks(np.ones(5, dtype=bool)).size == 0
    assert ended_down_run_ticks(np.zeros(5, dtype=bool)).size == 0
    prior = PriorStats.from_history(np.vstack([up, up]), 1.0, 100.0, down_runs=True)
    assert [r.tolist() for r in prior.down_runs_ticks] == [[2, 4, 1]] * 2
    assert prior.regains.tolist() == [3, 3]
    assert PriorStats.from_history(np.vstack([up, up]), 1.0, 100.0).down_runs_ticks is None


def test_residual_wait_within_and_beyond_the_history():
    from fleet.policies.market_view import residual_wait_ticks

    runs = np.array([1, 1, 2, 3, 6, 10])
    # a = 0: the mean down-run; a = 1: E[D - 1 | D > 1] over 2, 3, 6, 10 = (1 + 2 + 5 + 9) / 4
    assert residual_wait_ticks(runs, 0, 1.0) == pytest.approx(23 / 6)
    assert residual_wait_ticks(runs, 1, 1.0) == pytest.approx(17 / 4)
    # a = 2: 3, 6, 10 outlasted it (3 runs): (1 + 4 + 8) / 3
    assert residual_wait_ticks(runs, 2, 1.0) == pytest.approx(13 / 3)
    # a = 3: only 6 and 10 outlasted it: beyond the history, as long again, at least the floor
    assert residual_wait_ticks(runs, 3, 1.0) == pytest.approx(3.0)
    assert residual_wait_ticks(runs, 3, 4.5) == pytest.approx(4.5)
    assert residual_wait_ticks(runs, 30, 4.5) == pytest.approx(30.0)
    # memoryless outages keep the same residual whatever the age (within the history)
    geo = np.repeat(np.arange(1, 21), 2 ** (20 - np.arange(1, 21)))  # P(D = k) = 2^-k
    r = [residual_wait_ticks(geo, a, 1.0) for a in (0, 2, 4)]
    np.testing.assert_allclose(r, 2.0, rtol=1e-3)
    # no outage in the history: the wait grows with the outage in progress
    assert [residual_wait_ticks(np.zeros(0, dtype=np.int64), a, 1.0) for a in (0, 1, 5)] == \
        [1.0, 1.0, 5.0]
    # one two-tick outage seen (us-east4-a before h100 start 113), one tick down: v5's wait
    assert residual_wait_ticks(np.array([2]), 1, 1.0) == pytest.approx(1.0)


def test_residual_patience_wait_on_an_observation():
    gap = 1.0
    # zone 0 never down before the job, zone 1 down 3 times for 4 ticks
    pre = np.ones((2, 40), dtype=bool)
    for t in (5, 15, 25):
        pre[1, t:t + 4] = False
    obs0 = Observation(tick=39, gap_hours=gap, zones=("a", "b"), available=pre[:, -1], history=pre)
    spec = JobSpec(8.0, 16.0, notice_seconds=120.0)
    hist = np.hstack([pre, np.zeros((2, 3), dtype=bool)])  # both down for the last 3 ticks
    obs = Observation(tick=42, gap_hours=gap, zones=("a", "b"), available=hist[:, -1], history=hist)
    pol = SpotfleetPolicy(SpotfleetParams(patience_wait="residual"))
    pol.reset(spec, obs0)
    np.testing.assert_allclose(pol.patience_wait_hours(obs), [3.0, 1.0])
    np.testing.assert_allclose(pol.patience_wait_hours(obs0), [1.0, 4.0])
    v5 = SpotfleetPolicy()
    v5.reset(spec, obs0)
    np.testing.assert_allclose(v5.patience_wait_hours(obs), [1.0, 3.0])  # 12 / (3 + 1)
