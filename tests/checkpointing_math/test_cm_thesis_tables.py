"""The simulator reproduces the thesis's Tables 6.2 and 6.3 from parameters derived from
them (docs/training-simulator.md). Deterministic seeds 0-19 (the thesis averaged 100).

Tolerance: every policy's latency overhead vs on-demand within 1.5 percentage points of
the published one, costs within 2 %. Ordering: Table 6.2's full ranking; for Table 6.3 the
adaptive policy ties the best static interval (Per-33) and both beat Per-10 and Per-100
by several points. The thesis ranks Per-10 1.0 point ahead of Per-100; our exact timeline
puts them within 0.5 point of each other (the docs explain why), which the test states.
"""

from __future__ import annotations

import functools

import pytest

from checkpointing.training_sim import run_policies
from checkpointing.training_sim.analysis import renewal_loss_seconds, uniform_phase_loss_seconds
from checkpointing.training_sim.thesis import (
    MTTP_SECONDS,
    derive_parameters,
    preset,
    published_overheads,
    published_table,
)

SEEDS = range(20)
TOLERANCE_PP = 1.5


@functools.cache
def simulated(table: str) -> dict:
    config, policies = preset(table)
    results = run_policies(config, policies, mttp_seconds=MTTP_SECONDS, seeds=SEEDS)
    return {r.name: r for r in results}


@pytest.mark.parametrize("table", ["6.2", "6.3"])
def test_preset_means_are_the_derived_ones(table: str) -> None:
    d = derive_parameters(table)
    config, _ = preset(table)
    assert config.step_seconds.mean == pytest.approx(d.step_seconds, rel=0.005)
    assert config.ckpt_seconds.mean == pytest.approx(d.ckpt_seconds, rel=0.01)
    assert config.alloc_seconds.mean == pytest.approx(d.alloc_seconds, rel=0.02)
    assert config.prep_seconds.mean == pytest.approx(d.prep_seconds, rel=0.02)
    assert config.spot_price_per_hour == pytest.approx(d.spot_price_per_hour, rel=0.001)
    betas = sorted(d.backup_seconds_by_column.values())
    assert betas[0] * 0.97 <= config.backup_seconds.mean <= betas[1] * 1.03


def test_derived_parameters_tell_the_two_jobs_apart() -> None:
    small, big = derive_parameters("6.2"), derive_parameters("6.3")
    # Emergency save fits the 30 s notice for GPT-117M, not for GPT-1.3B (thesis 6.3.1/6.3.2).
    beta_small = min(small.backup_seconds_by_column.values())
    assert small.step_seconds + small.ckpt_seconds + beta_small < 30
    assert big.step_seconds + big.ckpt_seconds + min(big.backup_seconds_by_column.values()) > 30
    assert small.ckpt_seconds == pytest.approx(2.55, abs=0.01)
    assert big.ckpt_seconds == pytest.approx(19.5, abs=0.01)


@pytest.mark.parametrize("table", ["6.2", "6.3"])
def test_overheads_and_costs_within_tolerance(table: str) -> None:
    sim = simulated(table)
    published = published_overheads(table)
    costs = {c.name: c.cost for c in published_table(table)}
    for name, want in published.items():
        got = sim[name].overhead_vs_on_demand
        assert abs(got - want) * 100 <= TOLERANCE_PP, f"{table} {name}: {got:.4f} vs {want:.4f}"
        assert sim[name].cost_dollars == pytest.approx(costs[name], rel=0.02)


def test_table_6_2_ordering_reproduced() -> None:
    ovh = {k: v.overhead_vs_on_demand for k, v in simulated("6.2").items()}
    assert ovh["Adaptive"] < ovh["Per-51"] < ovh["Per-100"] < ovh["Per-10"]
    sim = simulated("6.2")
    assert sim["Adaptive"].recompute_seconds < 60  # emergency saves: (almost) nothing lost
    assert sim["Adaptive"].failed_emergency_saves == 0


def test_table_6_3_ordering_reproduced() -> None:
    ovh = {k: v.overhead_vs_on_demand * 100 for k, v in simulated("6.3").items()}
    assert abs(ovh["Adaptive"] - ovh["Per-33"]) < 0.3  # thesis: 12.25 vs 12.30
    for worse in ("Per-10", "Per-100"):
        assert ovh[worse] - max(ovh["Adaptive"], ovh["Per-33"]) > 3.0
    assert abs(ovh["Per-10"] - ovh["Per-100"]) < 0.5  # thesis: 17.09 vs 18.05 (see docs)
    # the cost saving the thesis headlines: ~58 % cheaper than on-demand
    sim = simulated("6.3")
    saving = 1 - sim["Adaptive"].cost_dollars / sim["On-demand"].cost_dollars
    assert saving == pytest.approx(1 - 1421.1 / 3408.3, abs=0.01)


@pytest.mark.parametrize("table", ["6.2", "6.3"])
def test_recompute_matches_closed_forms(table: str) -> None:
    """Simulator = renewal closed form; thesis = uniform-phase closed form (docs)."""
    config, policies = preset(table)
    sim = simulated(table)
    pub = {c.name: c for c in published_table(table)}
    d = derive_parameters(table)
    t, delta, beta = config.step_seconds.mean, config.ckpt_seconds.mean, config.backup_seconds.mean
    for policy in policies:
        if policy.kind != "static":
            continue
        r = sim[policy.name]
        ours = r.recompute_seconds / r.preemptions
        want = renewal_loss_seconds(
            policy.every, t, delta, beta, MTTP_SECONDS, config.prep_seconds.mean
        )
        assert ours == pytest.approx(want, rel=0.04), policy.name
        theirs = pub[policy.name].recompute / d.preemptions_by_column[policy.name]
        uniform = uniform_phase_loss_seconds(policy.every, t, delta, beta)
        # Table 6.2's Per-100 column is the one with a misprinted Comp. cell: 5 % there.
        tol = 0.06 if (table, policy.name) == ("6.2", "Per-100") else 0.015
        assert theirs == pytest.approx(uniform, rel=tol), policy.name
