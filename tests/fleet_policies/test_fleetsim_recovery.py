"""spotfleet's v6 candidate for repeated preemptions after a zone comes back
(``SpotfleetParams.recovery_window_hours``, tried 2026-11-26 and not adopted): the runs
after a quick recovery on a hand-made history, the wiring in ``expected_runs``, and the
default reproducing v5's decisions and costs bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from fleet.policies.base import IDLE, JobSpec, JobState, Observation
from fleet.policies.market_view import PriorStats, hold_hours, runs_after_recovery
from fleet.policies.spotfleet import SpotfleetParams, SpotfleetPolicy


def _history(*runs: tuple[bool, int]) -> np.ndarray:
    return np.concatenate([np.full(n, up, dtype=bool) for up, n in runs])


def test_runs_after_recovery_on_a_hand_made_history():
    # up 3, down 2, up 1, down 5, up 4, down 1, up 2 (censored at the end); 1 h ticks
    up = _history((True, 3), (False, 2), (True, 1), (False, 5), (True, 4), (False, 1), (True, 2))
    assert runs_after_recovery(up, 1.0, 2.0).tolist() == [1.0, 2.0]  # outages of 2 h and 1 h
    assert runs_after_recovery(up, 1.0, 1.0).tolist() == [2.0]
    assert runs_after_recovery(up, 1.0, 0.5).tolist() == []
    assert runs_after_recovery(up, 1.0, np.inf).tolist() == [1.0, 4.0, 2.0]  # not the first run
    # a history that starts down: the first run's outage began before it, so it never counts
    down_first = _history((False, 1), (True, 2), (False, 1), (True, 3))
    assert runs_after_recovery(down_first, 0.5, 1.0).tolist() == [1.5]
    assert runs_after_recovery(_history((True, 4)), 1.0, 9.0).size == 0


def test_hold_hours_is_the_mean_of_runs_capped_at_the_need():
    runs = np.array([0.1, 0.1, 10.0])
    assert hold_hours(runs, 2.0) == pytest.approx((0.1 + 0.1 + 2.0) / 3)
    assert hold_hours(runs, np.inf) == pytest.approx(10.2 / 3)
    # heavy tails: far below the mean capped at the need (what v5's cost uses)
    assert hold_hours(runs, 2.0) < min(runs.mean(), 2.0)
    assert hold_hours(np.zeros(0), 3.0) == 3.0  # no runs: no information, the need


def test_prior_stats_compute_the_runs_only_when_asked():
    up = _history((True, 3), (False, 2), (True, 1), (False, 5), (True, 4), (False, 1), (True, 2))
    hist = np.vstack([up, ~up])
    off = PriorStats.from_history(hist, 1.0, 100.0)
    assert off.runs_after_recovery_hours is None and off.runs_after_outage_hours is None
    on = PriorStats.from_history(hist, 1.0, 100.0, recovery_window_hours=2.0)
    assert on.runs_after_recovery_hours[0].tolist() == [1.0, 2.0]
    assert on.runs_after_outage_hours[0].tolist() == [1.0, 4.0, 2.0]
    np.testing.assert_array_equal(on.mean_up_hours, off.mean_up_hours)


def _flappy_observation(tick: int) -> Observation:
    """Zone 0 has long runs, but after a quick recovery (30 min) it holds 10 minutes;
    zone 1 is up all the time. 5-minute ticks."""
    cycle = _history((True, 300), (False, 6), (True, 2), (False, 6), (True, 2), (False, 40))
    flappy = np.tile(cycle, 10)[: tick + 1]
    hist = np.vstack([flappy, np.ones(tick + 1, dtype=bool)])
    return Observation(tick=tick, gap_hours=300 / 3600, zones=("a", "b"), regions=("r1", "r2"),
                       available=hist[:, -1], history=hist)


def test_the_zone_that_preempted_the_job_is_judged_by_its_runs_after_recovery():
    start, gap = 2000, 300 / 3600
    spec = JobSpec(8.0, 16.0, notice_seconds=120.0)
    obs0 = _flappy_observation(start)
    runs = {}
    for name, params in (("v5", SpotfleetParams()),
                         ("hold", SpotfleetParams(recovery_window_hours=1.0))):
        pol = SpotfleetPolicy(params)
        pol.reset(spec, obs0)
        t = start + 30  # the job was preempted in zone 0 now
        state = JobState(tick=t, start_tick=start, elapsed_hours=30 * gap, spec=spec, location=IDLE,
                         committed_hours=2.0, preemptions=1, last_preempted_zone=0, just_preempted=True)
        pol.decide(state, _flappy_observation(t))
        later = [pol.expected_runs(_flappy_observation(t + k)) for k in (6, 13)]  # 0.5 h, 1.08 h
        runs[name] = (pol, later)
    v5, (v5_in, v5_after) = runs["v5"][0], runs["v5"][1]
    cand, (in_window, after_window) = runs["hold"][0], runs["hold"][1]
    rec = cand.prior.runs_after_recovery_hours[0]
    assert rec.size >= 3 and np.allclose(rec, 2 * gap)  # the 10-minute runs after 30-min outages
    assert in_window[0] == pytest.approx(2 * gap)  # judged by them within the window
    assert in_window[0] < v5_in[0]
    assert in_window[1] == v5_in[1]  # the other zone keeps v5's value
    np.testing.assert_array_equal(after_window, v5_after)  # and after the window, v5 again
    assert v5.prior.runs_after_recovery_hours is None

