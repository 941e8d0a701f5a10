"""spotfleet v5's and v6's decisions and costs on a small synthetic market, pinned.

v5 (``zone_model="history"``) must stay reproducible bit for bit, and the default (v6,
``zone_model="changepoint_updown"``, adopted in session 9) must not move unnoticed;
``test_fleetsim_v5_pins.py`` checks both here, in one place.
"""

from __future__ import annotations

import hashlib

import pytest

from fleet.market.regimes import available_config, regime_market, volatile_config
from fleet.policies.base import JobSpec
from fleet.policies.spotfleet import SpotfleetParams, SpotfleetPolicy
from fleet.simulation.engine import simulate
from fleet.simulation.families import spread_starts

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


def pinned_market(regime: str):
    """The 8-day synthetic market (seed 2) the pins were recorded on."""
    cfg = {"volatile": volatile_config, "available": available_config}[regime](hours=24.0 * 8)
    return regime_market(cfg, 2)


def pinned_spec(notice: float) -> JobSpec:
    return JobSpec(8.0, 12.0, notice_seconds=notice, checkpoint_gb=10.0)


def assert_reproduces(pins: dict, regime: str, notice: float,
                      params: SpotfleetParams | None) -> None:
    """``SpotfleetPolicy(params)`` makes the pinned decisions and pays the pinned cost at
    every pinned start (``pins``: ``V5`` or ``V6``)."""
    m, spec = pinned_market(regime), pinned_spec(notice)
    starts = spread_starts(m, spec, 3, 24.0 * 3)
    assert [int(s) for s in starts] == [s for s, _, _ in pins[(regime, notice)]]
    for s, cost, digest in pins[(regime, notice)]:
        tl: list = []
        r = simulate(SpotfleetPolicy(params), m, spec, s, timeline=tl)
        norm = repr([(int(t), int(loc)) for t, loc in tl]).encode()
        assert hashlib.sha256(norm).hexdigest()[:16] == digest, (regime, notice, s, params)
        assert r.cost == pytest.approx(cost, rel=1e-12, abs=1e-9)

