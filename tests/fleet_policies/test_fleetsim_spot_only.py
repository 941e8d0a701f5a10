"""``JobSpec.on_demand_allowed=False`` (a pipeline's ``on_demand_fallback: false``): no
on-demand instance is ever launched, in the simulator or by the live driver.

Before session 14 the pipeline's flag only removed the stage's deadline (and the planner's
on-demand plan): the live policy then ran without a deadline, and spotfleet's no-deadline
rule went on-demand whenever waiting for spot did not pay -- on the volatile family 6.3 of
12 h per job (``bench_no_deadline.py``), on a pipeline that had ruled on-demand out."""

from __future__ import annotations

import dataclasses

from fleet.contract import RunPriors
from fleet.market.regimes import regime_market, volatile_config
from fleet.policies.base import ON_DEMAND, Action, JobSpec, JobState, Observation, Policy
from fleet.policies.spotfleet import SpotfleetPolicy
from fleet.providers.decisions import PolicyDriver, Progress
from fleet.simulation.engine import simulate
from fleet.simulation.families import FAMILIES
from fleet.simulation.no_deadline import no_deadline_spec, run_capped

VOLATILE = FAMILIES["volatile"]


class _AlwaysOnDemand(Policy):
    """Wants on-demand at every decision, with spot zone 0 as its only fallback."""

    name = "always_on_demand"

    def decide(self, state: JobState, obs: Observation) -> Action:
        return Action(ON_DEMAND, None, obs.tick + 1, fallbacks=(0,))


def test_the_simulator_never_launches_on_demand_when_it_is_ruled_out():
    m = regime_market(volatile_config(hours=24.0 * 12), 10)
    spec = VOLATILE.spec(3.0, 120.0)
    s = VOLATILE.starts(m, spec, 3)[1]
    allowed = simulate(_AlwaysOnDemand(), m, spec, s)
    assert allowed.on_demand_hours > 0 and allowed.spot_hours == 0  # it got what it asked for
    ruled_out = simulate(_AlwaysOnDemand(), m, dataclasses.replace(spec, on_demand_allowed=False), s)
    assert ruled_out.on_demand_hours == 0 and ruled_out.on_demand_cost == 0
    assert ruled_out.spot_hours > 0  # its spot fallback ran instead


def test_spotfleet_without_a_deadline_waits_for_spot_instead_of_on_demand():
    """Volatile seeds 10-12 (multi-day droughts of every zone): with on-demand ruled out the
    job waits them out on spot; it still finishes, and every hour it runs is spot."""
    spec = no_deadline_spec(VOLATILE.spec(3.0, 120.0))
    spot_only = dataclasses.replace(spec, on_demand_allowed=False)
    od_hours = 0.0
    for seed in (10, 11, 12):
        m = regime_market(volatile_config(hours=24.0 * 12), seed)
        for s in VOLATILE.starts(m, VOLATILE.spec(3.0, 0.0), 4):
            window = min((m.n_ticks - s - 1) * m.gap_hours, 100.0)
            free = run_capped(SpotfleetPolicy(), m, spec, s, window)
            only = run_capped(SpotfleetPolicy(), m, spot_only, s, window)
            od_hours += free.result.on_demand_hours
            assert only.result.on_demand_hours == 0.0 and only.result.on_demand_cost == 0.0
            if only.finished:
                assert only.result.spot_hours >= spec.work_hours
    assert od_hours > 0.0  # the same jobs allowed on-demand do use it (the rule is not vacuous)


def test_the_live_driver_makes_no_on_demand_launch_when_it_is_ruled_out():
    zones = ["us-east-1a", "us-east-1b"]
    priors = RunPriors(work_seconds=3600.0)
    for allowed in (True, False):
        d = PolicyDriver(_AlwaysOnDemand(), zones, priors=priors, on_demand_allowed=allowed)
        assert d.job_spec(Progress()).on_demand_allowed is allowed
        decision = d.decide(0.0, Progress())
        spots = [t.spot for t in decision.tries if t is not None]
        assert spots == ([False, True] if allowed else [True]), decision.tries


def test_the_stage_spec_carries_the_rule_to_the_node_runner():
    """``StageSpec.on_demand_allowed`` (set from the pipeline's ``on_demand_fallback``)
    survives the wire format the orchestrator hands the node runner."""
    from fleet.providers.base import StageSpec
    from fleet.providers.wire import spec_from_dict, spec_to_dict

    spec = StageSpec(name="s", command=["true"], checkpoint_uri="/tmp/x", on_demand_allowed=False)
    assert spec_from_dict(spec_to_dict(spec)).on_demand_allowed is False
    assert StageSpec(name="s", command=["true"], checkpoint_uri="/tmp/x").on_demand_allowed is True
    assert JobSpec(work_hours=1.0, deadline_hours=2.0).on_demand_allowed is True
