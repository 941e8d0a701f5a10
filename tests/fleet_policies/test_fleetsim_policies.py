"""Fleet policies: online (no future), probed (no free look at zones not held), the
baselines behave as their authors run them, spotfleet is price- and region-aware and
meets every deadline across regimes."""

from __future__ import annotations

import numpy as np
import pytest

from fleet.market.regimes import regime_market, volatile_config
from fleet.policies.base import IDLE, ON_DEMAND, JobSpec
from fleet.policies.baselines import (
    Failover,
    SingleZoneGreedy,
    SkyPilotFailover,
    UniformProgress,
    builtin_policy_factories,
)
from fleet.policies.spotfleet import SpotfleetPolicy
from fleet.simulation.engine import simulate
from fleet.simulation.families import FAMILIES
from fleet.simulation.market import Market
from fleet.simulation.sweep import start_ticks

AVAIL = "spot-traces/availability/1-node/aws-02-15-2023"
PRICES = "spot-prices/aws-v100-02-15-2023.json"


@pytest.fixture(scope="module")
def real_market(shared_data):
    return Market.from_dir(shared_data / AVAIL, prices=shared_data / PRICES)


def _decisions(pol, m, spec, start):
    tl: list[tuple[int, int]] = []
    simulate(pol, m, spec, start, timeline=tl)
    return tl


@pytest.mark.parametrize("notice", [0.0, 120.0])
def test_decisions_do_not_depend_on_the_future(real_market, notice):
    spec = JobSpec(24.0, 36.0, notice_seconds=notice, checkpoint_gb=25.0)
    start = start_ticks(real_market, spec, 5)[2]
    rng = np.random.default_rng(7)
    for cut_hours in (3.0, 11.0, 20.0):
        cut = start + int(cut_hours / real_market.gap_hours)
        shuffled = real_market.available.copy()
        future = shuffled[:, cut + 1:]
        shuffled[:, cut + 1:] = future[:, rng.permutation(future.shape[1])]
        other = Market(zones=real_market.zones, gap_seconds=real_market.gap_seconds,
                       available=shuffled, spot_price=real_market.spot_price)
        for name, factory in builtin_policy_factories().items():
            a = [d for d in _decisions(factory(), real_market, spec, start) if d[0] <= cut]
            b = [d for d in _decisions(factory(), other, spec, start) if d[0] <= cut]
            assert a == b, f"{name} changed a decision before tick {cut}"


class _Recorder(SpotfleetPolicy):
    def __init__(self):
        super().__init__()
        self.seen = []

    def decide(self, state, obs):
        self.seen.append((obs.tick, state.location, obs.available.copy(), obs.last_seen_tick.copy()))
        return super().decide(state, obs)


def test_probed_observation_holds_only_what_the_job_saw(real_market):
    spec = JobSpec(12.0, 18.0, checkpoint_gb=25.0)
    start = start_ticks(real_market, spec, 5)[1]
    pol = _Recorder()
    simulate(pol, real_market, spec, start)
    truth = real_market.available
    checked = 0
    for tick, loc, avail, last in pol.seen:
        for z in range(real_market.n_zones):
            if z == loc:
                assert avail[z] and last[z] == tick
            elif last[z] >= 0:  # the last observation, carried forward
                assert avail[z] == truth[z, last[z]]
                checked += 1
            else:  # never observed during the job: the state before the start
                assert avail[z] == truth[z, start - 1]
    assert checked > 0


def test_a_zone_never_observed_cannot_change_decisions():
    rng = np.random.default_rng(3)
    base = rng.random((3, 400)) < 0.6
    other = base.copy()
    other[2, 50:] = ~other[2, 50:]  # zone 2 changes after the start; greedy never looks there
    spec = JobSpec(3.0, 6.0)
    runs = []
    for avail in (base, other):
        m = Market(zones=("us-east-1a", "us-east-1b", "us-west-2a"), gap_seconds=300.0,
                   available=avail)
        runs.append(_decisions(SingleZoneGreedy(zone=0), m, spec, 50))
    assert runs[0] == runs[1]


def _three_zone_market(avail):
    # z0, z1 in us-east-1 (z0 cheapest), z2 in us-west-2
    avail = np.asarray(avail, dtype=bool)
    price = np.tile(np.array([[0.9], [1.0], [1.1]]), (1, avail.shape[1]))
    return Market(zones=("us-east-1a", "us-east-1b", "us-west-2a"), gap_seconds=600.0,
                  available=avail, spot_price=price)


def test_failover_with_10021_fixed_tries_other_regions_first():
    n = 200
    avail = np.ones((3, n), dtype=bool)
    avail[0, 13:16] = False  # the job is preempted in z0 at tick 13
    m = _three_zone_market(avail)
    spec = JobSpec(4.0, 8.0, notice_seconds=120)
    sky = _decisions(SkyPilotFailover(), m, spec, 10)
    eager = _decisions(Failover(), m, spec, 10)
    assert sky[0][1] == eager[0][1] == 0  # cheapest zone first
    after_sky = next(loc for t, loc in sky if t == 13)
    after_eager = next(loc for t, loc in eager if t == 13)
    assert after_sky == 1  # 0.14: the cheapest zone with capacity, same region
    assert after_eager == 2  # fixed: the other region first


def test_failover_never_blocks_the_preempted_zone_for_good():
    n = 200
    avail = np.zeros((3, n), dtype=bool)
    avail[0] = True
    avail[0, 13] = False  # only z0 ever has capacity; preempted once
    m = _three_zone_market(avail)
    spec = JobSpec(4.0, 12.0, notice_seconds=120)
    for pol in (SkyPilotFailover(), Failover()):
        tl = _decisions(pol, m, spec, 10)
        back = [loc for t, loc in tl if t >= 14]
        assert back and back[0] == 0, pol.name  # relaunched in z0 as soon as it returned
        r = simulate(pol, m, spec, 10)
        assert r.on_demand_hours == 0.0


def test_baselines_rely_on_the_emergency_save_with_a_usable_notice():
    m = _three_zone_market(np.ones((3, 200), dtype=bool))
    for pol in (SkyPilotFailover(), Failover(), UniformProgress(True), SingleZoneGreedy()):
        r = simulate(pol, m, JobSpec(4.0, 8.0, notice_seconds=120), 10)
        assert r.checkpoint_hours == 0.0, pol.name  # no periodic saves: the notice suffices
        r0 = simulate(pol, m, JobSpec(4.0, 8.0), 10)
        assert r0.checkpoint_hours > 0.0, pol.name


def test_uniform_progress_never_leaves_on_demand_for_idle():
    avail = np.zeros((2, 300), dtype=bool)
    avail[:, 150:] = True  # nothing for 25 h, then spot
    m = Market(zones=("us-east-1a", "us-east-1b"), gap_seconds=600.0, available=avail)
    tl = _decisions(UniformProgress(True), m, JobSpec(10.0, 30.0), 0)
    locs = [loc for _, loc in tl]
    first_od = locs.index(ON_DEMAND)
    assert IDLE not in locs[first_od:]


def test_spotfleet_leaves_an_expensive_zone_and_weighs_migration():
    n = 300
    avail = np.ones((3, n), dtype=bool)
    price = np.tile(np.array([[70.0], [19.0], [15.0]]), (1, n))
    m = Market(zones=("asia-south2-b", "us-central1-a", "us-east4-a"), gap_seconds=600.0,
               available=avail, spot_price=price, on_demand_price=np.array([99.0, 82.5, 82.5]),
               clouds=("gcp",) * 3)
    spec = JobSpec(8.0, 16.0, notice_seconds=120, checkpoint_gb=100.0)
    r = simulate(SpotfleetPolicy(), m, spec, 50)
    assert r.spot_cost < 16.0 * 9  # it runs in the 15 $/h zone, not at 70 $/h
    # a price-blind policy that starts in the listed first zone stays there
    up = simulate(UniformProgress(True), m, spec, 50)
    assert up.cost > 4 * r.cost


def test_volatile_regime_is_volatile_and_deterministic():
    cfg = volatile_config(hours=24.0 * 12)
    shares = []
    for seed in range(10, 15):
        m = regime_market(cfg, seed)
        shares.append(float(np.mean(~m.available.any(axis=0))))
        assert m.spot_price.max() > 1.4 * m.spot_price.min()  # spikes and expensive zones
        assert len(m.region_names) == 3
    assert min(shares) > 0.2 and max(shares) < 0.6  # all zones down 24-54 % of the time
    a, b = regime_market(cfg, 11), regime_market(cfg, 11)
    assert np.array_equal(a.available, b.available) and np.array_equal(a.spot_price, b.spot_price)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["v100", "h100", "volatile"])
@pytest.mark.parametrize("notice", [0.0, 120.0])
def test_every_deadline_policy_meets_every_deadline(shared_data, family, notice):
    fam = FAMILIES[family]
    for m, _ in fam.load(shared_data, 10)[:2]:
        for ratio in (1.05, 1.5, 3.0):
            spec = fam.spec(ratio, notice)
            for s in fam.starts(m, spec, 5):
                for name, factory in builtin_policy_factories().items():
                    r = simulate(factory(), m, spec, s)
                    assert r.deadline_met, (family, ratio, notice, name, s)


@pytest.mark.parametrize("deadline", [2.3 + 0.05 * k for k in range(12)])
def test_failed_probes_never_push_a_job_past_its_deadline(deadline):
    """Nine zones up before the start, all gone after it: policies that try them before
    falling back to on-demand must not spend slack the safety net does not have."""
    avail = np.zeros((9, 400), dtype=bool)
    avail[:, :100] = True
    zones = tuple(f"us-east-1{c}" for c in "abcdefghi")
    m = Market(zones=zones, gap_seconds=300.0, available=avail)
    for name, factory in builtin_policy_factories().items():
        r = simulate(factory(), m, JobSpec(2.0, deadline, notice_seconds=120), 100)
        assert r.deadline_met, (name, deadline, r.completion_hours, r.failed_probes)


def test_spotfleet_waits_for_its_region_instead_of_paying_egress_when_slack_allows():
    n = 400
    avail = np.ones((3, n), dtype=bool)
    avail[0, 40:42] = avail[0, 60:62] = False  # short outages before the start: quick regains
    avail[0, 113:116] = False  # the job's zone is reclaimed 13 ticks in, back 30 min later
    avail[1, :] = False  # its region's other zone never has capacity
    price = np.ones((3, n))
    price[2] = 1.3  # the other region is dearer
    m = Market(zones=("us-east-1a", "us-east-1b", "us-west-2a"), gap_seconds=600.0,
               available=avail, spot_price=price)
    spec = JobSpec(4.0, 12.0, notice_seconds=120, checkpoint_gb=100.0)
    ours = simulate(SpotfleetPolicy(), m, spec, 100)
    eager = simulate(Failover(), m, spec, 100)
    assert ours.deadline_met and ours.migrations == 0 and ours.preemptions == 1
    assert eager.migrations >= 1  # eager failover moves the checkpoint to us-west-2
    assert ours.cost < eager.cost


def test_no_notice_interval_keeps_saves_and_losses_within_the_slack():
    """Without a notice the interval must not shrink with the slack until saves eat it:
    v3's cap (0.4 x spare, floor 2 saves' time) spent half the time saving near the end
    of tight jobs and was then sent to on-demand (h100 D/W 1.2: 1.13x the best baseline)."""
    from fleet.policies.spotfleet import budget_interval

    c, d, mttp, t_opt = 1 / 60, 0.1, 12.5, 0.645
    # feasible: the interval satisfies a T + rem C / T <= spare - rem d / mttp
    rem, spare = 6.0, 1.0
    t = budget_interval(t_opt, c, rem, mttp, d, spare)
    a = 1 + rem / (2 * mttp)
    assert a * t + rem * c / t <= spare - rem * d / mttp + 1e-9
    assert t < t_opt  # the optimum alone would not fit the slack
    # infeasible (0.7 h cannot hold 6 h of saves and losses): the longest interval the
    # spare slack holds, which keeps the job on spot longest (each save costs C anyway)
    assert budget_interval(t_opt, c, rem, mttp, d, 0.4) == pytest.approx(0.4)
    assert budget_interval(t_opt, c, rem, mttp, d, 0.4, hold=0.5) == pytest.approx(0.5)

    def run(rule):
        rem, spare, saves = 6.0, 0.7, 0.0
        while rem > 0:
            t = rule(rem, spare)
            rem -= t
            spare -= c
            saves += c
        return saves, spare

    v3 = run(lambda rem, spare: max(min(t_opt, 0.4 * spare), 2 * c))
    v4 = run(lambda rem, spare: budget_interval(t_opt, c, rem, mttp, d, spare))
    assert v4[0] < v3[0] and v4[1] > v3[1]  # fewer saves, more slack left at the end
    assert budget_interval(t_opt, c, 1.0, mttp, d, 5.0) == pytest.approx(t_opt)  # ample slack


def test_forced_probability_counts_past_windows_that_burn_more_than_the_slack():
    from fleet.policies.base import Observation

    gap = 0.5
    n = 24 * 14
    hist = np.ones((2, n), dtype=bool)
    for t0 in range(0, n, 20):  # both zones down 2 h every 10 h
        hist[:, t0:t0 + 4] = False
    obs = Observation(tick=n - 1, gap_hours=gap, zones=("a", "b"), available=hist[:, -1],
                      history=hist)
    pol = SpotfleetPolicy()
    pol.reset(JobSpec(12.0, 36.0, notice_seconds=120.0), obs)
    spec = JobSpec(12.0, 36.0, notice_seconds=120.0)
    # 20 h windows hold 4 h of outage (plus the small preemption burn)
    assert pol.forced_probability(spec, 3.0, 20.0) == 1.0
    assert pol.forced_probability(spec, 8.0, 20.0) == 0.0
    ps = [pol.forced_probability(spec, s, 20.0) for s in np.linspace(0, 10, 21)]
    assert all(x >= y for x, y in zip(ps, ps[1:], strict=False))


def _rotating_history(gap: float = 0.5, days: int = 14) -> np.ndarray:
    """Three zones up in turn in 8 h blocks (each up a third of the time, some zone
    always) and one 30 h market-wide drought: the mean burn is high, the chance low."""
    n = int(days * 24 / gap)
    hist = np.zeros((3, n), dtype=bool)
    block = int(8 / gap)
    for t in range(n):
        hist[(t // block) % 3, t] = True
    hist[:, n // 3:n // 3 + int(30 / gap)] = False
    return hist


def _frequent_outages(gap: float = 0.5, days: int = 14) -> np.ndarray:
    """Three zones up together, all down 2 h in every 6 h: every window burns."""
    n = int(days * 24 / gap)
    hist = np.ones((3, n), dtype=bool)
    for t0 in range(0, n, int(6 / gap)):
        hist[:, t0:t0 + int(2 / gap)] = False
    return hist


@pytest.mark.parametrize("history,v4_bridges", [(_rotating_history, False),
                                                 (_frequent_outages, True)])
def test_bridging_needs_the_chance_of_being_forced_not_just_the_mean(history, v4_bridges):
    """An hour on on-demand during an outage is spent for sure; it saves money only if the
    job would otherwise be forced onto on-demand later. v3 bridged as soon as the expected
    burn exceeded the spare slack (the reserve); v4 also needs the share of past windows
    that burnt more than the spare slack to exceed 1 - (best zone's availability). One rare
    drought: the mean says bridge, the chance says wait (failover_sky's win at D/W 3 in the
    volatile family); outages in every window: both say bridge."""
    from fleet.policies.base import JobState, Observation

    gap = 0.5
    hist = history(gap)
    obs = Observation(tick=hist.shape[1] - 1, gap_hours=gap, zones=("a", "b", "c"),
                      available=hist[:, -1], history=hist)
    spec = JobSpec(12.0, 36.0, notice_seconds=120.0)
    state = JobState(tick=obs.tick, start_tick=obs.tick, elapsed_hours=10.0, spec=spec,
                     location=IDLE, committed_hours=8.0)
    v4 = SpotfleetPolicy()
    v4.reset(spec, obs)
    spare = 0.8 * v4.reserve_hours(state, state.elapsed_hours)  # expected burn > spare: v3 bridges
    assert v4.bridge(state, spare, state.elapsed_hours) is v4_bridges


def test_spotfleet_moves_to_a_cheaper_zone_only_while_the_slack_pays_for_it():
    """A voluntary move spends a restart off the spare slack; with almost none left it
    would send the job to on-demand at the next tick (v3 at D/W 1.05: the last 4.6 h on
    on-demand), so the held zone is kept; with slack to spare the job moves."""
    from fleet.policies.base import JobState, Observation

    gap = 300 / 3600
    hist = np.ones((2, 2000), dtype=bool)
    obs = Observation(tick=1999, gap_hours=gap, zones=("dear", "cheap"),
                      available=np.array([True, True]), history=hist,
                      spot_price=np.array([2.0, 1.0]), on_demand_price=np.array([3.4, 3.4]))
    spec = JobSpec(12.0, 12.6, notice_seconds=120.0)
    pol = SpotfleetPolicy()
    pol.reset(spec, obs)

    def decide(slack_used: float) -> int:
        elapsed = 2.0
        state = JobState(tick=1999, start_tick=1990, elapsed_hours=elapsed, spec=spec,
                         location=0, committed_hours=elapsed - 0.1 - slack_used)
        return pol.decide(state, obs).target

    assert decide(0.0) == 1  # 0.5 h of slack: the move to the 50 % cheaper zone pays
    assert decide(0.3) == 0  # 0.2 h: the restart would use up the spare slack


def test_spotfleet_waits_for_the_cheapest_zone_only_while_the_slack_covers_its_wait():
    """The patience rule (v5): with ample spare slack the job tries only the zone cheapest
    per useful hour and otherwise idles for it (its mean down time before the job, one
    tick here, fits ``patience`` times over); with ``patience=0`` it falls back to the
    next zone believed up."""
    from fleet.policies.base import JobState, Observation
    from fleet.policies.spotfleet import SpotfleetParams

    gap = 1.0 / 6
    pre = np.ones((2, 120), dtype=bool)
    prices, od = np.array([10.0, 12.0]), np.array([80.0, 80.0])
    spec = JobSpec(20.0, 30.0, notice_seconds=120.0)
    obs0 = Observation(tick=119, gap_hours=gap, zones=("a", "b"), available=pre[:, -1],
                       history=pre, spot_price=prices, on_demand_price=od)
    # zone 0 (cheapest) was seen down a tick ago and may be back; zone 1 is up
    hist = np.hstack([pre, np.vstack([np.zeros(2, dtype=bool), np.ones(2, dtype=bool)])])
    obs = Observation(tick=121, gap_hours=gap, zones=("a", "b"), available=hist[:, -1],
                      history=hist, spot_price=prices, on_demand_price=od, probed=True,
                      last_seen_tick=np.array([120, 121]))
    state = JobState(tick=121, start_tick=119, elapsed_hours=2 * gap, spec=spec, location=IDLE)
    acts = {}
    for patience in (2.0, 0.0):
        pol = SpotfleetPolicy(SpotfleetParams(patience=patience))
        pol.reset(spec, obs0)
        a = pol.decide(state, obs)
        acts[patience] = (a.target, tuple(a.fallbacks))
    assert acts[2.0] == (0, (IDLE,))
    assert acts[0.0] == (0, (1, IDLE))
