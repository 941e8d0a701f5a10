"""``SpotfleetParams.launch_guard="restart"`` (session 15, twenty-fourth round): no spot launch
whose restart the spare slack above the safety net cannot pay.

Found on the heavy job shape (a 20-minute restart): at D/W 1.05 the spare slack above the
net is 0.18 h, a spot launch's restart runs it out, and the net sends the job to on-demand
before it has done any work there, so every spot policy paid more than on-demand alone
(docs/fleet-policies-held-out.md, *Job shapes nobody tuned on*)."""

from __future__ import annotations

from fleet.market.regimes import regime_market, volatile_config
from fleet.policies.spotfleet import SpotfleetParams, SpotfleetPolicy
from fleet.simulation.engine import simulate
from fleet.simulation.families import FAMILIES

HEAVY = FAMILIES["volatile_heavy220"]


def test_no_spot_launch_the_slack_cannot_pay_for():
    m = regime_market(volatile_config(hours=24.0 * 12), 10)
    spec = HEAVY.spec(1.05, 0.0)  # 0.6 h of slack, 20-minute restart, 300 s ticks
    wasted = 0
    for s in HEAVY.starts(m, spec, 10):
        old = simulate(SpotfleetPolicy(SpotfleetParams(launch_guard="off")), m, spec, s)
        new = simulate(SpotfleetPolicy(SpotfleetParams(launch_guard="restart")), m, spec, s)
        assert new.deadline_met and old.deadline_met
        assert new.spot_hours == 0.0  # the slack never pays a spot restart: on-demand only
        assert new.cost <= old.cost + 1e-9
        wasted += old.spot_hours > 0
    assert wasted  # v8 launched spot for nothing in some of these starts


def test_the_guard_leaves_a_job_with_slack_alone():
    m = regime_market(volatile_config(hours=24.0 * 12), 10)
    spec = HEAVY.spec(2.0, 0.0)  # 12 h of slack: every launch affordable, the same decisions
    spot = 0.0
    for s in HEAVY.starts(m, spec, 4):
        old = simulate(SpotfleetPolicy(SpotfleetParams(launch_guard="off")), m, spec, s)
        new = simulate(SpotfleetPolicy(SpotfleetParams(launch_guard="restart")), m, spec, s)
        assert new.cost == old.cost and new.spot_hours == old.spot_hours
        spot += new.spot_hours
    assert spot > 0
