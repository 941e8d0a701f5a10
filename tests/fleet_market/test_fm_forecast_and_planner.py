"""Forecast vs baselines on held-back real traces; the planner's choices and reasons."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from fleet.market.prices import PriceBook
from fleet.market.traces import Trace, load_trace_dir
from fleet.planning.planner import StageRequest, plan_stage
from fleet.stats.forecast import crps_samples, evaluate_forecasts, forecast_zones, pinball
from fleet.stats.preemption import zone_stats

AVAIL = "spot-traces/availability/1-node/aws-02-15-2023"
PREEMPT = "spot-traces/preemption/1-node/aws-04-22-2023"


def test_scores():
    assert crps_samples(np.array([0.3]), 0.5) == pytest.approx(0.2)
    # CRPS of a two-point ensemble {0, 1} at y = 0: E|X-y| = 0.5, E|X-X'| = 0.5 -> 0.25
    assert crps_samples(np.array([0.0, 1.0]), 0.0) == pytest.approx(0.25)
    assert pinball([0.5, 0.5, 0.5], 0.5) == 0.0
    assert pinball([0.0], 1.0, qs=[0.9]) == pytest.approx(0.9)


def test_forecast_conditions_on_state():
    up = np.r_[np.ones(200), np.zeros(10), np.ones(300), np.zeros(5), np.ones(100)].astype(np.int32)
    t = Trace("us-east-1a", "V100", 1, 600.0, up)
    f_up = forecast_zones([t], len(up), 2.0, n_samples=500)[0]
    f_down = forecast_zones([t], 205, 2.0, n_samples=500)[0]
    assert f_up.state_up and not f_down.state_up
    assert f_up.availability_mean > f_down.availability_mean
    assert f_up.availability_p10 <= f_up.availability_p50 <= f_up.availability_p90
    assert len(f_up.p_up_hourly) == 2
    json.dumps(f_up.to_dict())
    with pytest.raises(ValueError, match="now_tick"):
        forecast_zones([t], 10_000, 2.0)


@pytest.mark.parametrize("subset", [AVAIL, PREEMPT])
def test_forecast_beats_baselines_on_held_back_data(shared_data, subset):
    traces = load_trace_dir(shared_data / subset)
    step = 3.0 if subset == AVAIL else 2.0  # ~1000 and 100 origins
    df = evaluate_forecasts(traces, horizon_hours=6.0, train_fraction=0.7, step_hours=step,
                            n_samples=150)
    mean = df.groupby("model")[["crps", "brier", "pinball"]].mean()
    best = "semi_markov_hod"  # the default forecast
    for base in ("persistence", "historical_mean", "climatology"):
        for score in ("crps", "brier", "pinball"):
            assert mean.loc[best, score] < mean.loc[base, score], (base, score)
    # duration dependence and the hour-of-day profile both matter
    assert mean.loc[best, "crps"] < mean.loc["semi_markov", "crps"] < mean.loc["markov", "crps"]
    assert (df[df.model == best].n > 20).all()


def test_hour_of_day_profile_moves_the_forecast():
    """Preemptions only at 18:00-19:00 UTC: the forecast from 17:00 expects more of them."""
    from fleet.stats.forecast import hour_profile

    gap = 600.0
    ticks_per_day = 144
    day = np.ones(ticks_per_day, dtype=np.int32)
    day[18 * 6 + 1: 18 * 6 + 3] = 0  # 20 min down just after 18:00, every day
    up = np.tile(day, 30)
    t = Trace("us-east-1a", "V100", 1, gap, up)
    prof = hour_profile(t.up(), gap / 3600.0)
    assert prof[18] == pytest.approx(prof.max()) and prof[6] < 0.2  # 3-h smoothing: 17-19 high
    before = forecast_zones([t], 29 * ticks_per_day + 17 * 6, 2.0, n_samples=400)[0]
    after = forecast_zones([t], 29 * ticks_per_day + 19 * 6, 2.0, n_samples=400)[0]
    assert before.state_up and after.state_up
    assert before.preemptions_mean > after.preemptions_mean + 0.3
    assert before.model == "semi_markov_hod"


def _const_trace(zone, period_ticks, down_ticks, n=4000, gap=600.0):
    """Up for period_ticks, down for down_ticks, repeated: exact rate and availability."""
    cyc = np.r_[np.ones(period_ticks), np.zeros(down_ticks)]
    data = np.resize(cyc, n).astype(np.int32)
    return Trace(zone, "V100", 1, gap, data)


def test_planner_picks_cheap_reliable_zone_and_diversifies():
    traces = [_const_trace("us-east-1a", 6, 6),     # preempted every hour, 50% available
              _const_trace("us-east-1c", 60, 6),    # every 10 h
              _const_trace("us-west-2a", 120, 3),   # every 20 h
              _const_trace("us-west-2b", 90, 3)]    # every 15 h
    stats = zone_stats(traces)
    prices = PriceBook.default({"spot": {"p3.2xlarge": {"us-west-2b": 0.70}}})
    req = StageRequest(work_hours=20, deadline_hours=30, ckpt_hours=1 / 60, restart_hours=0.1)
    plan = plan_stage(req, stats, None, prices)
    # us-west-2b is cheaper at a slightly higher rate: lower c_eff wins
    assert plan.failover_order[0] == "us-west-2b"
    assert plan.failover_order[1] == "us-west-2a"
    assert plan.failover_order[-1] == "us-east-1a"
    assert plan.spot_nodes == 1 and plan.on_demand_nodes == 0
    assert plan.expected_cost < plan.on_demand_cost
    assert plan.meets_deadline is True
    assert plan.fallback_slack_hours == pytest.approx(1 / 60 + 0.1 + 0.25)
    assert any("c_eff" in r for r in plan.reasons)
    d = json.loads(plan.to_json())
    assert d["zones"][0]["zone"] == "us-west-2b"

    multi = plan_stage(StageRequest(work_hours=20, deadline_hours=30, num_nodes=4,
                                    diversify_tolerance=0.5), stats, None, prices)
    used = [z for z in multi.zones if z.nodes]
    assert len(used) >= 2 and sum(z.nodes for z in used) == 4
    assert "us-east-1a" not in [z.zone for z in used]
    # spreading lowers the variance of nodes lost per hour (the playbook's zone exercise)
    assert multi.variance_nodes_lost_per_hour < multi.variance_by_zone_count[1]
    assert any("variance" in r for r in multi.reasons)


def test_planner_rejects_zones_where_spot_loses_and_falls_back():
    bad = _const_trace("us-east-1a", 1, 1)  # 3 preemptions per hour
    stats = zone_stats([bad])
    plan = plan_stage(StageRequest(work_hours=5, deadline_hours=8), stats, None,
                      PriceBook.default())
    assert plan.spot_nodes == 0 and plan.on_demand_nodes == 1
    assert plan.rejected and "break-even" in plan.rejected[0]["reason"]
    assert plan.expected_cost == pytest.approx(5 * 3.06)

    ok = zone_stats([_const_trace("us-west-2b", 12, 12)])  # 50% available
    tight = plan_stage(StageRequest(work_hours=10, deadline_hours=11), ok, None,
                       PriceBook.default())
    assert tight.meets_deadline is True
    assert tight.latest_switch_hour == pytest.approx(11 - 10 - (1 / 60 + 0.1 + 0.25))
    assert tight.expected_cost > 0.918 * 10  # part of it on on-demand
    with pytest.raises(ValueError, match="deadline"):
        StageRequest(work_hours=10, deadline_hours=9)


def test_planner_uses_forecast_on_real_traces(shared_data):
    traces = load_trace_dir(shared_data / AVAIL)
    stats = zone_stats(traces)
    fc = forecast_zones(traces, None, 12.0, n_samples=300)
    plan = plan_stage(StageRequest(work_hours=24, deadline_hours=36), stats, fc,
                      PriceBook.default())
    assert plan.failover_order[0].startswith("us-west-2")
    assert plan.failover_order[-1] in ("us-east-1a", "us-east-1c")
    assert 0 < plan.savings_fraction < 0.75
    assert math.isfinite(plan.expected_completion_hours)


def test_variance_by_zone_count_is_the_playbook_exercise():
    """Equal zones: Var(nodes lost/h) = K^2 p (1-p) / z, as checkpointing.costmodel says."""
    from checkpointing.costmodel import zone_loss_stats

    zones = ["us-east-1a", "us-east-1b", "us-west-2a", "us-west-2b"]
    stats = zone_stats([_const_trace(z, 60, 6) for z in zones])
    plan = plan_stage(StageRequest(work_hours=10, num_nodes=4, diversify_tolerance=0.01),
                      stats, None, PriceBook.default())
    p = 1 - math.exp(-stats[0].rate_per_hour)
    for z in (1, 2, 4):
        assert plan.variance_by_zone_count[z] == pytest.approx(
            zone_loss_stats(4, z, p).variance_lost_per_hour)
    assert [z.nodes for z in plan.zones] == [1, 1, 1, 1]
    assert plan.mean_nodes_lost_per_hour == pytest.approx(zone_loss_stats(4, 4, p).mean_lost_per_hour)


def test_planner_prices_from_skypilot_with_proxy_stats(shared_data, tmp_path):
    """A10G has no traces: zone statistics of the V100 stand in, prices come from SkyPilot."""
    book = PriceBook.from_skypilot(shared_data / "skypilot-catalog-v8", home_dir=tmp_path)
    zones = ["us-east-1a", "us-east-2b", "us-west-2a"]
    stats = zone_stats([_const_trace(z, 60, 6) for z in zones])  # identical markets
    plan = plan_stage(StageRequest(work_hours=10, accelerator="A10G"), stats, None, book)
    assert plan.instance_type == "g5.4xlarge"
    # same reliability everywhere: the cheapest spot quote (us-west-2a 0.5516 $/h) wins
    assert plan.failover_order == ["us-west-2a", "us-east-2b", "us-east-1a"]
    assert plan.zones[0].spot_price == pytest.approx(0.5516)
    assert plan.on_demand_price == pytest.approx(1.624)
    assert any("stand in" in r for r in plan.reasons)


def test_planner_without_any_price_says_so_instead_of_inf():
    # `spotfleet plan ../shared/data/gcp-h100-2025 --accelerator H100` (no H100 in the
    # default prices) printed "expected cost inf $ vs on-demand inf $" and "no zone where
    # spot beats on-demand", hiding the per-zone "no price" rejections
    traces = [Trace("us-central1-a", "H100", 1, 600.0, np.resize([1] * 30 + [0] * 3, 600)),
              Trace("us-east4-a", "H100", 1, 600.0, np.resize([1] * 60 + [0] * 3, 600))]
    plan = plan_stage(StageRequest(work_hours=8, deadline_hours=12, accelerator="H100"),
                      zone_stats(traces), None, PriceBook.default())
    assert plan.spot_nodes == 0 and len(plan.rejected) == 2
    text = plan.explain()
    assert "inf" not in text and "expected cost unknown (no price)" in text
    assert "no zone has a spot price for H100" in text
    assert "no zone where spot beats on-demand" not in text
    assert "rejected us-central1-a: no price" in text and "rejected us-east4-a: no price" in text


def test_a_plan_from_empty_statistics_says_so_and_what_to_do():
    """An empty statistics table (a stale or failed preemption_stats) plans on-demand only and
    says why, instead of "each zone's  statistics stand in" and "no on-demand price in any
    region" (outside audit, session 16)."""
    req = StageRequest(work_hours=20, deadline_hours=30, ckpt_hours=1 / 60, restart_hours=0.1)
    plan = plan_stage(req, [], None, PriceBook.default())
    assert plan.spot_nodes == 0 and plan.on_demand_nodes == req.num_nodes
    text = " ".join(plan.reasons)
    assert "no preemption statistics for any zone" in text and "rebuild preemption_stats" in text
    assert "statistics stand in" not in text and "no on-demand price" not in text


def test_forecast_evaluation_fits_every_zone_before_one_common_time():
    """A sparse zone borrows every zone's training runs (pooling). With traces of different
    lengths each was split at 70 % of its OWN length, so the short zone's pooled model held
    runs of the long zone observed after the short zone's forecast origins: changing the
    long trace after that time changed the short zone's scores (outside audit probe)."""
    import pandas as pd

    rng = np.random.default_rng(3)

    def alternating(n_runs):
        return np.concatenate([np.r_[np.ones(int(rng.integers(5, 40))), np.zeros(int(rng.integers(1, 6)))]
                               for _ in range(n_runs)]).astype(np.int32)

    short = np.r_[np.ones(300), np.zeros(20), np.ones(400), np.zeros(10), np.ones(300)].astype(np.int32)
    long_up = alternating(200)
    n = short.size
    assert long_up.size > 2 * n
    changed = long_up.copy()
    changed[int(0.7 * n) + 1:] = 1 - changed[int(0.7 * n) + 1:]  # another world after the short split
    scores = []
    for other in (long_up, changed):
        traces = [Trace("us-east-1a", "V100", 1, 600.0, short), Trace("us-east-1b", "V100", 1, 600.0, other)]
        df = evaluate_forecasts(traces, horizon_hours=2.0, step_hours=4.0, n_samples=100, seed=0)
        scores.append(df[df.zone == "us-east-1a"].set_index("model")[["crps", "brier", "pinball"]])
    pd.testing.assert_frame_equal(scores[0], scores[1])
