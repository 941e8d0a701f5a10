"""The checkpoint region a policy sees is what the engine bills: ``None`` while a move
would copy nothing (never launched, or nothing saved), the last launch's region once work
is saved (or a move would first save the held instance's work); on-demand's region is
reported separately. Simulator (engine) and live driver (fleet/providers/decisions.py)."""

from __future__ import annotations

import numpy as np
import pytest

from fleet.policies.base import IDLE, Action, JobSpec, JobState, Observation, Policy
from fleet.policies.scripted import ScriptedPolicy
from fleet.policies.spotfleet import SpotfleetPolicy
from fleet.providers.decisions import PolicyDriver, Progress
from fleet.simulation.engine import simulate
from fleet.simulation.market import Market


class _Recorder(Policy):
    """Plays ``inner`` and records (tick, committed h, uncommitted h, checkpoint region,
    on-demand region) at every decision."""

    name = "recorder"

    def __init__(self, inner: Policy) -> None:
        self.inner = inner
        self.seen: list[tuple[int, float, float, str | None, str | None]] = []

    def reset(self, spec: JobSpec, obs: Observation) -> None:
        self.inner.reset(spec, obs)

    def decide(self, state: JobState, obs: Observation) -> Action:
        self.seen.append((obs.tick, state.committed_hours, state.uncommitted_hours,
                          obs.checkpoint_region, obs.on_demand_region))
        return self.inner.decide(state, obs)


def _two_region_run(plan: list[int], east_up_ticks: int) -> tuple[_Recorder, object]:
    """6-minute ticks; restart 0.1 h, checkpoint 0.05 h, notice 300 s (saves), egress 2 $."""
    spec = JobSpec(work_hours=1.0, deadline_hours=5.0, restart_hours=0.1, checkpoint_hours=0.05,
                   checkpoint_gb=100.0, egress_usd_per_gb=0.02, transfer_seconds=360.0,
                   notice_seconds=300.0)
    a = np.ones((2, 100), dtype=bool)
    a[0, east_up_ticks:] = False
    m = Market(zones=("us-east-1a", "us-west-2a"), gap_seconds=360.0, available=a,
               spot_price=np.full((2, 100), 0.9))
    rec = _Recorder(ScriptedPolicy(plan, 0))
    return rec, simulate(rec, m, spec, 0)


def test_engine_observation_has_no_checkpoint_region_before_the_first_save():
    """East reclaimed during its restart: nothing saved, so the policy sees no checkpoint
    region (the move west is free, as billed), but on-demand would still run in east."""
    rec, r = _two_region_run([0] + [1] * 40, 1)
    assert rec.seen[0][3:] == (None, "us-east-1")  # never launched: cheapest od region (tie)
    t1 = rec.seen[1]
    assert t1[1] == 0.0 and t1[3] is None and t1[4] == "us-east-1"
    assert r.migrations == 0 and r.migration_cost == 0.0
    # west runs to the end without a save: still nothing that a move would copy ...
    # ... except the held instance's uncommitted work, which a move saves first
    later = [s for s in rec.seen[2:] if s[2] > 0.0]
    assert later and all(s[3] == "us-west-2" and s[4] == "us-west-2" for s in later)


def test_engine_observation_reports_the_checkpoint_region_after_a_save():
    """Two ticks of work in east, saved in the notice window at the preemption: the policy
    then sees east as the checkpoint's region, and the move west is billed."""
    rec, r = _two_region_run([0, 0, 0] + [1] * 40, 3)
    by_tick = {s[0]: s for s in rec.seen}
    assert by_tick[1][2] == 0.0 and by_tick[1][3] is None  # restart just over, nothing to save
    assert by_tick[2][2] > 0.0 and by_tick[2][3] == "us-east-1"  # a move would save it first
    assert by_tick[3][1] > 0.0 and by_tick[3][3] == "us-east-1"  # saved in the notice
    assert r.migrations == 1 and r.migration_cost == pytest.approx(2.0)
    assert by_tick[4][3] == "us-west-2"  # the checkpoint moved with the launch


def test_spotfleet_prices_no_egress_for_an_empty_move():
    """Same prices and history in two regions: with no checkpoint region the zone in the
    other region costs what the zone in the last launch's region costs; with one, more
    (egress and transfer)."""
    spec = JobSpec(work_hours=4.0, deadline_hours=8.0, restart_hours=0.1, checkpoint_hours=0.05,
                   checkpoint_gb=100.0, egress_usd_per_gb=0.02, transfer_seconds=360.0)
    n = 500
    hist = np.ones((2, n), dtype=bool)
    hist[:, ::40] = False  # the same preemption pattern in both zones
    hist[:, -1] = True

    def obs(ck: str | None) -> Observation:
        return Observation(tick=n - 1, gap_hours=0.1, zones=("us-east-1a", "us-west-2a"),
                           available=hist[:, -1], history=hist,
                           regions=("us-east-1", "us-west-2"), spot_price=np.array([0.9, 0.9]),
                           on_demand_price=np.array([3.06, 3.06]), probed=True,
                           last_seen_tick=np.full(2, -1), checkpoint_region=ck,
                           on_demand_region="us-east-1", migration_usd=2.0,
                           migration_hours=0.1)

    pol = SpotfleetPolicy()
    pol.reset(spec, obs(None))
    state = JobState(tick=n - 1, start_tick=n - 1, elapsed_hours=0.0, spec=spec, location=IDLE)
    empty = pol.cost_per_useful_hour(state, obs(None))
    assert empty[0] == pytest.approx(empty[1])
    saved = pol.cost_per_useful_hour(state, obs("us-east-1"))
    assert saved[0] == pytest.approx(empty[0]) and saved[1] > saved[0]
    assert not obs(None).moves_region(1) and obs("us-east-1").moves_region(1)


def test_spotfleet_prices_on_demand_in_the_on_demand_region():
    """Before a save the checkpoint region is None, but on-demand still runs in the last
    launch's region: spotfleet's on-demand price is that region's, not the cheapest."""
    hist = np.ones((2, 3), dtype=bool)
    o = Observation(tick=2, gap_hours=0.1, zones=("a1", "b1"), available=hist[:, -1],
                    history=hist, regions=("a", "b"), on_demand_price=np.array([4.0, 3.0]),
                    checkpoint_region=None, on_demand_region="a")
    state = JobState(tick=2, start_tick=0, elapsed_hours=0.2, spec=JobSpec(1.0, 2.0))
    assert SpotfleetPolicy()._od_price(state, o) == 4.0
    bare = Observation(tick=2, gap_hours=0.1, zones=("a1", "b1"), available=hist[:, -1],
                       history=hist, regions=("a", "b"), on_demand_price=np.array([4.0, 3.0]))
    assert SpotfleetPolicy()._od_price(state, bare) == 3.0  # nothing known: the cheapest


def test_live_driver_hides_the_checkpoint_region_until_a_checkpoint_exists():
    drv = PolicyDriver("spotfleet", zones=["us-east-1a", "us-west-2a"], deadline_seconds=8 * 3600,
                       on_demand_zone="us-west-2a")
    spec = drv.job_spec(Progress(total_steps=100, step_seconds=36.0))
    drv._checkpoint_region = "us-east-1"  # launched in east (try_launch sets it)
    assert drv.observation(0.0, spec, saved=False).checkpoint_region is None
    o = drv.observation(0.0, spec, saved=True)
    assert o.checkpoint_region == "us-east-1" and o.on_demand_region == "us-west-2"

    seen = []
    inner = drv.policy
    orig = inner.decide

    def spy(state, obs):
        seen.append(obs.checkpoint_region)
        return orig(state, obs)

    inner.decide = spy
    drv.decide(0.0, Progress(total_steps=100, step=0, committed_step=0, step_seconds=36.0),
               location="us-east-1a")
    drv.decide(300.0, Progress(total_steps=100, step=10, committed_step=10, step_seconds=36.0),
               location="us-east-1a")
    drv.decide(600.0, Progress(total_steps=100, step=10, committed_step=0, step_seconds=36.0),
               location=None)
    assert seen == [None, "us-east-1", None]
