"""spotfleet's default, ``own_runs="off"`` and ``zone_model="history"`` (the opt-in
candidates' off values) are v5 bit for bit.

The other rejected v6 candidates were removed from ``SpotfleetParams`` (their figures
reproduce at commit e1c45df, docs/fleet-policies-tuning-log.md); ``own_runs`` and
``zone_model`` stay opt-in and must never move the default policy.
"""

from __future__ import annotations

import pytest
from v5_pins import V5, assert_reproduces_v5

from fleet.policies.spotfleet import SpotfleetParams

OFF_SETTINGS = {
    "default": None,
    "explicit default": SpotfleetParams(),
    "v5": SpotfleetParams(own_runs="off"),
    "v5, zone model": SpotfleetParams(own_runs="off", zone_model="history"),
}


@pytest.mark.parametrize("setting", sorted(OFF_SETTINGS))
@pytest.mark.parametrize("regime,notice", sorted(V5))
def test_off_values_reproduce_v5_bit_for_bit(regime, notice, setting):
    assert_reproduces_v5(regime, notice, OFF_SETTINGS[setting])
