"""Trace loading errors, exact statistics on hand-made traces, real-trace statistics."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from fleet.market.traces import Trace, TraceFormatError, load_trace, load_trace_dir, save_trace
from fleet.providers.base import NodeSession
from fleet.stats.preemption import (
    rate_confidence_interval,
    session_stats,
    trace_stats,
    weighted_eviction_rate,
    weighted_eviction_rate_series,
    zone_correlation,
    zone_stats,
)

AVAIL = "spot-traces/availability/1-node/aws-02-15-2023"
PREEMPT = "spot-traces/preemption/1-node/aws-04-22-2023"


def _write(tmp_path, name, payload):
    p = tmp_path / name
    p.write_text(payload if isinstance(payload, str) else json.dumps(payload))
    return p


@pytest.mark.parametrize(
    ("name", "payload", "needle"),
    [
        ("us-east-1a_v100_1.json", '{"metadata": {"gap_seconds": 60}, "data": [1, 0', "not valid JSON"),
        ("us-east-1a_v100_1.json", {"metadata": {}, "data": [1]}, "gap_seconds"),
        ("us-east-1a_v100_1.json", {"metadata": {"gap_seconds": 60}, "data": [1, -2]}, "data[1]"),
        ("us-east-1a_v100_1.json", {"metadata": {"gap_seconds": 0}, "data": [1]}, "positive"),
        ("us-east-1a_v100_1.json", {"metadata": {"gap_seconds": 60}, "data": []}, "non-empty"),
        ("trace.json", {"metadata": {"gap_seconds": 60}, "data": [1]}, "file name"),
    ],
)
def test_loader_names_the_problem(tmp_path, name, payload, needle):
    p = _write(tmp_path, name, payload)
    with pytest.raises(TraceFormatError) as exc:
        load_trace(p)
    assert needle in str(exc.value)
    assert str(p) in str(exc.value)


def test_save_and_load_round_trip(tmp_path):
    t = Trace("us-west-2b", "V100", 2, 30.0, np.array([2, 1, 0, 2], dtype=np.int32))
    p = save_trace(t, tmp_path)
    back = load_trace_dir(tmp_path)[0]
    assert p.name == "us-west-2b_V100_2.json"
    assert back.count == 2 and back.gap_seconds == 30.0
    assert back.available.tolist() == [2, 1, 0, 2]
    assert back.up().tolist() == [True, False, False, True]


def _hand_trace():
    # gap 1800 s = 0.5 h; up 4 ticks, down 2, up 2, down 3, up 1
    data = [1, 1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 1]
    return Trace("us-east-1a", "V100", 1, 1800.0, np.array(data, dtype=np.int32))


def test_exact_stats_on_hand_made_trace():
    s = trace_stats(_hand_trace())
    assert s.preemptions == 2
    assert s.held_hours == pytest.approx(7 * 0.5)
    assert s.availability == pytest.approx(7 / 12)
    assert s.rate_per_hour == pytest.approx(2 / 3.5)
    assert s.mttp_hours == pytest.approx(1.75)
    # both down runs are complete: 1 h and 1.5 h
    assert s.regain_samples == 2
    assert s.regain_mean_hours == pytest.approx(1.25)
    assert s.regain_p50_hours == pytest.approx(1.25)
    assert s.instance_type == "p3.2xlarge"
    lo, hi = s.mttp_ci
    assert lo < s.mttp_hours < hi
    # hour profile: first preemption ends the held tick at 1.5-2.0 h -> hour 1
    assert s.hour_rate[1] > 0 and sum(1 for x in s.hour_rate if x > 0) == 2
    # GFS Eq. 15 at the end: no eviction in the last hour, 2 in the last 24 h
    assert s.eviction_rate_eq15 == pytest.approx(0.2 * 2 / 24)


def test_multi_node_trace_counts_instances():
    t = Trace("us-west-2a", "V100", 2, 3600.0, np.array([2, 1, 0, 2, 2, 1], dtype=np.int32))
    s = trace_stats(t)
    assert s.preemptions == 2  # the 2-node group is lost twice
    assert s.instances_lost == 3  # single instances reclaimed
    assert s.availability == pytest.approx(3 / 6)


def test_chi_square_interval_matches_scipy_formula():
    from scipy.stats import chi2

    lo, hi = rate_confidence_interval(10, 100.0, 0.9)
    assert lo == pytest.approx(chi2.ppf(0.05, 20) / 200)
    assert hi == pytest.approx(chi2.ppf(0.95, 22) / 200)
    lo0, hi0 = rate_confidence_interval(0, 50.0, 0.9)
    assert lo0 == 0.0 and hi0 == pytest.approx(chi2.ppf(0.95, 2) / 100)


def test_session_stats_restart_latency_and_regain():
    def sess(i, zone, launched, ready, ended, reason):
        return NodeSession(node_id=f"n{i}", stage="s", attempt=1, provider="local", cloud="aws",
                           region=zone[:-1], zone=zone, instance_type="p3.2xlarge", spot=True,
                           price_per_hour=0.918, launched_at=launched, ready_at=ready,
                           ended_at=ended, end_reason=reason)

    sessions = [
        sess(1, "us-east-1a", 0, 60, 3660, "preempted"),  # held 1 h
        sess(2, "us-east-1a", 7200, 7320, 14520, "completed"),  # held 2 h, back 1h+ later
        sess(3, "us-west-2b", 0, 30, 1830, "preempted"),
    ]
    st = {s.zone: s for s in session_stats(sessions)}
    a = st["us-east-1a"]
    assert a.preemptions == 1 and a.held_hours == pytest.approx(3.0)
    assert a.restart_latency_s == pytest.approx(90.0)
    assert a.regain_mean_hours == pytest.approx((7320 - 3660) / 3600)
    assert a.mttp_hours == pytest.approx(3.0)
    assert st["us-west-2b"].regain_samples == 0


def test_weighted_eviction_rate_eq15():
    events = [0.2, 10.0, 20.5, 23.6, 23.9]
    # short window (23, 24]: 2 events; long (0, 24]: 5 events
    assert weighted_eviction_rate(events, 24.0) == pytest.approx(0.8 * 2 + 0.2 * 5 / 24)
    assert weighted_eviction_rate(events, 24.0, gamma=1.0) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="gamma"):
        weighted_eviction_rate(events, 24.0, gamma=1.5)
    t = _hand_trace()
    series = weighted_eviction_rate_series(t, short_hours=1.0, long_hours=24.0)
    # at the end of tick 4 (first preemption) the 1 h window holds one eviction
    assert series[4] == pytest.approx(0.8 * 1 + 0.2 * 1 / 24)
    assert series[-1] == pytest.approx(0.8 * 0 + 0.2 * 2 / 24)


def test_real_availability_traces(shared_data):
    traces = load_trace_dir(shared_data / AVAIL)
    st = {s.zone: s for s in zone_stats(traces)}
    assert len(st) == 9
    assert st["us-east-1a"].availability == pytest.approx(0.17, abs=0.01)
    assert st["us-west-2b"].availability == pytest.approx(0.90, abs=0.01)
    # the reliable zone has the longest MTTP, well separated by the CIs
    assert st["us-west-2b"].mttp_ci[0] > st["us-east-1a"].mttp_ci[1]
    assert st["us-west-2b"].observed_hours == pytest.approx(45 * 24 * 1.011, rel=0.01)
    corr = zone_correlation(traces)
    assert corr.shape == (9, 9)
    # zones of one region are more correlated than zones of different regions
    assert corr.loc["us-east-1c", "us-east-1d"] > corr.loc["us-east-1c", "us-west-2b"] + 0.2


def test_real_preemption_traces(shared_data):
    st = {s.zone: s for s in zone_stats(load_trace_dir(shared_data / PREEMPT))}
    assert set(st) == {"us-east-1c", "us-east-1f", "us-west-2b", "us-west-2c"}
    assert all(s.preemptions > 30 for s in st.values())
    assert st["us-west-2b"].mttp_hours > st["us-east-1c"].mttp_hours
    assert all(math.isfinite(s.mttp_ci[1]) for s in st.values())


@pytest.mark.parametrize("k", [1, 2, 3, 7, 20, 55, 250, 1000])
def test_integer_gamma_inverse_matches_scipy(k):
    """The statistics asset computes the chi-square quantile without importing scipy (~0.5 s):
    the pure-Python inverse equals scipy.special.gammaincinv for event counts."""
    from scipy.special import gammaincinv

    from fleet.stats.preemption import gamma_inv_int

    for p in (0.001, 0.005, 0.025, 0.05, 0.1, 0.5, 0.9, 0.95, 0.975, 0.995, 0.999):
        assert gamma_inv_int(k, p) == pytest.approx(float(gammaincinv(k, p)), rel=1e-9), (k, p)
    with pytest.raises(ValueError, match="positive integer"):
        gamma_inv_int(0, 0.5)


def test_the_statistics_do_not_import_scipy():
    import subprocess
    import sys

    code = ("import sys; from fleet.stats.preemption import rate_confidence_interval as r; r(3, 10.0); "
            "print(any(m.startswith('scipy') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
