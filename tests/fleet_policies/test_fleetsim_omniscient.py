"""The omniscient DP is exact for the simulator's model and bounds every online policy."""

from __future__ import annotations

import numpy as np
import pytest
from brute_force import cheapest_scripted_cost as _brute_force

from fleet.policies.base import JobSpec
from fleet.policies.scripted import ScriptedPolicy
from fleet.simulation.engine import simulate
from fleet.simulation.market import Market
from fleet.simulation.omniscient import omniscient_bound, quantum_seconds
from fleet.simulation.sweep import make_policies, start_ticks

AVAIL = "spot-traces/availability/1-node/aws-02-15-2023"
PRICES = "spot-prices/aws-v100-02-15-2023.json"




@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_dp_equals_brute_force_on_tiny_markets(seed):
    rng = np.random.default_rng(seed)
    gap = 120.0  # s
    spec = JobSpec(work_hours=9 / 60, deadline_hours=14 / 60, restart_hours=2 / 60,
                   checkpoint_hours=1 / 60, notice_seconds=60.0, on_demand_price=3.0,
                   spot_price=1.0)
    n = 7  # ticks before the deadline
    avail = rng.random((2, n)) < 0.6
    full = np.concatenate([avail, np.ones((2, 60), bool)], axis=1)
    m = Market(zones=("a", "b"), gap_seconds=gap, available=full)
    bf = _brute_force(m, spec, n)
    dp = omniscient_bound(m, spec, 0)
    assert dp.cost == pytest.approx(bf, rel=1e-9)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dp_equals_brute_force_with_regions_prices_and_migration(seed):
    """Two regions, per-tick spot prices, per-region on-demand prices, a checkpoint move
    of 5 GB x 0.1 $/GB and 60 s: the DP equals the cheapest of every action sequence."""
    rng = np.random.default_rng(100 + seed)
    spec = JobSpec(work_hours=8 / 60, deadline_hours=12 / 60, restart_hours=2 / 60,
                   checkpoint_hours=1 / 60, notice_seconds=60.0 * (seed % 2),
                   checkpoint_gb=5.0, egress_usd_per_gb=0.1, transfer_seconds=60.0)
    n = 6
    avail = rng.random((3, n)) < 0.6
    full = np.concatenate([avail, np.ones((3, 60), bool)], axis=1)
    prices = np.concatenate([rng.uniform(0.5, 2.0, (3, n)), np.ones((3, 60))], axis=1)
    m = Market(zones=("us-east-1a", "us-east-1b", "us-west-2a"), gap_seconds=120.0,
               available=full, spot_price=prices, on_demand_price=np.array([3.0, 3.0, 2.5]))
    assert len(m.region_names) == 2
    bf = _brute_force(m, spec, n)
    dp = omniscient_bound(m, spec, 0)
    assert dp.exact and dp.cost == pytest.approx(bf, rel=1e-9)


def test_dp_handles_ticks_shorter_than_the_checkpoint_and_huge_grids():
    rng = np.random.default_rng(5)
    m = Market(zones=("us-east-1a", "us-east-1b"), gap_seconds=20.0,
               available=rng.random((2, 40_000)) < 0.7)
    spec = JobSpec(work_hours=4.0, deadline_hours=6.0, restart_hours=0.1, checkpoint_hours=1 / 60)
    exact = omniscient_bound(m, spec, 100)
    assert exact.exact and exact.quantum_seconds == 20
    # odd durations (gcd 1 s with the tick): exact on a 1 s grid, or, when that grid is
    # too large, a coarser grid that is still a lower bound instead of an abort
    odd = JobSpec(work_hours=4.0, deadline_hours=6.0, restart_hours=361 / 3600,
                  checkpoint_hours=61 / 3600)
    fine = omniscient_bound(m, odd, 100)
    assert fine.exact and fine.quantum_seconds == 1
    coarse = omniscient_bound(m, odd, 100, max_cells=3_000_000)
    assert not coarse.exact and coarse.quantum_seconds > 1
    assert coarse.cost <= fine.cost + 1e-9
    assert fine.cost >= exact.cost - 1e-9  # longer restart and save cannot be cheaper


def test_long_ticks_up_to_a_day_are_bounded_and_longer_ones_refused():
    """Ticks of several hours, up to the loader's one day, even with a restart time in
    fractional seconds (the fallback's scan of the tick's divisors): a quick bound, below
    the simulator's runs. Longer ticks (only a Market built in code has them) are refused:
    until 2026-11-27 a 1000-day tick with such a restart took 49 s and gigabytes of DP."""
    from fleet.simulation.omniscient import _divisors

    assert _divisors(86400)[:6] == [1, 2, 3, 4, 5, 6] and _divisors(86400)[-1] == 86400
    assert _divisors(86400) == [d for d in range(1, 86401) if 86400 % d == 0]
    assert _divisors(1) == [1] and _divisors(49) == [1, 7, 49]
    rng = np.random.default_rng(3)
    odd = JobSpec(work_hours=24.0, deadline_hours=36.0, restart_hours=360.3 / 3600,
                  checkpoint_hours=1 / 60)
    for gap_h in (6.0, 24.0):
        m = Market(zones=("us-east-1a", "us-east-1b"), gap_seconds=gap_h * 3600.0,
                   available=rng.random((2, 40)) < 0.7)
        b = omniscient_bound(m, odd, 0)
        assert not b.exact and b.quantum_seconds >= 1
        for pol in make_policies(["on_demand", "failover"]):
            run = simulate(pol, m, odd, 0)
            assert not run.deadline_met or run.cost >= b.cost - 1e-9
    days = Market(zones=("us-east-1a",), gap_seconds=2 * 86400.0, available=np.ones((1, 5), bool))
    with pytest.raises(ValueError, match=r"a tick of 172800 s \(48 h\) is longer than one day"):
        omniscient_bound(days, odd, 0)


@pytest.fixture(scope="module")
def real_market(shared_data):
    return Market.from_dir(shared_data / AVAIL)


def test_quantum_is_the_gcd_of_gap_restart_and_checkpoint():
    assert quantum_seconds(195.0, 0.1, 1 / 60) == 15
    with pytest.raises(ValueError, match="whole seconds"):
        quantum_seconds(195.0, 0.1 + 1e-4, 1 / 60)


def test_dp_plan_replays_to_the_same_cost_on_a_real_trace(shared_data):
    # one region (plans are single-region), real per-tick prices
    m = Market.from_dir(shared_data / AVAIL, prices=shared_data / PRICES).subset(
        ["us-east-1a", "us-east-1c", "us-east-1d", "us-east-1f"])
    spec = JobSpec(12.0, 14.0, restart_hours=0.1, checkpoint_hours=1 / 60, notice_seconds=120)
    start = start_ticks(m, spec, 7)[3]
    res = omniscient_bound(m, spec, start, want_plan=True)
    assert omniscient_bound(m, spec, start).cost == pytest.approx(res.cost, rel=1e-12)
    run = simulate(ScriptedPolicy(res.plan, start), m, spec, start)
    assert run.deadline_met
    assert run.cost == pytest.approx(res.cost, rel=1e-9)
    assert run.completion_hours == pytest.approx(res.completion_hours, abs=1e-9)


@pytest.mark.parametrize("notice", [0.0, 120.0])
def test_dp_is_below_every_online_policy(real_market, notice):
    spec = JobSpec(12.0, 14.0, restart_hours=0.1, checkpoint_hours=1 / 60, notice_seconds=notice)
    for start in start_ticks(real_market, spec, 4, offset=0.25):
        bound = omniscient_bound(real_market, spec, start).cost
        assert bound >= spec.spot_price * (spec.work_hours + spec.restart_hours) - 1e-9
        for pol in make_policies():
            r = simulate(pol, real_market, spec, start)
            assert r.cost >= bound - 1e-9, (pol.name, start)


def test_work_off_the_tick_grid_is_not_rounded_up_into_the_bound():
    """With no restart and no save time (a notice saves for free) the quantum was the tick;
    work and deadline were rounded to it, work UP and deadline DOWN, "which can only raise the
    bound": 1 h of on-demand on 2 h ticks was bounded at 2 h (4 $) while every policy paid
    1 h (2 $). Until 2026-11-28; now the quantum divides the work and the deadline too."""
    m = Market(zones=("us-east-1a",), gap_seconds=7200.0, available=np.zeros((1, 8), bool))
    spec = JobSpec(work_hours=1.0, deadline_hours=2.5, restart_hours=0.0, checkpoint_hours=0.0,
                   notice_seconds=60.0, on_demand_price=2.0)
    b = omniscient_bound(m, spec, 0)
    assert b.exact and b.cost == pytest.approx(2.0) and b.completion_hours == pytest.approx(1.0)
    for pol in make_policies():
        run = simulate(pol, m, spec, 0)
        assert run.deadline_met and run.cost >= b.cost - 1e-9, pol.name


def test_deadline_off_the_grid_is_not_cut_to_an_infeasible_one():
    """work + restart = deadline = 3965 s, not a multiple of the 15 s quantum of 195 s ticks,
    a 6 min restart and a 1 min save: rounded (work up to 3615 s, deadline down to 3960 s)
    no schedule fitted and the bound raised "no offline schedule meets the deadline", while
    on-demand meets it. Exact now, on a 5 s quantum."""
    m = Market(zones=("us-east-1a",), gap_seconds=195.0, available=np.ones((1, 60), bool),
               spot_price=np.full((1, 60), 1.0))
    spec = JobSpec(work_hours=3605 / 3600, deadline_hours=3965 / 3600, restart_hours=0.1,
                   checkpoint_hours=1 / 60)
    b = omniscient_bound(m, spec, 0)
    assert b.exact and b.quantum_seconds == 5 and b.cost == pytest.approx(3965 / 3600)
    for pol in make_policies():  # no slack to spare: they run on-demand (3.06 $/h)
        run = simulate(pol, m, spec, 0)
        assert run.deadline_met and run.cost >= b.cost - 1e-9, pol.name


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dp_equals_brute_force_with_work_and_deadline_off_the_grid(seed):
    """Work 9.5 min and deadline 14.25 min on 120 s ticks with a 2 min restart and a 1 min
    save (gcd 60 s): the DP equals the cheapest of every action sequence."""
    rng = np.random.default_rng(200 + seed)
    spec = JobSpec(work_hours=9.5 / 60, deadline_hours=14.25 / 60, restart_hours=2 / 60,
                   checkpoint_hours=1 / 60, notice_seconds=60.0 * (seed % 2),
                   on_demand_price=3.0, spot_price=1.0)
    n = 8
    avail = rng.random((2, n)) < 0.6
    full = np.concatenate([avail, np.ones((2, 60), bool)], axis=1)
    m = Market(zones=("a", "b"), gap_seconds=120.0, available=full)
    dp = omniscient_bound(m, spec, 0)
    assert dp.exact and dp.cost == pytest.approx(_brute_force(m, spec, n), rel=1e-9)


def test_no_policy_pays_less_than_the_bound_without_restart_and_save_time(real_market):
    """The real V100 folder with --restart-minutes 0 --checkpoint-minutes 0 and a notice:
    greedy_1zone paid 7.344 $ under a bound of 7.359 $ (8 h of work rounded up to 148 ticks
    of 195 s) until 2026-11-28."""
    spec = JobSpec(8.0, 12.0, restart_hours=0.0, checkpoint_hours=0.0, notice_seconds=120.0)
    for start in start_ticks(real_market, spec, 2, warmup_hours=24):
        bound = omniscient_bound(real_market, spec, start)
        assert bound.exact
        for pol in make_policies():
            r = simulate(pol, real_market, spec, start)
            assert r.cost >= bound.cost - 1e-9, (pol.name, start, r.cost, bound.cost)


def test_work_in_fractional_seconds_is_rounded_in_the_bounds_favour():
    """SkyNomad's work is deadline / (D/W): seconds with a fraction. It is rounded down (and
    the deadline up) to whole seconds, not up to the quantum: on 2 h ticks without restart or
    save time, 1 h + 0.5 s of on-demand at 2 $/h is bounded within a second of its 2.0003 $,
    never above it (the exact path rounded it up to a whole 2 h tick: 4 $)."""
    m = Market(zones=("us-east-1a",), gap_seconds=7200.0, available=np.zeros((1, 8), bool))
    spec = JobSpec(work_hours=3600.5 / 3600, deadline_hours=2.5, restart_hours=0.0,
                   checkpoint_hours=0.0, notice_seconds=60.0, on_demand_price=2.0)
    b = omniscient_bound(m, spec, 0)
    run = simulate(make_policies(["on_demand"])[0], m, spec, 0)
    assert not b.exact and run.cost == pytest.approx(2.0 * 3600.5 / 3600)
    assert run.cost - 2.0 / 3600 <= b.cost <= run.cost + 1e-12
