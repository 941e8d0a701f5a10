"""Recorded node sessions reach the forecast (Gamma-Poisson update of the up-run law) and
each stage's restart time R is its own (``ZoneStats.restart_latency_for``)."""

from __future__ import annotations

import inspect
import json

import numpy as np
import pytest

from fleet.market.prices import PriceBook
from fleet.market.traces import Trace
from fleet.planning.planner import StageRequest, plan_stage
from fleet.providers.base import NodeSession
from fleet.stats.forecast import (
    SESSION_PRIOR_HELD_HOURS,
    SessionEvidence,
    evaluate_forecasts,
    fit_models,
    forecast_zones,
    posterior_up_rate,
    trace_key,
)
from fleet.stats.preemption import session_stats, zone_stats


def _traces() -> list[Trace]:
    rng = np.random.default_rng(7)
    out = []
    for zone, p_fail in (("us-east-1a", 0.01), ("us-east-1b", 0.02), ("us-west-2a", 0.005)):
        up = np.ones(2000, dtype=np.int32)  # 10-min ticks, ~14 days
        for i in np.flatnonzero(rng.random(2000) < p_fail):
            up[i:i + 3] = 0
        up[-1] = 1
        out.append(Trace(zone, "V100", 1, 600.0, up))
    return out


def test_sessions_with_many_preemptions_raise_the_zone_forecast_and_leave_the_others_alone():
    traces = _traces()
    hot = traces[0]
    base = forecast_zones(traces, None, 12.0, n_samples=600, seed=3)
    ev = SessionEvidence(preemptions=20, held_hours=10.0)  # 2 / held h, the trace ~0.1 / h
    upd = forecast_zones(traces, None, 12.0, n_samples=600, seed=3, evidence={trace_key(hot): ev})
    b, u = base[0], upd[0]
    # the conjugate update, prior worth SESSION_PRIOR_HELD_HOURS held hours of the trace's law
    prior = fit_models([t.up() for t in traces], [t.gap_seconds / 3600 for t in traces],
                       kind="semi_markov_hod")[0].up_rate
    post = (prior * SESSION_PRIOR_HELD_HOURS + 20) / (SESSION_PRIOR_HELD_HOURS + 10.0)
    assert u.up_rate_prior == pytest.approx(prior) and u.up_rate_posterior == pytest.approx(post)
    assert post > 3 * prior
    assert u.session_preemptions == 20 and u.session_held_hours == 10.0
    assert u.prior_held_hours == SESSION_PRIOR_HELD_HOURS
    # the forecast itself moves: more preemptions, a higher rate, less availability
    assert u.preemptions_mean > 2 * b.preemptions_mean
    assert u.rate_per_held_hour > 2 * b.rate_per_held_hour
    # (over 12 h from a run 20 h old the rate stays below the long-run 1 / mean up-run: the
    # heavy-tailed law's hazard falls with age; the update rescales it, it keeps the shape)
    assert u.availability_mean < b.availability_mean
    assert u.preemptions_mean_without_sessions == b.preemptions_mean
    # zones without sessions: bit for bit what they get without any evidence
    assert upd[1:] == base[1:]
    assert all(f.up_rate_posterior is None and f.session_held_hours == 0.0 for f in upd[1:])
    json.dumps(u.to_dict())


def test_quiet_sessions_lower_the_rate_and_empty_evidence_changes_nothing():
    traces = _traces()
    busy = traces[1]
    base = forecast_zones(traces, None, 12.0, n_samples=600, seed=3)
    quiet = forecast_zones(traces, None, 12.0, n_samples=600, seed=3,
                           evidence={trace_key(busy): SessionEvidence(0, 48.0)})
    assert quiet[1].up_rate_posterior < quiet[1].up_rate_prior / 2
    assert quiet[1].preemptions_mean < base[1].preemptions_mean
    # no held time: nothing to update with
    none = forecast_zones(traces, None, 12.0, n_samples=600, seed=3,
                          evidence={trace_key(busy): SessionEvidence(0, 0.0)})
    assert none == base
    with pytest.raises(ValueError, match="prior_held_hours"):
        posterior_up_rate(0.1, SessionEvidence(1, 1.0), prior_held_hours=0.0)


def test_forecast_evaluation_sees_no_sessions():
    """The evaluation scores the trace-fitted law only: it has no way to receive sessions,
    which could come from its held-back future (a session has no tick on the trace)."""
    params = inspect.signature(evaluate_forecasts).parameters
    assert "evidence" not in params and not any("session" in p for p in params)
    assert "evidence" in inspect.signature(forecast_zones).parameters


def _session(i: int, stage: str, zone: str, ready_after: float, held: float, reason: str,
             spot: bool = True) -> NodeSession:
    t = 1.0e9 + 10_000 * i
    return NodeSession(node_id=f"n{i}", stage=stage, attempt=1, provider="local", cloud="aws",
                       region=zone[:-1], zone=zone, instance_type="p3.2xlarge", spot=spot,
                       price_per_hour=0.918, launched_at=t, ready_at=t + ready_after,
                       ended_at=t + ready_after + held, end_reason=reason)


def test_session_stats_count_spot_exposure_and_r_per_stage():
    ss = [_session(0, "pretrain", "us-east-1a", 600.0, 1800.0, "preempted"),
          _session(1, "pretrain", "us-east-1a", 500.0, 1800.0, "preempted"),
          _session(2, "finetune", "us-east-1a", 20.0, 3600.0, "completed"),
          _session(3, "finetune", "us-east-1a", 40.0, 7200.0, "completed", spot=False)]
    [st] = session_stats(ss)
    assert st.held_hours == pytest.approx(1.0 + 1.0 + 2.0)  # every session held capacity
    assert st.spot_held_hours == pytest.approx(2.0) and st.spot_preemptions == 2  # on-demand: no exposure
    assert st.restart_latency_s == pytest.approx((600 + 500 + 20 + 40) / 4)
    assert dict(st.restart_latency_by_stage) == {"pretrain": 550.0, "finetune": 30.0}
    assert st.restart_latency_for("pretrain") == (550.0, "stage")
    assert st.restart_latency_for("eval") == (pytest.approx(290.0), "zone")
    json.dumps(st.to_dict())


def test_each_stage_is_scored_with_the_restart_time_of_its_own_sessions():
    """R is launch -> ready, restore included: a stage restoring a big model and one
    restoring a small one in the same zone were both scored with the zone's mean R."""
    traces = _traces()
    ss = [_session(0, "pretrain", "us-east-1a", 900.0, 3600.0, "completed"),
          _session(1, "pretrain", "us-east-1a", 900.0, 3600.0, "completed"),
          _session(2, "finetune", "us-east-1a", 30.0, 3600.0, "completed"),
          _session(3, "pretrain", "us-east-1b", 120.0, 3600.0, "completed")]
    stats = zone_stats(traces) + session_stats(ss)

    def plan(name: str) -> dict[str, tuple[float, str]]:
        req = StageRequest(work_hours=4.0, name=name)
        p = plan_stage(req, stats, None, PriceBook.default())
        return {z.zone: (z.restart_hours * 3600.0, z.restart_source) for z in p.zones}

    pre, fine = plan("pretrain"), plan("finetune")
    assert pre["us-east-1a"] == (pytest.approx(900.0), "stage")
    assert fine["us-east-1a"] == (pytest.approx(30.0), "stage")  # the old rule: 610 s for both
    # no session of the stage in the zone: the zone's all-stage mean, then the default
    assert fine["us-east-1b"] == (pytest.approx(120.0), "zone")
    default_s = StageRequest(work_hours=1.0).restart_hours * 3600.0
    assert pre["us-west-2a"] == (pytest.approx(default_s), "default")


def test_injected_preemptions_are_exposure_not_market_preemptions():
    """A fault injection (``inject_preemptions_at_steps``) ends a session like a preemption;
    the market's statistics, and so the forecast's session update, count only the market's."""
    import dataclasses

    market = _session(0, "pretrain", "us-east-1a", 60.0, 1800.0, "preempted")
    injected = dataclasses.replace(_session(1, "pretrain", "us-east-1a", 60.0, 1800.0, "preempted"),
                                   injected=True)
    done = _session(2, "pretrain", "us-east-1a", 60.0, 3600.0, "completed")
    [st] = session_stats([market, injected, done])
    assert st.held_hours == pytest.approx(2.0) and st.spot_held_hours == pytest.approx(2.0)
    assert st.preemptions == 1 and st.spot_preemptions == 1 and st.injected_preemptions == 1
    assert st.rate_per_hour == pytest.approx(0.5)  # the old count: 2 preemptions, 1.0 / h
    assert st.regain_samples == 1  # an injection says nothing about capacity coming back
