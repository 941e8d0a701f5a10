"""The live driver runs on-demand where the simulator does (fleet/simulation/engine.py).

Without a configured ``on_demand_zone``: while nothing is saved, the cheapest on-demand
region (the last launch's on a tie); once something is saved, the checkpoint's region (the
last launch's). A configured ``on_demand_zone`` always wins. ``Observation.on_demand_region``
is the region of the zone the on-demand ``Launch`` uses.
"""

from __future__ import annotations

from fleet.contract import RunPriors
from fleet.policies.base import ON_DEMAND, Action, JobState, Observation, Policy
from fleet.providers.decisions import PolicyDriver, Progress

ZONES = ["us-east-1a", "us-west-2a"]
OD = {"us-east-1a": 3.06, "us-west-2a": 2.50}  # us-west-2 is the cheaper on-demand region


class Scripted(Policy):
    """Goes where ``plan`` says, one entry per decision; records every observation."""

    name = "scripted"

    def __init__(self, plan: list[int]):
        self.plan = list(plan)
        self.seen: list[Observation] = []

    def decide(self, state: JobState, obs: Observation) -> Action:
        self.seen.append(obs)
        return Action(self.plan.pop(0), None, obs.tick + 1)


def _driver(plan: list[int], **kw) -> tuple[PolicyDriver, Scripted]:
    pol = Scripted(plan)
    pri = RunPriors(work_seconds=3600.0, on_demand_price_per_hour=3.06,
                    spot_price_per_hour={z: 0.9 for z in ZONES})
    return PolicyDriver(pol, ZONES, priors=pri, deadline_seconds=4 * 3600.0, **kw), pol


def _launch(d: PolicyDriver, t: float, progress: Progress, location: str | None = None):
    dec = d.decide(t, progress, location)
    lau, _ = d.try_launch(t, dec, lambda z: True, location)
    return lau


NOTHING = Progress(total_steps=100, step=0, committed_step=0)
SAVED = Progress(total_steps=100, step=10, committed_step=10)


def test_on_demand_runs_in_the_cheapest_region_while_nothing_is_saved():
    d, pol = _driver([ON_DEMAND], on_demand_prices=OD)
    lau = _launch(d, 0.0, NOTHING)
    assert lau is not None and not lau.spot
    assert lau.zone == "us-west-2a"  # not the first zone (us-east-1a, 3.06 $/h)
    assert pol.seen[-1].on_demand_region == "us-west-2" == d.regions[ZONES.index(lau.zone)]
    assert list(pol.seen[-1].on_demand_price) == [3.06, 2.50]


def test_on_demand_follows_the_checkpoint_once_something_is_saved():
    # spot in us-east-1a, a checkpoint there, then on-demand: the checkpoint's region,
    # though us-west-2 is cheaper (the simulator bills no move for it either)
    d, pol = _driver([0, ON_DEMAND], on_demand_prices=OD)
    first = _launch(d, 0.0, NOTHING)
    assert first.spot and first.zone == "us-east-1a"
    lau = _launch(d, 600.0, SAVED, location="us-east-1a")
    assert not lau.spot and lau.zone == "us-east-1a"
    assert pol.seen[-1].on_demand_region == "us-east-1" == pol.seen[-1].checkpoint_region


def test_before_a_save_the_last_launch_does_not_hold_on_demand_in_a_dearer_region():
    # launched spot in us-east-1a but reclaimed before any save: nothing to move, so
    # on-demand goes to the cheaper us-west-2 (as the simulator's od_region(saved=False))
    d, pol = _driver([0, ON_DEMAND], on_demand_prices=OD)
    _launch(d, 0.0, NOTHING)
    d.preempted(300.0, "us-east-1a")
    lau = _launch(d, 600.0, NOTHING)
    assert lau.zone == "us-west-2a" and pol.seen[-1].on_demand_region == "us-west-2"


def test_one_flat_price_ties_every_region_the_last_launch_wins():
    d, pol = _driver([ON_DEMAND])  # no per-zone prices: every region costs 3.06 $/h
    assert _launch(d, 0.0, NOTHING).zone == "us-east-1a"  # never launched: the first zone
    assert pol.seen[-1].on_demand_region == "us-east-1"
    d, pol = _driver([1, ON_DEMAND])
    _launch(d, 0.0, NOTHING)
    lau = _launch(d, 600.0, SAVED, location="us-west-2a")
    assert lau.zone == "us-west-2a" and pol.seen[-1].on_demand_region == "us-west-2"


def test_a_configured_on_demand_zone_wins_and_is_reported():
    d, pol = _driver([0, ON_DEMAND], on_demand_prices=OD, on_demand_zone="us-east-1a")
    _launch(d, 0.0, NOTHING)
    d.preempted(300.0, "us-east-1a")
    lau = _launch(d, 600.0, NOTHING)
    assert lau.zone == "us-east-1a" and pol.seen[-1].on_demand_region == "us-east-1"


def test_a_launch_placed_elsewhere_is_recorded_as_try_launch_records_it():
    """SkyPilot places a managed job itself; the provider reports the zone (launched): the
    checkpoint's region is then that zone's, as after try_launch. A zone outside the
    candidates' regions is not recorded (no zone there to run on-demand in)."""
    d, pol = _driver([ON_DEMAND], on_demand_prices=OD)
    assert not d.launched(0.0, "eu-west-1a", spot=True)
    assert d.launched(0.0, "us-east-1a", spot=True)
    lau = _launch(d, 600.0, SAVED)
    assert not lau.spot and lau.zone == "us-east-1a"  # the checkpoint's, not the cheaper us-west-2
    assert pol.seen[-1].checkpoint_region == "us-east-1" == pol.seen[-1].on_demand_region
    assert d.market.last_seen[0] >= 0  # the spot zone was seen up at the launch
