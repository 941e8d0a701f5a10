"""The live driver gives the default policy (spotfleet v6) the job's own evidence, as the
simulator does (issue 10): what was benchmarked is what runs.

v6 (``zone_model="changepoint_updown"``) weighs each zone's history against the holds,
preemptions and outages the job itself sees. Live, that evidence exists only if
``PolicyDriver`` reports every preemption, held tick and failed launch try to the policy.
A deterministic replay (no wall clock) of a regime shift: 30 days of calm history (the
cheap zone up 10 h, down 1 h), then during the job the cheap zone is up one tick in three;
a 30 % dearer zone stays up.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from live_replay import STEP_S, driver, replay

from fleet.emulation.injector import CapacitySchedule
from fleet.market.traces import Trace
from fleet.policies.spotfleet import SpotfleetParams, SpotfleetPolicy

GAP = 300.0
PER_H = int(3600 / GAP)
PRICES = {"us-east-1a": 0.918, "us-east-1b": 1.2}


def _shift_schedule() -> CapacitySchedule:
    pre, post = 30 * 24 * PER_H, 48 * PER_H
    cheap = np.ones(pre + post, dtype=np.int32)
    for k in range(0, pre, 11 * PER_H):  # calm history: 10 h up, 1 h down
        cheap[k + 10 * PER_H: k + 11 * PER_H] = 0
    cheap[pre:] = np.resize([1, 0, 0], post)  # from the job's start: up one tick in three
    dear = np.ones(pre + post, dtype=np.int32)
    for k in range(0, pre, 50 * PER_H):
        dear[k + 49 * PER_H: k + 50 * PER_H] = 0
    traces = [Trace(zone=z, accelerator="L4", count=1, gap_seconds=GAP, available=a, source="test")
              for z, a in (("us-east-1a", cheap), ("us-east-1b", dear))]
    return CapacitySchedule(traces, offset_seconds=pre * GAP)


def _run(policy):
    s = _shift_schedule()
    steps = int(6 * 3600 / STEP_S)  # 6 h of work, 12 h deadline
    d = driver(s, steps, deadline=12 * 3600.0, prices=PRICES, policy=policy)
    held: list = []
    done, idle_up = replay(s, d, steps, held=held, limit_h=24.0)
    return done, idle_up, d, Counter(held)


def test_live_default_leaves_the_zone_whose_history_went_stale():
    done, idle_up, d, ticks = _run("spotfleet")  # the default: v8 (v6 and v7 do the same here)
    assert done is not None and done <= 7 * 3600.0, done
    assert d._preemptions <= 3, d._preemptions  # two or three short holds, then the dear zone
    assert ticks["on-demand"] == 0 and ticks["us-east-1b"] > 60, ticks
    assert idle_up <= 3, idle_up


def test_live_v5_keeps_trusting_the_calm_history():
    """The same replay with v5 (``zone_model="history"``): the difference above is the
    job's evidence reaching the policy, not the schedule."""
    done, idle_up, d, ticks = _run(SpotfleetPolicy(SpotfleetParams(zone_model="history")))
    assert d._preemptions >= 10, d._preemptions  # back to the cheap zone after every preemption
    assert idle_up >= 10
    assert done is None or done >= 9 * 3600.0, done


@pytest.mark.parametrize("check", ["holds_law", "holds_residual"])
def test_live_model_check_sees_the_holds_the_driver_reports(check):
    """The check of v7 (``model_check="holds_law"``) and of v8, the default
    (``"holds_residual"``), sees the two short holds the driver reports, rejects the calm
    history live, and lands where v6 does (two zones: nothing else to rank)."""
    v7 = SpotfleetPolicy(SpotfleetParams(model_check=check))
    done7, _, d7, ticks7 = _run(v7)
    v6 = SpotfleetPolicy(SpotfleetParams(model_check="off"))
    done6, _, d6, ticks6 = _run(v6)
    assert v7._rejected and not v6._rejected
    assert (done7, d7._preemptions, ticks7) == (done6, d6._preemptions, ticks6)
