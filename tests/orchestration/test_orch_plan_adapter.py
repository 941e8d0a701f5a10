"""The fleet_plan asset's adapter: statistics table -> ZoneStats -> fleet.planning."""

from __future__ import annotations

import math

import pandas as pd

from assets import fleet_adapter
from fleet.providers.base import NodeSession
from fleet.stats.forecast import forecast_zones
from fleet.stats.preemption import session_stats, zone_stats
from pipelines.config import EXAMPLE_PIPELINES, load_pipelines


def _sessions() -> list[NodeSession]:
    t = 1_700_000_000.0
    return [NodeSession(node_id=f"n{i}", stage="pretrain", attempt=1, provider="local", cloud="aws",
                        region="us-east-1", zone="us-east-1f", instance_type="p3.2xlarge", spot=True,
                        price_per_hour=0.918, launched_at=t + 100 * i, ready_at=t + 100 * i + 5,
                        ended_at=t + 100 * i + 60, end_reason="preempted" if i % 2 else "completed")
            for i in range(4)]


def test_plan_is_the_same_with_recorded_sessions_in_the_statistics_table():
    """Session rows (with their missing fields) must not change the trace statistics the planner sees."""
    [cfg] = load_pipelines(EXAMPLE_PIPELINES)
    market = cfg.market.model_dump()
    traces = fleet_adapter.market_traces(market)
    trace_rows = [s.to_dict() for s in zone_stats(traces)]
    only_traces = pd.DataFrame(trace_rows)
    mixed = pd.DataFrame(trace_rows + [s.to_dict() for s in session_stats(_sessions())])
    a = fleet_adapter.zone_stats_from_frame(only_traces)
    b = fleet_adapter.zone_stats_from_frame(mixed)
    assert [s.zone for s in a] == [s.zone for s in b] == sorted(t.zone for t in traces)
    for x, y in zip(a, b, strict=True):
        assert x.rate_per_hour == y.rate_per_hour and x.restart_latency_s is None and y.restart_latency_s is None
        assert not any(isinstance(v, float) and math.isnan(v) for v in (y.regain_mean_hours, y.mttp_hours))
    fc = forecast_zones(traces, None, 12.0, n_samples=200, seed=0)
    stage = {"name": "pretrain", "zones": [], "spot": True, "nodes": 1, "accelerator": "V100", "count": 1,
             "work_hours": 4.0}
    pa = fleet_adapter.plan_for_stage(stage, a, fc, market, 16.0, True)
    pb = fleet_adapter.plan_for_stage(stage, b, fc, market, 16.0, True)
    assert pa["use_spot"] and pb["use_spot"]
    assert pa["zones"] == pb["zones"] and pa["expected_cost"] == pb["expected_cost"]
