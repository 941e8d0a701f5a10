"""On-demand's region: the checkpoint's once work is saved, else the cheapest on-demand
region. A launch that saved nothing (reclaimed during its restart, before a checkpoint, or
with a notice too short to save more than the save) leaves nothing to move, so it does not
fix the region of a later on-demand fallback. The engine's billing, the policy's
``Observation`` and the omniscient DP say the same (docs/fleet-policies.md)."""

from __future__ import annotations

import numpy as np
import pytest
from brute_force import cheapest_scripted_cost as _brute_force

from fleet.policies.base import ON_DEMAND, Action, JobSpec, JobState, Observation, Policy
from fleet.policies.scripted import ScriptedPolicy
from fleet.simulation.engine import simulate
from fleet.simulation.market import Market
from fleet.simulation.omniscient import omniscient_bound

# us-east-1 is the dear on-demand region, us-west-2 the cheap one
OD_EAST, OD_WEST, SPOT = 4.0, 3.0, 0.9


class _Recorder(Policy):
    """Plays ``inner``; records (tick, checkpoint region, on-demand region) per decision."""

    name = "recorder"

    def __init__(self, inner: Policy) -> None:
        self.inner = inner
        self.seen: dict[int, tuple[str | None, str | None]] = {}

    def reset(self, spec: JobSpec, obs: Observation) -> None:
        self.inner.reset(spec, obs)

    def decide(self, state: JobState, obs: Observation) -> Action:
        self.seen[obs.tick] = (obs.checkpoint_region, obs.on_demand_region)
        return self.inner.decide(state, obs)


def _run(east_ticks: int, east_up_ticks: int, notice_seconds: float):
    """Spot in us-east-1a for ``east_ticks`` 0.1 h ticks (reclaimed from tick
    ``east_up_ticks``), then on-demand to the end. Restart 0.15 h, checkpoint 0.06 h, no
    periodic checkpoints, W = 1 h; a move costs 2 $ egress and 0.1 h transfer."""
    spec = JobSpec(work_hours=1.0, deadline_hours=5.0, restart_hours=0.15, checkpoint_hours=0.06,
                   checkpoint_gb=100.0, egress_usd_per_gb=0.02, transfer_seconds=360.0,
                   notice_seconds=notice_seconds)
    a = np.ones((2, 100), dtype=bool)
    a[0, east_up_ticks:] = False
    m = Market(zones=("us-east-1a", "us-west-2a"), gap_seconds=360.0, available=a,
               spot_price=np.full((2, 100), SPOT), on_demand_price=np.array([OD_EAST, OD_WEST]))
    rec = _Recorder(ScriptedPolicy([0] * east_ticks + [ON_DEMAND] * 40, 0))
    return rec, simulate(rec, m, spec, 0)


@pytest.mark.parametrize(("east_up_ticks", "notice_seconds", "lost"), [
    (3, 0.0, 0.15),  # 0.15 h of work, no notice: all lost
    (1, 300.0, 0.0),  # reclaimed during the restart: nothing to save
    (2, 300.0, 0.05),  # 0.05 h of work: the notice save (0.06 h) commits nothing
])
def test_on_demand_after_a_launch_that_saved_nothing_runs_in_the_cheapest_region(
        east_up_ticks, notice_seconds, lost):
    """Spot in the dear on-demand region, reclaimed before anything was saved, then
    on-demand: it runs (and is billed) in us-west-2, with nothing to move (no egress, no
    transfer time). Before the fix: 4.0 $/h in us-east-1, the region of the aborted launch."""
    rec, r = _run(east_up_ticks, east_up_ticks, notice_seconds)
    assert r.preemptions == 1 and r.lost_work_hours == pytest.approx(lost)
    assert rec.seen[0] == (None, "us-west-2")  # before the first launch: the cheapest
    assert rec.seen[east_up_ticks] == (None, "us-west-2")  # nothing saved: still the cheapest
    assert r.migrations == 0 and r.migration_cost == 0.0
    assert r.on_demand_hours == pytest.approx(1.15)  # restart + all the work, no transfer
    assert r.on_demand_cost == pytest.approx(1.15 * OD_WEST)
    assert r.spot_hours == pytest.approx(0.1 * east_up_ticks)
    assert r.completion_hours == pytest.approx(0.1 * east_up_ticks + 1.15)
    assert r.cost == pytest.approx(0.1 * east_up_ticks * SPOT + 1.15 * OD_WEST)


@pytest.mark.parametrize(("east_up_ticks", "notice_seconds", "committed", "save_billed"), [
    (3, 300.0, 0.09, 0.0),  # reclaimed after 0.15 h of work: the notice saves 0.09 h
    (100, 0.0, 0.15, 0.06),  # left voluntarily: the 0.15 h are saved on the way out
])
def test_on_demand_after_a_save_stays_in_the_checkpoint_region(
        east_up_ticks, notice_seconds, committed, save_billed):
    """Once work is saved in us-east-1, on-demand runs there (where the checkpoint is, no
    move), even though us-west-2 is cheaper: going there would cost egress and transfer."""
    rec, r = _run(3, east_up_ticks, notice_seconds)
    assert rec.seen[3] == ("us-east-1", "us-east-1")
    assert r.migrations == 0 and r.migration_cost == 0.0
    od_h = 0.15 + (1.0 - committed)
    assert r.on_demand_hours == pytest.approx(od_h)
    assert r.on_demand_cost == pytest.approx(od_h * OD_EAST)
    assert r.cost == pytest.approx((0.3 + save_billed) * SPOT + od_h * OD_EAST)


def test_with_nothing_saved_on_demand_stays_in_a_region_tied_for_the_cheapest():
    """Both regions at 3.0 $/h: us-east-1 is the first cheapest, but after a launch in
    us-west-2a that saved nothing on-demand runs in us-west-2 (as cheap, and the return to
    us-west-2a is then no move); the first cheapest would have cost a move back."""
    spec = JobSpec(work_hours=1.0, deadline_hours=5.0, restart_hours=0.15, checkpoint_hours=0.06,
                   checkpoint_gb=100.0, egress_usd_per_gb=0.02, transfer_seconds=360.0)
    a = np.ones((2, 100), dtype=bool)
    a[1, 1:3] = False
    m = Market(zones=("us-east-1a", "us-west-2a"), gap_seconds=360.0, available=a,
               spot_price=np.full((2, 100), SPOT), on_demand_price=np.array([3.0, 3.0]))
    rec = _Recorder(ScriptedPolicy([1, ON_DEMAND, ON_DEMAND] + [1] * 40, 0))
    r = simulate(rec, m, spec, 0)
    assert rec.seen[0] == (None, "us-east-1") and rec.seen[1] == (None, "us-west-2")
    assert rec.seen[3] == ("us-west-2", "us-west-2")
    assert r.preemptions == 1 and r.launches == 3 and r.migrations == 0




@pytest.mark.parametrize("od_prices", [(OD_EAST, OD_WEST), (OD_WEST, OD_EAST), (3.0, 3.0)])
@pytest.mark.parametrize("seed", range(6))
def test_dp_equals_the_cheapest_simulated_plan(seed, od_prices):
    """Two zones in two regions, often reclaimed, a dear move (10 $): the cheapest
    simulated plan may try a zone and fall back to on-demand after a launch that saved
    nothing. The DP allows exactly what the engine allows (no less, no more), with either
    region the dear one or both as cheap."""
    rng = np.random.default_rng(300 + seed)
    spec = JobSpec(work_hours=8 / 60, deadline_hours=12 / 60, restart_hours=(1 + seed % 2) / 60,
                   checkpoint_hours=1 / 60, notice_seconds=60.0 * (seed // 2 % 2),
                   checkpoint_gb=100.0, egress_usd_per_gb=0.1, transfer_seconds=60.0)
    n = 6
    avail = rng.random((2, n)) < 0.5
    full = np.concatenate([avail, np.ones((2, 60), bool)], axis=1)
    m = Market(zones=("us-east-1a", "us-west-2a"), gap_seconds=120.0, available=full,
               spot_price=np.full((2, n + 60), 0.5), on_demand_price=np.array(od_prices))
    bf = _brute_force(m, spec, n)
    assert omniscient_bound(m, spec, 0).cost == pytest.approx(bf, rel=1e-9)
    assert omniscient_bound(m, spec, 0, first_on_demand_region=-1).cost <= bf + 1e-9


@pytest.mark.parametrize(("restart_min", "notice_seconds", "deadline_min", "old", "new"), [
    (2, 0.0, 14, 0.416667, 0.50),  # reclaimed at the end of the restart
    (1, 60.0, 12, 0.283333, 0.45),  # 1 min of work, the notice save (1 min) commits nothing
])
def test_an_aborted_launch_no_longer_picks_the_on_demand_region(
        restart_min, notice_seconds, deadline_min, old, new):
    """Before the fix a launch that saved nothing fixed on-demand's region: spot in
    us-east-1a for one tick, reclaimed, then on-demand in us-east-1 and back to spot there
    with no move (``old`` $; in the first case below the DP's bound, 0.50 $, so the old
    bound was no bound for that plan). Now that on-demand runs in us-west-2 and the return
    to us-east-1a is a billed move (10 $); the cheapest simulated plan and the DP agree at
    ``new`` $ (on-demand in us-west-2 only). W = 8 min, 2 min ticks, spot in us-east-1a at
    tick 0 and from tick 2 (or 3) on, never in us-west-2a."""
    spec = JobSpec(work_hours=8 / 60, deadline_hours=deadline_min / 60,
                   restart_hours=restart_min / 60, checkpoint_hours=1 / 60,
                   notice_seconds=notice_seconds, checkpoint_gb=100.0, egress_usd_per_gb=0.1,
                   transfer_seconds=60.0)
    n = deadline_min // 2
    back = restart_min + 1  # tick from which us-east-1a is up again
    avail = np.zeros((2, n), dtype=bool)
    avail[0, 0] = True
    avail[0, back:] = True
    full = np.concatenate([avail, np.ones((2, 60), bool)], axis=1)
    m = Market(zones=("us-east-1a", "us-west-2a"), gap_seconds=120.0, available=full,
               spot_price=np.full((2, n + 60), 0.5), on_demand_price=np.array([OD_EAST, OD_WEST]))
    plan = [0] + [ON_DEMAND] * (back - 1) + [0] * 12
    r = simulate(ScriptedPolicy(plan, 0), m, spec, 0, observe="oracle")
    assert r.migrations == 1 and r.migration_cost == pytest.approx(10.0)
    assert r.on_demand_cost == pytest.approx(OD_WEST * r.on_demand_hours)
    assert r.cost > 10.0 > old
    bf = _brute_force(m, spec, n)
    assert bf == pytest.approx(new, abs=1e-6)
    assert omniscient_bound(m, spec, 0).cost == pytest.approx(bf, rel=1e-9)


def test_dp_keeps_the_progress_of_a_move_reclaimed_during_its_restart():
    """5 min committed in us-east-1a (its last tick saved in the notice window), then a spot
    launch in us-west-2a reclaimed during its restart + transfer: the engine keeps the 5 min
    and the checkpoint is now in us-west-2, so on-demand runs there at 3 $/h instead of 6.
    The DP charged that launch its overhead and a save and lost 3 min of progress: 0.525 $
    against the engine's 0.375 $ for this plan (no bound)."""
    spec = JobSpec(work_hours=10 / 60, deadline_hours=40 / 60, restart_hours=2 / 60,
                   checkpoint_hours=1 / 60, notice_seconds=60.0, checkpoint_gb=1.0,
                   egress_usd_per_gb=0.01, transfer_seconds=60.0)
    n = 200
    a = np.zeros((2, n), dtype=bool)
    a[0, :8] = True
    a[1, 8] = True
    a[1, 10::2] = True  # never 4 ticks in a row: no move that survives its restart
    m = Market(zones=("us-east-1a", "us-west-2a"), gap_seconds=60.0, available=a,
               spot_price=np.full((2, n), 0.1), on_demand_price=np.array([6.0, 3.0]))
    r = simulate(ScriptedPolicy([0] * 8 + [1] + [ON_DEMAND] * 30, 0), m, spec, 0,
                 observe="oracle")
    assert r.deadline_met and r.migrations == 1
    assert r.on_demand_hours == pytest.approx(7 / 60)  # restart + the 5 min left, in us-west-2
    assert r.cost == pytest.approx(0.375)
    assert omniscient_bound(m, spec, 0).cost == pytest.approx(0.375)


def test_dp_bills_no_save_when_leaving_with_no_progress():
    """Spot in us-west-2a for its restart only, then on-demand (both regions at 3 $/h: it
    stays in us-west-2) and spot there again with no move. Leaving at the end of the restart
    saves nothing in the engine; the DP billed a 1 min save (0.325 $ against 0.3167 $)."""
    n = 6
    spec = JobSpec(work_hours=6 / 60, deadline_hours=12 / 60, restart_hours=2 / 60,
                   checkpoint_hours=1 / 60, checkpoint_gb=1.0, egress_usd_per_gb=0.1,
                   transfer_seconds=120.0)
    avail = np.array([[1, 0, 1, 1, 0, 1], [1, 1, 0, 1, 1, 1]], dtype=bool)
    full = np.concatenate([avail, np.ones((2, 60), bool)], axis=1)
    m = Market(zones=("us-east-1a", "us-west-2a"), gap_seconds=120.0, available=full,
               spot_price=np.full((2, n + 60), 0.5), on_demand_price=np.array([3.0, 3.0]))
    r = simulate(ScriptedPolicy([1, ON_DEMAND, ON_DEMAND, 1, 1, 1], 0), m, spec, 0,
                 observe="oracle")
    assert r.deadline_met and r.migrations == 0 and r.checkpoint_hours == pytest.approx(1 / 60)
    assert r.cost == pytest.approx(8 / 60 * 0.5 + 5 / 60 * 3.0)
    assert omniscient_bound(m, spec, 0).cost == pytest.approx(r.cost)


def test_a_notice_save_that_keeps_only_rounding_dust_saves_nothing():
    """0.2 h on 0.1 h ticks less a 0.15 h restart leaves u = 0.05000000000000001 h, and a
    0.05 h notice save then 'commits' about 1e-17 h: that is nothing saved, so on-demand
    still runs in the cheapest region and no move is billed (engine.SAVE_EPS_HOURS)."""
    spec = JobSpec(work_hours=1.0, deadline_hours=5.0, restart_hours=0.15, checkpoint_hours=0.05,
                   checkpoint_gb=100.0, egress_usd_per_gb=0.02, transfer_seconds=360.0,
                   notice_seconds=300.0)
    a = np.ones((2, 100), dtype=bool)
    a[0, 2:] = False
    m = Market(zones=("us-east-1a", "us-west-2a"), gap_seconds=360.0, available=a,
               spot_price=np.full((2, 100), SPOT), on_demand_price=np.array([OD_EAST, OD_WEST]))
    assert 0.1 + 0.1 - 0.15 - 0.05 > 0.0  # the dust this test is about
    rec = _Recorder(ScriptedPolicy([0, 0] + [ON_DEMAND] * 40, 0))
    r = simulate(rec, m, spec, 0)
    assert rec.seen[2] == (None, "us-west-2")
    assert r.migrations == 0 and r.migration_cost == 0.0
    assert r.on_demand_cost == pytest.approx(1.15 * OD_WEST)
