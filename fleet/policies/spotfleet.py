"""spotfleet's own deadline policy: statistics + forecast + notices + adaptive intervals.

What it uses, all from the past only (``obs.history``):

* **Run-length forecast** (:mod:`fleet.stats.forecast`): per zone, the empirical
  distribution of up-run lengths (the alternating-renewal model), refitted every
  ``refit_hours``. From it and the age of the zone's current up-run, the expected
  remaining time before the next preemption, ``E[U - a | U > a]``; the real traces'
  decreasing hazard makes long-running zones the safest bet.
* **Weighted eviction rate** (GFS Eq. 15, :func:`fleet.stats.preemption.weighted_eviction_rate`):
  recent evictions in a zone discount its score (a burst of reclaims is a regime,
  not noise).
* **Adaptive checkpoint interval** (:func:`checkpointing.costmodel.optimal_interval_hours`)
  from the zone's conditional hazard ``1 / E[remaining]``; with a usable notice only the
  preemptions whose notice fails (``notice_failure_prob``) cost work, so the interval
  stretches accordingly.
* **Deadline safety net** (:mod:`fleet.policies.safety`): with a notice the work at risk
  is only the save time, so spot stays usable closer to the deadline.

* **Slack reserve** from the observed market: the expected slack burned per hour off
  on-demand (share of time no zone had capacity + preemption rate x (restart + work at
  risk)) times the time left. Uniform Progress keeps a reserve proportional to the time
  left whatever the market; this one keeps what the market has been burning.

Decisions: run spot in the zone with the best score whenever one is worth a launch
(expected run >= ``min_expected_run_hours``); otherwise wait (idle is free) while the
spare slack exceeds the reserve, else bridge the outage on on-demand; leave on-demand
for a zone expected to run ``od_exit_min_run_hours`` with spare slack above the net, or
for idle once the slack is back above the reserve.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from checkpointing.costmodel import optimal_interval_hours
from fleet.policies.base import IDLE, ON_DEMAND, Action, JobSpec, JobState, Observation, Policy
from fleet.policies.safety import (
    must_go_on_demand,
    safe_slack_hours,
    safety_threshold_hours,
    ticks_until_unsafe,
)
from fleet.stats.forecast import current_state, fit_models
from fleet.stats.preemption import weighted_eviction_rate


@dataclass(frozen=True)
class SpotfleetParams:
    """Tunables (hours unless noted). Defaults tuned on the tuning start times only."""

    lookback_hours: float = 24.0 * 30  # history window of the run-length model
    refit_hours: float = 6.0  # refit the model at most this often
    min_expected_run_hours: float = 1.0  # launch spot only if it is expected to run this long
    od_exit_margin_hours: float = 0.1  # spare slack needed to leave on-demand for spot
    od_exit_min_run_hours: float = 5.0  # ... and a zone expected to run at least this long
    eviction_weight_hours: float = 0.5  # score = E[remaining] / (1 + w * weighted rate)
    notice_failure_prob: float = 0.05  # share of notices assumed lost (insurance saves)
    recheck_hours: float = 0.5  # how often to reconsider while idle / on on-demand
    risk_fraction: float = 0.4  # at most this share of the spare slack at risk (no notice)
    reserve_factor: float = 1.0  # slack reserve = factor x expected slack burn (0 = greedy)


def expected_residual_hours(up_runs: np.ndarray, age_hours: float,
                            min_tail_runs: int = 3) -> float:
    """``E[U - a | U > a]`` from an empirical sample of up-run lengths (h).

    With fewer than ``min_tail_runs`` runs longer than the age, the mean of the longest
    fifth of the runs (the forecast sampler's exponential tail, whose mean that is). The
    sampler in :mod:`fleet.stats.forecast` switches to the tail below 25 runs; for this
    point estimate 3 was better on the tuning starts (25 lost to Uniform Progress on the
    4-zone traces, 24/36 h without notice).
    """
    if up_runs.size == 0:
        return 1.0
    longer = up_runs[up_runs > age_hours]
    if longer.size >= min_tail_runs:
        return float(longer.mean() - age_hours)
    top = np.sort(up_runs)[-max(3, up_runs.size // 5):]
    return float(max(top.mean(), age_hours, 1e-3))


class SpotfleetPolicy(Policy):
    """The spotfleet policy (see the module docstring)."""

    name = "spotfleet"

    def __init__(self, params: SpotfleetParams | None = None) -> None:
        self.p = params or SpotfleetParams()
        self._models = None
        self._fit_tick = -(10**9)
        self._spec: JobSpec | None = None

    def reset(self, spec: JobSpec, obs: Observation) -> None:
        self._spec = spec
        self._models = None
        self._fit_tick = -(10**9)
        self._refit(obs)

    # ------------------------------------------------------------------ statistics
    def _window(self, obs: Observation) -> np.ndarray:
        n = max(2, int(self.p.lookback_hours / obs.gap_hours))
        return obs.history[:, -n:]

    def _refit(self, obs: Observation) -> None:
        hist = self._window(obs)
        self._models = fit_models(list(hist), [obs.gap_hours] * obs.n_zones)
        self._fit_tick = obs.tick
        # market-wide burn statistics: share of time no zone had capacity, and the
        # preemption rate per held hour over all zones
        self._all_down = float(np.mean(~hist.any(axis=0)))
        held = float(hist.sum()) * obs.gap_hours
        evictions = int(np.count_nonzero(hist[:, :-1] & ~hist[:, 1:]))
        self._rate = evictions / held if held > 0 else 1.0

    def slack_burn_rate(self, spec: JobSpec) -> float:
        """Expected slack lost per wall-clock hour off on-demand (h/h): waiting while no
        zone has capacity, plus per preemption a restart and the work at risk."""
        c = spec.checkpoint_hours
        at_risk = c if spec.notice_saves else math.sqrt(2.0 * c * 1.0 / max(self._rate, 1e-3)) / 2
        return self._all_down + self._rate * (spec.restart_hours + at_risk)

    def reserve_hours(self, state: JobState, at_hours: float) -> float:
        """Slack to keep in hand at elapsed time ``at_hours``: the expected burn over the
        rest of the job, times ``reserve_factor`` (Uniform Progress keeps slack in
        proportion to the time left; this keeps what the observed market will burn)."""
        left = max(0.0, state.spec.deadline_hours - at_hours)
        return self.p.reserve_factor * self.slack_burn_rate(state.spec) * left

    def zone_scores(self, obs: Observation) -> np.ndarray:
        """Expected remaining up-time (h) of every zone now, discounted by recent
        evictions; -inf for zones without capacity."""
        if obs.tick - self._fit_tick >= self.p.refit_hours / obs.gap_hours:
            self._refit(obs)
        g = obs.gap_hours
        hist = self._window(obs)
        scores = np.full(obs.n_zones, -np.inf)
        recent = hist[:, -int(24.0 / g) - 1:]
        for z in np.flatnonzero(obs.available):
            age = current_state(hist[z], g)[1]
            e_rem = expected_residual_hours(self._models[z].up, age)
            row = recent[z]
            ev_ticks = np.flatnonzero(row[:-1] & ~row[1:]) + 1
            ev_hours = (ev_ticks - (row.size - 1)) * g  # <= 0: hours before now
            rate = weighted_eviction_rate(ev_hours, 0.0)
            scores[z] = e_rem / (1.0 + self.p.eviction_weight_hours * rate)
        return scores

    def checkpoint_interval(self, expected_run_hours: float, state: JobState,
                            gap_hours: float) -> float | None:
        """Adaptive interval (h of compute) for a zone expected to run this long.

        The cost-model optimum for the zone's conditional hazard, capped so that the
        work at risk never eats the slack the safety net needs (otherwise one unlucky
        preemption would force the rest of the job onto on-demand).
        """
        spec = state.spec
        c = spec.checkpoint_hours
        if c <= 0:
            return None
        rate = 1.0 / max(expected_run_hours, 1e-3)
        if spec.notice_saves:
            rate *= self.p.notice_failure_prob
        try:
            t_opt = optimal_interval_hours(c, rate, spec.restart_hours)
        except ValueError:  # restarts alone exceed the run: checkpoint as often as it pays
            t_opt = 2.0 * c
        if spec.notice_saves:
            return t_opt
        slack_if_saved = state.remaining_time_hours - (spec.work_hours - state.done_hours)
        spare = slack_if_saved - safety_threshold_hours(state, gap_hours) - c - gap_hours
        cap = self.p.risk_fraction * spare
        return max(min(t_opt, cap), 2.0 * c)

    # ------------------------------------------------------------------ decisions
    def decide(self, state: JobState, obs: Observation) -> Action:
        g = obs.gap_hours
        p = self.p
        recheck = obs.tick + max(1, int(p.recheck_hours / g))
        if must_go_on_demand(state, g):
            return Action(ON_DEMAND, None, obs.tick + 1, watch=())
        k = ticks_until_unsafe(state, g)
        scores = self.zone_scores(obs)
        if state.location >= 0:
            interval = self.checkpoint_interval(max(scores[state.location], g), state, g)
            return Action(state.location, interval, obs.tick + k, watch=(state.location,))
        best = int(np.argmax(scores))
        best_score = float(scores[best])
        spare = safe_slack_hours(state) - safety_threshold_hours(state, g)
        if state.location == ON_DEMAND:
            need = state.spec.restart_hours + p.od_exit_margin_hours
            if best_score >= p.od_exit_min_run_hours and spare >= need:
                return Action(best, self.checkpoint_interval(best_score, state, g), obs.tick + k,
                              watch=(best,))
            later = state.elapsed_hours + 2.0 * state.spec.restart_hours
            if spare >= self.reserve_hours(state, later) + state.spec.restart_hours:
                return Action(IDLE, None, min(recheck, obs.tick + k), watch=None)
            return Action(ON_DEMAND, None, min(recheck, obs.tick + k), watch=None)
        if best_score >= p.min_expected_run_hours:
            return Action(best, self.checkpoint_interval(best_score, state, g), obs.tick + k, watch=(best,))
        if spare < self.reserve_hours(state, state.elapsed_hours):
            # waiting would eat slack the rest of the job is expected to need: bridge the
            # outage on on-demand (and come back to spot as soon as a zone is worth it)
            return Action(ON_DEMAND, None, min(recheck, obs.tick + k), watch=None)
        return Action(IDLE, None, min(recheck, obs.tick + k), watch=None)
