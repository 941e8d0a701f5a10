"""spotfleet v5's to v11's decisions and costs on small synthetic markets, pinned.

v5 (``zone_model="history"``), v6 (``zone_model="changepoint_updown"``, ``model_check="off"``,
session 9), v7 (``model_check="holds_law"``, session 12) and v8 (``model_check="holds_residual"``,
session 13, ``launch_guard="off"``) and v9 (``launch_guard="restart"``, session 15), each with
``od_exit="reserve"``, and v10 (``od_exit="bridge"``, session 16, ``launch_guard="restart"``)
must stay reproducible bit for bit, and the default (v11, ``launch_guard="restart_cost"``,
session 20) must not move unnoticed; ``test_fleetsim_v5_pins.py``
checks both here, in one place.
"""

from __future__ import annotations

import hashlib

import pytest

from fleet.market.regimes import (
    available_config,
    regime_market,
    shift_config,
    shift_market,
    volatile_config,
)
from fleet.policies.base import JobSpec
from fleet.policies.spotfleet import SpotfleetParams, SpotfleetPolicy
from fleet.simulation.engine import simulate
from fleet.simulation.families import SHIFT_HOURS, spread_starts

# main at 4f79470, before any v6 candidate existed: start tick, cost $ and sha256 of the
# timeline [(tick, location), ...], first 16 hex digits
V5 = {
    ("volatile", 0.0): [(864, 16.018353873232, "fd41b7e0acf77d15"),
                        (1259, 29.701439453168, "192d1ced50c35458"),
                        (1655, 20.345039187307, "2cb51db98e41e6df")],
    ("volatile", 120.0): [(864, 13.838869702055, "f2e20992160baf9a"),
                          (1259, 29.701439453168, "af6095629569acd2"),
                          (1655, 14.729942322461, "6c81b74ab098741f")],
    ("available", 0.0): [(864, 9.079561191869, "b7bb51010b53edf5"),
                         (1259, 9.830007799961, "011cba7c6d0dde47"),
                         (1655, 9.921665769598, "2ad5e47c63a5511f")],
    ("available", 120.0): [(864, 8.861540577591, "c7d2a6779f7f6e14"),
                           (1259, 10.054424194252, "6cd5f708f71fdbc9"),
                           (1655, 8.861540577591, "8c4a7ad11ffeecc3")],
}


# the default since session 9 (v6: zone_model="changepoint_updown"), recorded at its
# adoption (main at aa15421 with the default changed); same starts. Where only the cost
# differs from v5, the zones and times are v5's and the checkpoint intervals are not.
V6 = {
    ("volatile", 0.0): [(864, 16.139020023334, "fd41b7e0acf77d15"),
                        (1259, 29.701439453168, "192d1ced50c35458"),
                        (1655, 20.556022056721, "f3af66682d04ca4e")],
    ("volatile", 120.0): V5[("volatile", 120.0)],
    ("available", 0.0): [(864, 9.079561191869, "b7bb51010b53edf5"),
                         (1259, 9.856268194336, "011cba7c6d0dde47"),
                         (1655, 9.954820125603, "2ad5e47c63a5511f")],
    ("available", 120.0): [(864, 9.113186760322, "af750465164ab522"),
                           (1259, 10.054424194252, "6cd5f708f71fdbc9"),
                           (1655, 8.861540577591, "8c4a7ad11ffeecc3")],
}


# session 12: the regime-shift market (pinned_market("shift")), recorded at v7's adoption with
# v6 (model_check="off") and v7 (the default, model_check="holds_law"). On the stationary
# markets v7 is v6 to the last digit (its test never trips there).
V6[("shift", 0.0)] = [(2016, 19.121282342434, "3db5c0ceca9f4308"),
                      (2411, 21.301158500404, "343696b9ebf627dc"),
                      (2807, 17.516569294978, "aeb589daaecbaa58")]
V6[("shift", 120.0)] = [(2016, 12.168289408458, "12f171ab83ead02b"),
                        (2411, 24.336861366705, "77d20aa920ac9a77"),
                        (2807, 13.686610917446, "c88688995c6f4fbb")]
V7 = {**V6, ("shift", 0.0): [(2016, 24.464703155694, "a03e72c3da5e7c50"), *V6[("shift", 0.0)][1:]]}

# session 13: v8 (the default, model_check="holds_residual") recorded at its adoption; it is
# v7 on the stationary markets and differs on the shift market in two starts (the same zones
# and times but other checkpoint intervals at 2016 without a notice; other zones at 2411 with).
V8 = {**V7,
      ("shift", 0.0): [(2016, 24.44654403331, "a03e72c3da5e7c50"), *V7[("shift", 0.0)][1:]],
      ("shift", 120.0): [V7[("shift", 120.0)][0], (2411, 15.320740682638, "3ff49e12711af648"),
                         V7[("shift", 120.0)][2]]}


# session 15: v9 (the default, launch_guard="restart") recorded at its adoption: v8's decisions
# and costs at every pinned start (the guard binds only where the spare slack above the safety
# net is below a restart; tests/fleet_policies/test_fleetsim_launch_guard.py pins where it does)
V9 = dict(V8)

# session 16: v10 (the default, od_exit="bridge") recorded at its adoption: v9's decisions but
# at the volatile market's start 1655 without a notice, where the job on on-demand tries spot
# sooner (the same locations per decision; the failed launch tries shift its progress)
V10 = {**V9, ("volatile", 0.0): [*V9[("volatile", 0.0)][:2], (1655, 20.52284158413, "f3af66682d04ca4e")]}

# session 20: v11 (the default, launch_guard="restart_cost") recorded at its adoption: v10's
# decisions and costs at every pinned start (the rule binds only where a launch would be the
# job's last spot run; tests/fleet_policies/test_fleetsim_launch_guards_s19.py pins where it does)
V11 = dict(V10)


def pinned_market(regime: str):
    """The 8-day synthetic market (seed 2) the pins were recorded on; ``"shift"``: the
    regime-shift market of the shift families on seed 2 (no family's seed), 12 days, cheap
    zones flaky from 171 h."""
    if regime == "shift":
        before, after = shift_config()
        return shift_market(before, after, 2, SHIFT_HOURS)
    cfg = {"volatile": volatile_config, "available": available_config}[regime](hours=24.0 * 8)
    return regime_market(cfg, 2)


PIN_WARMUP_HOURS = {"volatile": 72.0, "available": 72.0, "shift": 168.0}
"""History before the first pinned start (the shift market's first start sees the shift)."""


def pinned_spec(notice: float) -> JobSpec:
    return JobSpec(8.0, 12.0, notice_seconds=notice, checkpoint_gb=10.0)


def assert_reproduces(pins: dict, regime: str, notice: float,
                      params: SpotfleetParams | None) -> None:
    """``SpotfleetPolicy(params)`` makes the pinned decisions and pays the pinned cost at
    every pinned start (``pins``: ``V5`` ... ``V11``)."""
    m, spec = pinned_market(regime), pinned_spec(notice)
    starts = spread_starts(m, spec, 3, PIN_WARMUP_HOURS[regime])
    assert [int(s) for s in starts] == [s for s, _, _ in pins[(regime, notice)]]
    for s, cost, digest in pins[(regime, notice)]:
        tl: list = []
        r = simulate(SpotfleetPolicy(params), m, spec, s, timeline=tl)
        norm = repr([(int(t), int(loc)) for t, loc in tl]).encode()
        assert hashlib.sha256(norm).hexdigest()[:16] == digest, (regime, notice, s, params)
        assert r.cost == pytest.approx(cost, rel=1e-12, abs=1e-9)

