"""Intervals for starts that share market hours: ``start_blocks`` cuts each market's
starts into blocks of overlapping runs and ``bootstrap_ratio(blocks=...)`` resamples whole
blocks (a cluster bootstrap), so that 100 starts in a few days of one trace are not read as
100 independent draws."""

import numpy as np

from fleet.simulation.families import Cell, bootstrap_ratio, goal_table, start_blocks


def test_blocks_cut_a_market_where_runs_stop_overlapping_and_never_span_two_markets():
    # market A: ticks of 1 h, starts every 10 h, deadline 25 h -> blocks of 3 starts
    # market B: ticks of 0.5 h, starts 20 ticks (10 h) apart -> the same cut
    blocks = start_blocks([[0, 10, 20, 30, 40], [0, 20, 40]], [1.0, 0.5], 25.0)
    assert blocks.tolist() == [0, 0, 0, 1, 1, 2, 2, 2]


def test_starts_far_apart_are_each_their_own_block():
    assert start_blocks([[0, 100, 200]], [1.0], 24.0).tolist() == [0, 1, 2]


def test_one_start_per_block_gives_the_ordinary_paired_interval():
    rng = np.random.default_rng(3)
    num, den = rng.uniform(9, 13, 60), rng.uniform(9, 13, 60)
    assert bootstrap_ratio(num, den, blocks=np.arange(60)) == bootstrap_ratio(num, den)


def test_correlated_blocks_widen_the_interval():
    # 10 blocks of 10 identical starts: 10 independent draws, not 100
    rng = np.random.default_rng(5)
    per_block = rng.uniform(0.8, 1.2, 10)
    num = np.repeat(per_block, 10) * 10.0
    den = np.full(100, 10.0)
    blocks = np.repeat(np.arange(10), 10)
    r0, lo0, hi0 = bootstrap_ratio(num, den)
    r1, lo1, hi1 = bootstrap_ratio(num, den, blocks=blocks)
    assert r0 == r1
    assert hi1 - lo1 > 2.0 * (hi0 - lo0)  # about sqrt(10) x wider
    assert lo1 < lo0 and hi1 > hi0


def test_goal_table_prints_the_block_interval_and_the_number_of_blocks():
    om = np.full(6, 10.0)
    c = Cell("fam", 1.5, 0.0, om, blocks=np.array([0, 1, 2, 3, 4, 4]))
    c.costs = {"spotfleet": np.full(6, 11.0), "failover": np.full(6, 12.0), "on_demand": np.full(6, 30.0)}
    c.met = {n: np.ones(6, bool) for n in c.costs}
    row = goal_table([c]).splitlines()[2]
    assert row == "| fam | 1.5 | 0 | failover | 0.917 [0.917, 0.917] | [0.917, 0.917] (5) | 1.100 | 100% |"


def test_too_few_blocks_print_no_interval():
    om = np.full(6, 10.0)
    c = Cell("fam", 3.0, 0.0, om, blocks=np.array([0, 0, 0, 1, 1, 1]))
    c.costs = {"spotfleet": np.full(6, 11.0), "failover": np.full(6, 12.0)}
    c.met = {n: np.ones(6, bool) for n in c.costs}
    assert "| 2 blocks: too few |" in goal_table([c])
