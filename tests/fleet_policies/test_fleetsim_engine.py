"""The simulator's cost and progress arithmetic on hand-made markets."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fleet.policies.base import IDLE, ON_DEMAND, JobSpec
from fleet.policies.baselines import OnDemandOnly, SingleZoneGreedy
from fleet.policies.scripted import ScriptedPolicy
from fleet.simulation.engine import PolicyError, simulate
from fleet.simulation.market import Market

GAP = 360.0  # s: 0.1 h ticks keep the arithmetic readable


def market(rows: list[list[int]], pad: int = 400) -> Market:
    a = np.array(rows, dtype=bool)
    a = np.concatenate([a, np.repeat(a[:, -1:], pad, axis=1)], axis=1)
    return Market(zones=tuple(f"z{i}" for i in range(a.shape[0])), gap_seconds=GAP, available=a)


def test_on_demand_only_costs_work_plus_one_restart():
    spec = JobSpec(work_hours=2.0, deadline_hours=3.0, restart_hours=0.1,
                   checkpoint_hours=0.05)
    r = simulate(OnDemandOnly(), market([[0] * 10]), spec, 0)
    assert r.deadline_met and r.preemptions == 0
    assert r.completion_hours == pytest.approx(2.1)
    assert r.cost == pytest.approx(3.06 * 2.1)
    assert r.cost == pytest.approx(spec.on_demand_cost)


def test_spot_with_periodic_checkpoints_bills_every_held_second():
    spec = JobSpec(work_hours=1.0, deadline_hours=3.0, restart_hours=0.1, checkpoint_hours=0.05)
    pol = SingleZoneGreedy(zone=0)
    r = simulate(pol, market([[1] * 10]), spec, 0)
    # interval = Young sqrt(2 C M) with the 4 h prior: checkpoints at every T of compute
    t = math.sqrt(2 * 0.05 * 4.0)
    n_ckpt = math.floor(1.0 / t - 1e-9)
    assert r.checkpoint_hours == pytest.approx(n_ckpt * 0.05)
    assert r.completion_hours == pytest.approx(0.1 + 1.0 + n_ckpt * 0.05)
    assert r.cost == pytest.approx(0.918 * r.completion_hours)
    assert r.on_demand_hours == 0.0


@pytest.mark.parametrize("notice,lost", [(0.0, 0.5), (180.0, 0.05)])
def test_preemption_loses_uncommitted_work_or_only_the_save(notice, lost):
    # spot for 6 ticks (0.6 h), then gone; then on-demand to finish
    spec = JobSpec(work_hours=1.0, deadline_hours=5.0, restart_hours=0.1, checkpoint_hours=0.05,
                   notice_seconds=notice)
    m = market([[1] * 6 + [0] * 4])
    plan = [0] * 6 + [ON_DEMAND] * 30
    r = simulate(ScriptedPolicy(plan, 0), m, spec, 0)
    assert r.preemptions == 1
    assert r.lost_work_hours == pytest.approx(lost)
    done_on_spot = 0.5 - lost
    assert r.on_demand_hours == pytest.approx(0.1 + 1.0 - done_on_spot)
    assert r.spot_hours == pytest.approx(0.6)
    assert r.cost == pytest.approx(0.918 * 0.6 + 3.06 * r.on_demand_hours)


def test_voluntary_move_saves_on_the_old_instance():
    spec = JobSpec(work_hours=1.0, deadline_hours=5.0, restart_hours=0.1, checkpoint_hours=0.05)
    m = market([[1] * 10, [1] * 10])
    r = simulate(ScriptedPolicy([0] * 4 + [1] * 30, 0), m, spec, 0)
    assert r.lost_work_hours == 0.0 and r.preemptions == 0 and r.launches == 2
    # 0.4 h held in z0 (+0.05 h save billed there), then 0.1 restart + 0.7 h in z1
    assert r.spot_hours == pytest.approx(0.4 + 0.05 + 0.1 + 0.7)
    assert r.completion_hours == pytest.approx(0.4 + 0.1 + 0.7)


def test_idle_costs_nothing_and_missed_deadline_is_reported():
    spec = JobSpec(work_hours=1.0, deadline_hours=1.5, restart_hours=0.1, checkpoint_hours=0.05)
    r = simulate(ScriptedPolicy([IDLE] * 8 + [ON_DEMAND] * 30, 0), market([[0] * 10]), spec, 0)
    assert not r.deadline_met
    assert r.completion_hours == pytest.approx(0.8 + 1.1)
    assert r.cost == pytest.approx(3.06 * 1.1)


def test_policy_choosing_a_zone_without_capacity_is_an_error_with_an_oracle():
    spec = JobSpec(work_hours=1.0, deadline_hours=2.0)
    with pytest.raises(PolicyError, match="z0.*no capacity"):
        simulate(ScriptedPolicy([0], 0), market([[0] * 10]), spec, 0, observe="oracle")


def test_launch_without_capacity_is_a_failed_probe_when_observing_by_probes():
    spec = JobSpec(work_hours=1.0, deadline_hours=2.0)
    r = simulate(ScriptedPolicy([0] * 3, 0), market([[0] * 20]), spec, 0)
    assert r.failed_probes == 3 and r.launches == 1  # three failed tries, then on-demand
    assert r.spot_hours == 0.0


@pytest.mark.parametrize("field,kwargs", [
    ("deadline_hours", {"work_hours": 5.0, "deadline_hours": 4.0}),
    ("work_hours", {"work_hours": -1.0, "deadline_hours": 4.0}),
    ("restart_hours", {"work_hours": 1.0, "deadline_hours": 4.0, "restart_hours": -0.1}),
])
def test_bad_job_spec_names_the_field(field, kwargs):
    with pytest.raises(ValueError, match=f"JobSpec.{field}"):
        JobSpec(**kwargs)


def test_start_too_late_for_the_trace_is_a_clear_error():
    spec = JobSpec(work_hours=10.0, deadline_hours=20.0)
    with pytest.raises(ValueError, match="pick an earlier start"):
        simulate(OnDemandOnly(), market([[1] * 10], pad=10), spec, 0)


def test_start_inside_a_tick_keeps_the_market_and_counts_from_the_job_start():
    # z0 is up for 0.6 h (6 ticks), then gone. A job needing 0.1 h restart + 0.45 h work
    # started on the tick boundary finishes at 0.55 h; started 0.09 h into the same tick
    # (a live attempt's start between boundaries) the same outage at market hour 0.6
    # catches it 0.51 h in, 0.04 h before the end: the world did not move, the job did.
    spec = JobSpec(work_hours=0.45, deadline_hours=5.0, restart_hours=0.1, checkpoint_hours=0.05)
    m = market([[1] * 6 + [0] * 4])
    plan = [0] * 6 + [ON_DEMAND] * 30
    on_tick = simulate(ScriptedPolicy(plan, 0), m, spec, 0)
    assert on_tick.preemptions == 0 and on_tick.completion_hours == pytest.approx(0.55)
    late = simulate(ScriptedPolicy(plan, 0), m, spec, 0, start_offset_hours=0.09)
    assert late.start_offset_hours == pytest.approx(0.09)
    assert late.preemptions == 1 and late.lost_work_hours == pytest.approx(0.41)
    assert late.spot_hours == pytest.approx(0.51)  # only the shortened first tick is billed
    assert late.on_demand_hours == pytest.approx(0.1 + 0.45)
    assert late.completion_hours == pytest.approx(0.51 + 0.55)
    assert late.cost == pytest.approx(0.918 * 0.51 + 3.06 * 0.55)


def test_start_offset_without_events_changes_nothing_but_the_start():
    spec = JobSpec(work_hours=2.0, deadline_hours=3.0, restart_hours=0.1, checkpoint_hours=0.05)
    r = simulate(OnDemandOnly(), market([[0] * 10]), spec, 0, start_offset_hours=0.07)
    assert r.completion_hours == pytest.approx(2.1)
    assert r.cost == pytest.approx(3.06 * 2.1)


@pytest.mark.parametrize("offset", [-0.01, 0.1, 0.2])
def test_start_offset_outside_one_tick_is_a_clear_error(offset):
    spec = JobSpec(work_hours=1.0, deadline_hours=2.0)
    with pytest.raises(ValueError, match="start_offset_hours.*put whole ticks into start_tick"):
        simulate(OnDemandOnly(), market([[0] * 10]), spec, 0, start_offset_hours=offset)


@pytest.mark.parametrize(("od_prices", "spot_zone", "moves", "od_price"), [
    ((3.06, 3.06), 1, 1, 3.06),  # on-demand ran in us-east-1 (first of the equally cheap)
    ((3.06, 3.06), 0, 0, 3.06),
    ((3.06, 2.50), 1, 0, 2.50),  # on-demand ran in us-west-2, the cheaper region
    ((3.06, 2.50), 0, 1, 2.50),
])
def test_leaving_on_demand_for_spot_in_another_region_is_a_billed_migration(od_prices, spot_zone, moves,
                                                                            od_price):
    """On-demand has a region (the checkpoint's; before the first launch the cheapest
    on-demand region): a later spot launch in another region moves the checkpoint, and
    ``migrations`` counts exactly the moves ``migration_cost`` bills (docs/fleet-policies.md)."""
    a = np.ones((2, 100), dtype=bool)
    m = Market(zones=("us-east-1a", "us-west-2a"), gap_seconds=GAP, available=a,
               on_demand_price=np.array(od_prices))
    spec = JobSpec(work_hours=1.0, deadline_hours=5.0, restart_hours=0.1, checkpoint_hours=0.05,
                   checkpoint_gb=100.0, egress_usd_per_gb=0.02, transfer_seconds=360.0)
    r = simulate(ScriptedPolicy([ON_DEMAND] * 4 + [spot_zone] * 40, 0), m, spec, 0)
    assert r.launches == 2 and r.migrations == moves
    assert r.migration_cost == pytest.approx(2.0 * moves)  # 100 GB x 0.02 $/GB per move
    # 0.4 h on-demand (0.1 restart + 0.3 work) + the 0.05 h save before leaving, then the
    # spot launch: 0.1 restart (+ 0.1 transfer when it moves) + 0.7 work
    assert r.on_demand_hours == pytest.approx(0.45)
    assert r.spot_hours == pytest.approx(0.1 * (1 + moves) + 0.7)
    assert r.completion_hours == pytest.approx(0.4 + 0.1 * (1 + moves) + 0.7)
    assert r.cost == pytest.approx(od_price * 0.45 + 0.918 * r.spot_hours + r.migration_cost)
