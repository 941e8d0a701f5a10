"""``benchmarks/bench_fleet_sim.py --candidate``: a spotfleet variant measured beside v5
in the same sweep is never a baseline, and the default tables do not change."""

from __future__ import annotations

import numpy as np
import pytest

from fleet.market.regimes import regime_market, volatile_config
from fleet.policies.baselines import builtin_policy_factories
from fleet.policies.spotfleet import SpotfleetParams, SpotfleetPolicy
from fleet.simulation.families import (
    Cell,
    Family,
    best_baseline,
    candidate_factories,
    family_table,
    goal_table,
    run_family,
)


def _tiny(data, n):
    return [(regime_market(volatile_config(hours=24.0 * 3), 3), None)]


def test_candidate_columns_are_not_baselines_and_leave_the_default_tables_alone():
    fam = Family("tiny", "tiny volatile", 2.0, 5.0, 24.0, _tiny, spot_price=1.0, on_demand_price=3.4)
    base = {k: v for k, v in builtin_policy_factories().items()
            if k in ("on_demand", "failover", "spotfleet")}
    cand = candidate_factories(["res:own_runs=switch_emp", "cheap:patience=0.5"])
    assert list(cand) == ["candidate:res", "candidate:cheap"]
    assert cand["candidate:res"]().p.own_runs == "switch_emp"
    assert cand["candidate:cheap"]().p.patience == 0.5
    cells = run_family(fam, None, {**base, **cand}, 2, [1.5], [0.0])
    plain = run_family(fam, None, base, 2, [1.5], [0.0])
    (c,), (p,) = cells, plain
    assert c.costs["candidate:res"].size == 2
    np.testing.assert_array_equal(c.costs["spotfleet"], p.costs["spotfleet"])
    # a candidate cheaper than every baseline still is not the best baseline
    fake = Cell(c.family, c.ratio, c.notice, c.omniscient, blocks=c.blocks)
    fake.costs = {**c.costs, "candidate:res": c.costs["failover"] * 0.01}
    fake.met = dict(c.met)
    assert best_baseline(fake) == "failover"
    assert goal_table([fake]) == goal_table(plain)
    assert "candidate:res (not a baseline) / best" in goal_table([fake], "candidate:res")
    rows = family_table(cells, 0.0).splitlines()
    assert [r for r in rows if not r.startswith("| candidate:")] == \
        family_table(plain, 0.0).splitlines()
    assert sum(r.startswith("| candidate:") for r in rows) == 2


@pytest.mark.parametrize("bad", ["noparams", "x:", ":patience=1", "x:nosuchfield=1", "x:patience"])
def test_candidate_strings_are_checked(bad):
    with pytest.raises(ValueError):
        candidate_factories([bad])


def test_candidate_policy_is_spotfleet():
    (f,) = candidate_factories(["a:own_runs=switch"]).values()
    assert isinstance(f(), SpotfleetPolicy)


def test_params_from_assignments_converts_each_field_to_its_type():
    p = SpotfleetParams.from_assignments(["patience=0.5", "own_runs=switch"])
    assert p == SpotfleetParams(patience=0.5, own_runs="switch")
    assert isinstance(p.patience, float)
    assert SpotfleetParams.from_assignments([]) == SpotfleetParams()
    with pytest.raises(ValueError, match="'patiense=1' is not a SpotfleetParams field=value"):
        SpotfleetParams.from_assignments(["patiense=1"])


def test_candidate_table_pairs_the_candidate_with_spotfleet_start_by_start():
    from fleet.simulation.families import candidate_table

    om = np.array([10.0, 20.0, 30.0])
    c = Cell("fam", 1.5, 120.0, om)
    c.costs = {"spotfleet": np.array([11.0, 22.0, 33.0]), "candidate:same": np.array([11.0, 22.0, 33.0]),
               "candidate:half": np.array([5.5, 11.0, 16.5])}
    rows = candidate_table([c], "candidate:same").splitlines()
    assert rows[2] == "| fam | 1.5 | 120 | 1.100 | 1.100 | 1.0000 [1.0000, 1.0000] | - |"
    assert candidate_table([c], "candidate:half").splitlines()[2].endswith(
        "| 1.100 | 0.550 | 0.5000 [0.5000, 0.5000] | - |")


def test_tuning_set_shift_family_uses_its_own_seeds_and_window():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import fleet_tuning_set as ts

    from fleet.simulation.families import FAMILIES, SHIFT_LAST_START_HOURS

    plan = ts.tuning_plan("shift", 1.5)
    assert sorted({seed for _, _, seed in plan}) == [80, 81, 82, 83, 84]
    assert len(plan) == 40
    fam = FAMILIES["shift_holdout70"]
    for m, s, _ in plan:
        assert fam.warmup_hours <= s * m.gap_hours < SHIFT_LAST_START_HOURS
    assert ts.family_of("shift") is fam and ts.family_of("v100") is FAMILIES["v100"]
    # the 8 starts of a seed lie within 9 h and share their 18 h deadlines: one block per
    # seed, 5 in all, so the tuning set's block interval is over 5 markets, not 40 starts
    blocks = ts.plan_blocks(plan, fam.spec(1.5, 0.0).deadline_hours)
    assert blocks.tolist() == [k for k in range(5) for _ in range(8)]


def test_the_sweeps_policy_list_is_checked_before_it_runs():
    """``bench_fleet_sim.py --policies`` / ``--candidate``: an unknown name, or a candidate with
    nothing to compare it with, is refused up front (it used to be dropped silently, or to
    crash after the whole sweep); a list without a baseline runs without goal tables."""
    from fleet.policies.baselines import builtin_policy_factories
    from fleet.simulation.families import candidate_factories, has_baseline, select_policies

    f = builtin_policy_factories()
    with pytest.raises(ValueError, match="unknown failovr; known: .*failover"):
        select_policies(f, "spotfleet,failovr", {})
    cand = candidate_factories(["v6:model_check=off"])
    with pytest.raises(ValueError, match="--candidate compares with spotfleet"):
        select_policies(f, "failover", cand)
    only = select_policies(f, "spotfleet", cand)
    assert list(only) == ["spotfleet", "candidate:v6"] and not has_baseline(list(only))
    assert has_baseline(list(select_policies(f, "spotfleet,failover", {})))
    assert list(select_policies(f, "", {})) == list(f)
