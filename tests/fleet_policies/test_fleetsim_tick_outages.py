"""What v6's own-evidence model reads differently at a finer tick (session 11, tick diagnosis;
docs/fleet-policies.md, *Tick length*): the outages it records from a launch that is preempted
before its next decision, and H1's prior ``b`` (one tick). The opt-in
``SpotfleetParams.outage_end="launch"`` and ``h1_prior_seconds`` make both the same at every
tick; v6's defaults are unchanged."""

from __future__ import annotations

import numpy as np
import pytest

from fleet.policies.base import JobSpec, Observation
from fleet.policies.spotfleet import SpotfleetParams, SpotfleetPolicy
from fleet.simulation.engine import simulate
from fleet.simulation.market import Market

HIST = 240  # 20 h of 300 s ticks before the job


def _market() -> Market:
    """One zone, calm before the job (one down tick every 2 h); during the job down for 1 h,
    up for one tick, down for 1 h, then up."""
    up = np.ones((1, HIST + 400), dtype=bool)
    up[0, 12:HIST:24] = False
    up[0, HIST:HIST + 12] = False          # 1 h outage at the job's start
    up[0, HIST + 13:HIST + 25] = False     # one tick up (HIST + 12), then 1 h down again
    return Market(zones=("us-east-1a",), gap_seconds=300.0, available=up, regions=("us-east-1",),
                  clouds=("aws",), on_demand_price=np.array([3.4]))


def _outages(params: SpotfleetParams, factor: int) -> list[float]:
    """The closed outages (h) the policy recorded for zone 0 on the market at ``factor`` x
    finer tick."""
    m = _market().refined(factor)
    spec = JobSpec(work_hours=6.0, deadline_hours=12.0, notice_seconds=120.0)
    pol = SpotfleetPolicy(params)
    simulate(pol, m, spec, HIST * factor)
    return [h for h, closed in pol._spells[0] if closed]


def test_v6_merges_the_outages_around_a_one_tick_hold_at_the_coarse_tick_only():
    coarse, fine = _outages(SpotfleetParams(), 1), _outages(SpotfleetParams(), 3)
    # 300 s: the launch at the one up tick is preempted at the next tick, where the job's
    # next decision sees the zone down again: one outage of about 2 h
    assert len(coarse) == 1 and coarse[0] > 2.0
    # 100 s: the decision one tick after the launch sees the zone up: two outages of about 1 h
    assert len(fine) == 2 and all(1.0 <= h < 1.1 for h in fine)


def test_outage_end_launch_records_the_same_outages_at_both_ticks():
    p = SpotfleetParams(outage_end="launch")
    coarse, fine = _outages(p, 1), _outages(p, 3)
    assert coarse == pytest.approx([1.0, 1.0]) and fine == pytest.approx([1.0, 1.0])
    assert SpotfleetParams().outage_end == "seen"


def _reset(params: SpotfleetParams, gap: float) -> SpotfleetPolicy:
    hist = np.ones((2, 200), dtype=bool)
    hist[0, ::20] = False
    pol = SpotfleetPolicy(params)
    pol.reset(JobSpec(6.0, 12.0), Observation(
        tick=199, gap_hours=gap, zones=("a", "b"), available=hist[:, -1], history=hist,
        spot_price=np.array([1.0, 1.5]), on_demand_price=np.array([3.4, 3.4])))
    return pol


def test_h1_prior_seconds_is_the_same_b_at_every_tick():
    obs = Observation(tick=200, gap_hours=1 / 36, zones=("a", "b"), available=np.ones(2, bool),
                      history=np.ones((2, 201), bool), spot_price=np.array([1.0, 1.5]),
                      on_demand_price=np.array([3.4, 3.4]))
    for gap in (1 / 36, 1 / 12, 1 / 6):
        v6 = _reset(SpotfleetParams(), gap)
        assert v6._h1_b(obs) == pytest.approx([obs.gap_hours] * 2)  # v6: one tick (the obs's)
        cand = _reset(SpotfleetParams(h1_prior_seconds=300.0), gap)
        assert cand._h1_b(obs) == pytest.approx([300 / 3600] * 2)
        assert cand._h1_b(obs, down=True) == pytest.approx([300 / 3600] * 2)


def test_the_opt_in_fields_refuse_what_they_cannot_do():
    with pytest.raises(ValueError, match="outage_end 'x'"):
        _reset(SpotfleetParams(outage_end="x"), 1 / 12)
    with pytest.raises(ValueError, match="outage_end='launch' needs zone_model"):
        _reset(SpotfleetParams(outage_end="launch", zone_model="changepoint_emp"), 1 / 12)
    with pytest.raises(ValueError, match="h1_prior_seconds and h1_rate_ratio"):
        _reset(SpotfleetParams(h1_prior_seconds=300.0, h1_rate_ratio=24.0), 1 / 12)


def test_tick_bench_runs_one_cell_with_a_candidate_column(monkeypatch):
    """``benchmarks/fleet_tick_sensitivity.py --ratios --notices --candidate``: only that cell,
    and a candidate column that is not a baseline (spotfleet's own column is unchanged)."""
    import importlib.util
    from pathlib import Path

    from fleet.market.regimes import regime_market, volatile_config
    from fleet.simulation.families import Family, candidate_factories

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "fleet_tick_sensitivity.py"
    spec = importlib.util.spec_from_file_location("fleet_tick_sensitivity", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    fam = Family("tiny", "tiny volatile", 2.0, 5.0, 24.0,
                 lambda data, n: [(regime_market(volatile_config(hours=24.0 * 3), 3), None)],
                 spot_price=1.0, on_demand_price=3.4)
    monkeypatch.setitem(mod.FAMILIES, "tiny", fam)
    cand = candidate_factories(["both:h1_prior_seconds=300,outage_end=launch"])
    plain = mod.run_family("tiny", 2, 2, lambda _: None, (2.0,), (120.0,))
    rows = mod.run_family("tiny", 2, 2, lambda _: None, (2.0,), (120.0,), cand)
    assert len(plain) == len(rows) == 1
    assert "candidate:both" in rows[0] and "candidate" not in plain[0]
    assert rows[0].startswith(plain[0])  # the same cells, one column more
