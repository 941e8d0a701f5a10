"""``SpotfleetParams.od_exit`` (session 16, twenty-fifth round): what keeps a job on on-demand.

v9 (``od_exit="reserve"``) stays on on-demand while the spare slack is below
``reserve_hours``, whatever the odds of being forced there later; ``"bridge"`` stays only while
``SpotfleetPolicy.bridge`` -- the rule that sends an idle job to on-demand -- would still send it
there. Found on the long job shape: after a 71 h drought v8/v9 stayed on on-demand 14-33 h after
spot had returned (docs/fleet-policies-held-out.md, *Job shapes nobody tuned on*)."""

from __future__ import annotations

from fleet.market.regimes import regime_market, volatile_config
from fleet.policies.base import ON_DEMAND, Action, JobState, Observation
from fleet.policies.safety import must_go_on_demand, safe_slack_hours, safety_threshold_hours
from fleet.policies.spotfleet import SpotfleetParams, SpotfleetPolicy
from fleet.simulation.engine import simulate
from fleet.simulation.families import FAMILIES

VOLATILE = FAMILIES["volatile"]


class Leaves(SpotfleetPolicy):
    """Records, at every decision that leaves on-demand for spot, whether v9's reserve and
    the bridge rule would have kept the job on on-demand."""

    def __init__(self, params: SpotfleetParams) -> None:
        super().__init__(params)
        self.exits: list[tuple[bool, bool]] = []  # (below the reserve, bridge says stay)

    def decide(self, state: JobState, obs: Observation) -> Action:
        g = obs.gap_hours
        on_od = state.location == ON_DEMAND and not must_go_on_demand(state, g)
        if on_od:
            spare = safe_slack_hours(state) - safety_threshold_hours(state, g)
            later = state.elapsed_hours + 2.0 * state.spec.restart_hours
            below = spare < self.reserve_hours(state, later)
            stay = self.bridge(state, spare, later)
        act = super().decide(state, obs)
        if on_od and act.target != ON_DEMAND:
            self.exits.append((below, stay))
        return act


def _runs(od_exit: str, starts: int = 12):
    m = regime_market(volatile_config(hours=24.0 * 12), 10)
    spec = VOLATILE.spec(2.0, 120.0)
    out = []
    for s in VOLATILE.starts(m, spec, starts):
        pol = Leaves(SpotfleetParams(od_exit=od_exit))
        out.append((pol, simulate(pol, m, spec, s)))
    return out


def test_v9_never_leaves_on_demand_below_its_reserve():
    exits = [e for pol, r in _runs("reserve") for e in pol.exits]
    assert exits and not any(below for below, _ in exits)


def test_bridge_exit_leaves_when_the_bridge_rule_would_not_send_the_job_there():
    runs = _runs("bridge")
    exits = [e for pol, _ in runs for e in pol.exits]
    assert all(r.deadline_met for _, r in runs)
    assert exits and not any(stay for _, stay in exits)  # never against the bridge rule
    assert any(below for below, _ in exits)  # and earlier than v9 would have
