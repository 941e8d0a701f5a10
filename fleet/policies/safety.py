"""Deadline arithmetic shared by the deadline-aware policies (pure functions, hours).

The "safety net" (Can't Be Late, NSDI'24): once the slack left would not survive one
more tick of risk plus a relaunch on on-demand, go on-demand and finish there.

With committed progress ``P`` the job can still finish on on-demand iff
``remaining_time - (W - P) >= d`` (one restart). Staying one more tick on spot (or
idle) risks losing the uncommitted work without notice (only the save time with a
usable notice) and spends one tick, so the job may stay off on-demand iff::

    slack(P_safe) >= d + gap + margin

where ``P_safe`` is the progress that survives a preemption at the next boundary.
"""

from __future__ import annotations

import math

from fleet.policies.base import JobState

SAFETY_EPS_HOURS = 1e-6


def safe_progress_hours(state: JobState) -> float:
    """Progress that survives a preemption at the next tick boundary (h)."""
    if state.location >= 0 and state.overhead_left_hours <= 0 and state.spec.notice_saves:
        return state.committed_hours + max(0.0, state.uncommitted_hours - state.spec.checkpoint_hours)
    if state.location < 0:  # idle or on-demand: nothing at risk
        return state.committed_hours + (state.uncommitted_hours if state.location == -1 else 0.0)
    return state.committed_hours


def safe_slack_hours(state: JobState) -> float:
    """Remaining time minus remaining work, counting only progress that survives (h)."""
    return state.remaining_time_hours - (state.spec.work_hours - safe_progress_hours(state))


def safety_threshold_hours(state: JobState, gap_hours: float, margin_hours: float = 0.0) -> float:
    """Least safe slack with which the job may stay off on-demand for one more tick (h)."""
    return state.spec.restart_hours + gap_hours + margin_hours + SAFETY_EPS_HOURS


def must_go_on_demand(state: JobState, gap_hours: float, margin_hours: float = 0.0) -> bool:
    """True when the job must be on on-demand from this tick to meet its deadline."""
    return safe_slack_hours(state) < safety_threshold_hours(state, gap_hours, margin_hours)


def ticks_until_unsafe(state: JobState, gap_hours: float, margin_hours: float = 0.0) -> int:
    """Ticks the job can surely stay off on-demand (slack falls at most one gap a tick)."""
    spare = safe_slack_hours(state) - safety_threshold_hours(state, gap_hours, margin_hours)
    if spare <= 0:
        return 1
    return max(1, int(math.floor(spare / gap_hours)))


def affordable_probes(state: JobState, gap_hours: float, margin_hours: float = 0.0) -> int:
    """Failed launch attempts the job can afford before an on-demand launch: each one
    delays that launch by ``probe_seconds``, which the safety net's threshold does not
    cover, so only the spare slack above it may pay for them."""
    probe_h = state.spec.probe_seconds / 3600.0
    spare = safe_slack_hours(state) - safety_threshold_hours(state, gap_hours, margin_hours)
    if probe_h <= 0:
        return 1 << 30
    return max(0, int(math.floor(spare / probe_h)))
