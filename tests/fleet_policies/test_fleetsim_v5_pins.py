"""Every opt-in v6 candidate of ``SpotfleetParams``, at its default / off value, is v5 bit for bit.

The candidates (docs/fleet-policies.md, *Tuning discipline*) were all rejected; they stay
opt-in so that their figures can be reproduced, and must never move the default policy.
"""

from __future__ import annotations

import pytest
from v5_pins import V5, assert_reproduces_v5

from fleet.policies.spotfleet import SpotfleetParams

OFF_SETTINGS = {
    "default": None,
    "explicit default": SpotfleetParams(),
    "v5": SpotfleetParams(own_runs="off"),
    "recovery off (observed scope)": SpotfleetParams(recovery_window_hours=0.0,
                                                     recovery_scope="observed"),
    "hold ranking off": SpotfleetParams(hold_ranking="off"),
    "patience prior": SpotfleetParams(patience_wait="prior", stats_rule="prior",
                                      patience_pays=False),
    "v4/v5 on-demand exit, no move guard": SpotfleetParams(leave_od_rule="slack_run",
                                                           move_survives_preemption=False),
    "sixth round off": SpotfleetParams(patience_total="off", own_runs="off"),
    "seventh / eighth round off": SpotfleetParams(own_runs="off", shift_estimate="mle",
                                                  forced_risk=False),
}


@pytest.mark.parametrize("setting", sorted(OFF_SETTINGS))
@pytest.mark.parametrize("regime,notice", sorted(V5))
def test_off_values_reproduce_v5_bit_for_bit(regime, notice, setting):
    assert_reproduces_v5(regime, notice, OFF_SETTINGS[setting])
