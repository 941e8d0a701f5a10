"""No peeking: two markets identical up to time t and different afterwards yield identical
decisions and training-side estimates up to t (local provider, planner, training side).

The replay schedule is the world the fleet lives through, never an input to decisions:
the local provider builds its fleet policy's prior history from the schedule's past
(``CapacitySchedule.past``), probes zones only at the present, and exports statistics
computed from the plan's priors and what the attempt observed.
"""

from __future__ import annotations

import dataclasses
import json
import sys

import numpy as np
import pytest

from fleet.contract import RunPriors
from fleet.emulation.injector import CapacitySchedule, TimeScale
from fleet.market.config import MarketConfig
from fleet.providers.base import StageSpec
from fleet.providers.decisions import Progress
from fleet.providers.local.provider import LocalFleetConfig, LocalFleetProvider, _StageRun

HISTORY_H = 72.0  # market past before the replay starts
SPLIT_H = 12.0  # the markets agree for this long after the replay start, then differ


def _markets() -> tuple[CapacitySchedule, CapacitySchedule, float]:
    """Two replays of the synthetic market: identical up to SPLIT_H into the replay, then
    the second one's future is turned upside down (every zone's availability flipped)."""
    traces = MarketConfig(seed=5, hours=HISTORY_H, future_hours=48.0).traces("all")
    gap = traces[0].gap_seconds
    split = int((HISTORY_H + SPLIT_H) * 3600.0 / gap)
    other = []
    for t in traces:
        av = t.available.copy()
        av[split:] = np.where(av[split:] > 0, 0, 1)
        other.append(dataclasses.replace(t, available=av))
    off = HISTORY_H * 3600.0
    return CapacitySchedule(traces, off), CapacitySchedule(other, off), split * gap - off


def _run(schedule: CapacitySchedule, tmp_path, policy: str) -> _StageRun:
    cfg = LocalFleetConfig(schedule=schedule, time_scale=TimeScale(1.0), cloud="signal",
                           grace_seconds=0.2, workdir=tmp_path)
    spec = StageSpec(name="np", command=[sys.executable, "-c", "pass"],
                     checkpoint_uri=str(tmp_path / "ck"), policy=policy,
                     deadline_seconds=30 * 3600.0,
                     priors=RunPriors(mttp_seconds={z: 7200.0 for z in schedule.zones},
                                      work_seconds=10 * 3600.0, notice_seconds=0.0))
    return _StageRun(LocalFleetProvider(cfg), spec, 1, None)


def _decisions(schedule: CapacitySchedule, tmp_path, policy: str, until_s: float) -> list:
    """The local provider's decision path stepped on a market clock: its prior history,
    its probes of the present (``try_launch`` against the schedule NOW), preemptions
    when the held zone loses capacity; a node that runs makes progress."""
    run = _run(schedule, tmp_path, policy)
    zones = schedule.zones
    driver = run._driver(schedule, zones)
    out, loc, committed = [], None, 0
    gap = driver.gap_seconds
    t = 0.0
    while t <= until_s:
        if loc not in (None, "on-demand") and not schedule.is_up(loc, t):
            driver.preempted(t, loc)
            loc = None
        d = driver.decide(t, Progress(total_steps=1000, step=committed, committed_step=committed), loc)
        got, _failed = driver.try_launch(t, d, lambda z, t=t: schedule.is_up(z, t), loc)
        loc = None if got is None else (got.zone if got.spot else "on-demand")
        out.append((round(t), loc, d.tries))
        if loc is not None:
            committed = min(1000, committed + 10)
        t += gap
    return out


@pytest.mark.parametrize("policy", ["spotfleet", "failover", "uniform_progress_multi"])
def test_local_provider_decisions_agree_until_the_markets_differ(tmp_path, policy):
    a, b, split_s = _markets()
    assert a.past(a.zones[0], 0.0, 10**6).size > 0  # the policy starts from the past
    da = _decisions(a, tmp_path / "a", policy, split_s - 1.0)
    db = _decisions(b, tmp_path / "b", policy, split_s - 1.0)
    assert da == db
    # ... and the markets do differ afterwards (the test could fail if the code peeked)
    later = 2 * split_s
    assert any(a.is_up(z, t) != b.is_up(z, t) for z in a.zones for t in np.arange(split_s, later, 600))


def test_prior_history_is_the_past_only(tmp_path):
    a, b, split_s = _markets()
    for z in a.zones:
        # before the split the two schedules' pasts agree, whatever their futures
        assert np.array_equal(a.past(z, split_s - 1.0, 10**6), b.past(z, split_s - 1.0, 10**6))
    ra, rb = _run(a, tmp_path / "a", "spotfleet"), _run(b, tmp_path / "b", "spotfleet")
    pa = ra._driver(a, a.zones).market.history(0.0)
    pb = rb._driver(b, b.zones).market.history(0.0)
    assert np.array_equal(pa, pb)


def test_training_side_estimates_do_not_read_the_replay(tmp_path):
    """The stats file the training process reads before its first preemption: the plan's
    prior, the same for both markets (the old estimator read the whole replay trace)."""
    a, b, _ = _markets()
    out = []
    for name, sched in (("a", a), ("b", b)):
        run = _run(sched, tmp_path / name, "spotfleet")
        path = tmp_path / f"{name}.json"
        run._write_stats(path, sched.zones[0])
        out.append(json.loads(path.read_text()))
    assert out[0] == out[1]
    assert out[0]["mttp_seconds"] == pytest.approx(7200.0 / 3600.0)  # market -> wall s (1 s/h)


def test_planner_sees_only_the_history():
    """fleet_plan's inputs come from the market's history: two markets with different
    futures give the same statistics and the same plan."""
    from fleet.market.prices import PriceBook
    from fleet.planning.planner import StageRequest, plan_stage
    from fleet.stats.preemption import zone_stats

    short = MarketConfig(seed=5, hours=HISTORY_H, future_hours=24.0)
    long_ = MarketConfig(seed=5, hours=HISTORY_H, future_hours=96.0)
    req = StageRequest(work_hours=4.0, deadline_hours=12.0)
    plans = [plan_stage(req, zone_stats(m.traces("history")), None, PriceBook.default())
             for m in (short, long_)]
    assert plans[0].to_dict() == plans[1].to_dict()
    assert plans[0].priors() == plans[1].priors()
