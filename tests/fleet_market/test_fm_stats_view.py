"""What an analyst reads of the preemption statistics (the ``preemption_stats`` asset's
``table``): rate, MTTP with its confidence interval, availability, regain time and R, each
equal to a hand computation from the records, and never ``nan`` / ``inf``."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fleet.market.traces import Trace
from fleet.providers.base import NodeSession
from fleet.stats.preemption import session_stats, stats_rows, trace_stats

T0 = 1_699_920_000.0


def _session(node: str, zone: str, start: float, hours: float, reason: str) -> NodeSession:
    return NodeSession(node_id=node, stage="pretrain", attempt=1, provider="skypilot", cloud="aws",
                       region=zone[:-1], zone=zone, instance_type="p3.2xlarge", spot=True,
                       price_per_hour=0.918, launched_at=start, ready_at=start + 90.0,
                       ended_at=start + hours * 3600.0, end_reason=reason)


def test_the_table_shows_the_mttp_ci_and_no_nan_or_inf():
    # a trace: up 3 ticks, down 1, up 2, down 1, up 3 (hourly ticks): 2 preemptions in 8 held h
    up = [1, 1, 1, 0, 1, 1, 0, 1, 1, 1]
    trace = Trace(zone="us-east-1f", cloud="aws", accelerator="v100", count=1, gap_seconds=3600.0,
                  available=np.asarray(up))
    # sessions: one zone with no preemption (MTTP does not exist, its CI lower bound does)
    sessions = [_session("n0", "us-west-2b", T0, 2.0, "completed"),
                _session("n1", "us-west-2b", T0 + 3 * 3600.0, 1.0, "completed")]
    stats = [trace_stats(trace), *session_stats(sessions)]
    rows = stats_rows(stats)
    tr, se = rows
    # by hand: 8 held hours, 2 preemptions; chi-square 90 % interval of the rate
    chi2 = pytest.importorskip("scipy.stats").chi2
    held = 8.0
    lo_rate, hi_rate = chi2.ppf(0.05, 4) / (2 * held), chi2.ppf(0.95, 6) / (2 * held)
    assert tr["rate_per_hour"] == f"{2 / held:.4g}" and tr["mttp_hours"] == f"{held / 2:.4g}"
    assert tr["mttp_ci90_hours"] == f"{1 / hi_rate:.4g}-{1 / lo_rate:.4g}"
    assert tr["availability"] == f"{8 / 10:.4g}" and tr["regain_mean_hours"] == "1"
    assert tr["restart_latency_s"] == "not in traces"
    # sessions: held = ended - ready (2 h - 90 s, 1 h - 90 s); no preemption: MTTP >= T / -ln(0.05)
    held_s = (2.0 + 1.0) * 3600.0 - 2 * 90.0
    assert se["held_hours"] == f"{held_s / 3600:.4g}"
    assert se["availability"] == f"{held_s / (4 * 3600.0):.4g}"  # held / span (first launch to last end)
    assert se["mttp_hours"] == f"none in {held_s / 3600:.4g} h"
    assert se["mttp_ci90_hours"] == f">= {held_s / 3600 / -math.log(0.05):.4g}"
    assert se["restart_latency_s"] == "90" and se["regain_mean_hours"] == "not observed"
    text = " ".join(str(v) for r in rows for v in r.values()).lower()
    assert "nan" not in text.split() and "inf" not in text.split()
