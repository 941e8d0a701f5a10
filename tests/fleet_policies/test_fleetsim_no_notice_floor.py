"""The no-notice checkpoint floor (fleet/simulation/no_notice_floor.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fleet.simulation.no_notice_floor import run_minutes, schedule, zone_excess, zone_waste


def _geometric(mean_minutes: float, n: int = 200_000, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).geometric(1.0 / mean_minutes, size=n)


def test_memoryless_zone_matches_young_daly():
    # exponential runs with a 10 h mean, an 8 h job, 1 min saves: the optimal schedule's
    # excess over the notice is Young/Daly's sqrt(2 C / M) - C / M to first order
    nn, wn = zone_waste(_geometric(600.0), 480, 1, 6)
    young = math.sqrt(2.0 / 600.0) - 1.0 / 600.0
    assert nn - wn == pytest.approx(young, rel=0.1)
    assert wn == pytest.approx(7.0 / 600.0, rel=0.15)  # (C + d) per preemption, 0.8 per job


def test_notice_never_costs_more_than_no_notice():
    rng = np.random.default_rng(1)
    for _ in range(5):
        runs = np.concatenate([rng.integers(1, 40, 300), rng.integers(100, 2000, 300)])
        nn, wn = zone_waste(runs, 240, 1, 6)
        assert wn <= nn + 1e-12


def test_a_zone_never_preempted_has_no_excess():
    av = np.ones((1, 500), dtype=bool)
    assert zone_excess(av, 600.0, 8.0, 1 / 60, 0.1, residual=False)[0] == 0.0
    assert zone_excess(av, 600.0, 8.0, 1 / 60, 0.1, residual=True)[0] == 0.0


def test_runs_fresh_and_residual():
    av = np.array([1, 1, 1, 0, 1, 0, 1, 1], dtype=bool)  # runs of 3 and 1 ticks, then 2 censored
    fresh = run_minutes(av, 10.0, 6.0, residual=False)
    assert list(fresh[:2]) == [24, 4] and fresh[2] > 10**6
    res = run_minutes(av, 10.0, 6.0, residual=True)
    assert list(res[:4]) == [4, 14, 24, 4] and np.all(res[4:] > 10**6) and res.size == 6


def test_long_runs_need_no_saves():
    # every run outlives the job: nothing to lose, no save worth making
    nn, wn = zone_waste(np.full(100, 5000), 480, 1, 6)
    assert nn == 0.0 and wn == 0.0


def test_schedule_of_a_memoryless_zone_is_young_interval():
    # first save of a fresh job after about sqrt(2 C M) minutes (34.6 for M = 600, C = 1)
    tab = schedule(_geometric(600.0), 480, 1, 6)
    assert 30 <= tab[0, 0] <= 40
    assert tab[479, 0] == 1  # one minute left: run to the end
