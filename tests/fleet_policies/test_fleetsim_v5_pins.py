"""v5 (``zone_model="history"``, ``own_runs="off"``) and v6 (``zone_model="changepoint_updown"``,
``model_check="off"``, session 9) and v7 (``model_check="holds_law"``, session 12), each with
``launch_guard="off"``, are
reproducible bit for bit, as is v8 (``model_check="holds_residual"``, session 13,
``launch_guard="off"``), and v9 (``launch_guard="restart"``, session 15; v8's decisions on these
markets: its guard binds only where the spare slack is below a restart,
``test_fleetsim_launch_guard.py``), each with ``od_exit="reserve"``; v10
(``od_exit="bridge"``, session 16) is as pinned at its adoption (v9 but for one start, where it
leaves on-demand sooner: ``test_fleetsim_od_exit.py``); the default is v11
(``launch_guard="restart_cost"``, session 20) as pinned at its adoption (v10 at every pinned
start: it binds only on a job's last spot run, ``test_fleetsim_launch_guards_s19.py``).

The other rejected v6 candidates were removed from ``SpotfleetParams`` (their figures
reproduce at commit e1c45df, docs/fleet-policies-tuning-log.md); ``own_runs`` and the
other zone models stay opt-in and must never move the default policy.
"""

from __future__ import annotations

import pytest
from v5_pins import V5, V6, V7, V8, V9, V10, V11, assert_reproduces

from fleet.policies.spotfleet import SpotfleetParams

V5_SETTINGS = {
    "zone model history": SpotfleetParams(zone_model="history", launch_guard="off", od_exit="reserve"),
    "v5, own runs off": SpotfleetParams(own_runs="off", zone_model="history", launch_guard="off", od_exit="reserve"),
}
V6_SETTINGS = {
    "v6": SpotfleetParams(own_runs="off", zone_model="changepoint_updown", model_check="off",
                          launch_guard="off", od_exit="reserve"),
}
V7_SETTINGS = {
    "v7": SpotfleetParams(zone_model="changepoint_updown", model_check="holds_law", launch_guard="off", od_exit="reserve"),
}
V8_SETTINGS = {
    "v8": SpotfleetParams(zone_model="changepoint_updown", model_check="holds_residual", launch_guard="off", od_exit="reserve"),
}
V9_SETTINGS = {
    "v9": SpotfleetParams(zone_model="changepoint_updown", model_check="holds_residual", launch_guard="restart",
                          od_exit="reserve"),
}
V10_SETTINGS = {
    "v10": SpotfleetParams(zone_model="changepoint_updown", model_check="holds_residual", launch_guard="restart",
                           od_exit="bridge"),
}
V11_SETTINGS = {
    "default": None,
    "explicit default": SpotfleetParams(),
    "v11": SpotfleetParams(zone_model="changepoint_updown", model_check="holds_residual",
                           launch_guard="restart_cost", od_exit="bridge"),
}


PINNED = {"v5": (V5, V5_SETTINGS), "v6": (V6, V6_SETTINGS), "v7": (V7, V7_SETTINGS),
          "v8": (V8, V8_SETTINGS), "v9": (V9, V9_SETTINGS), "v10": (V10, V10_SETTINGS),
          "v11, the default": (V11, V11_SETTINGS)}
"""Each version's pins and the settings that must reproduce them."""

CASES = [(version, setting, regime, notice)
         for version, (pins, settings) in PINNED.items()
         for setting in sorted(settings) for regime, notice in sorted(pins)]


@pytest.mark.parametrize("version,setting,regime,notice", CASES)
def test_each_version_reproduces_as_pinned(version, setting, regime, notice):
    pins, settings = PINNED[version]
    assert_reproduces(pins, regime, notice, settings[setting])


def test_the_tuning_sets_named_versions_are_the_pinned_ones():
    """``fleet_tuning_set.py --diagnose family:ratio:notice:vN`` compares against the vN pinned
    here (after v11's adoption its v9 had silently become v9 with v11's launch guard)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import fleet_tuning_set as ts

    for version, (_, settings) in PINNED.items():
        name = version.split(",")[0]
        if name in ts.VERSION_PARAMS:
            assert ts.VERSION_PARAMS[name] == settings[name if name in settings else sorted(settings)[0]], name
    assert set(ts.VERSION_PARAMS) == {"v5", "v6", "v7", "v8", "v9", "v10"}


def test_every_pinned_version_is_named_by_its_settings():
    """``SpotfleetPolicy.describe()`` (the run metadata's ``fleet_policy``) names the version
    whose pinned settings a policy runs, and the default is the last one."""
    from fleet.policies.spotfleet import DEFAULT_VERSION, VERSIONS, SpotfleetPolicy, version_of

    for version, (_, settings) in PINNED.items():
        name = version.split(",")[0]
        for setting in settings.values():
            assert version_of(setting or SpotfleetParams()) == name
    assert list(VERSIONS)[-1] == DEFAULT_VERSION and SpotfleetPolicy().describe() == "spotfleet v11"
    assert version_of(SpotfleetParams(launch_guard="restart_progress")) == "v11 with launch_guard=restart_progress"
