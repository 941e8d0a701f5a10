"""What a policy can know about the market, computed once per job (pure numpy).

* :class:`PriorStats`: per-zone statistics from the market's past **before the job
  started** (``obs.history[:, :start]``: the statistics DB / public traces a live system
  has): availability, mean up-run (time to preemption) and mean down-run (time to
  regain), all over ``lookback_hours``.
* :func:`belief_up`: the chance a launch in each zone succeeds now, from the job's own
  observations (``last_seen_tick``) and the prior.
* :func:`launch_action`: an :class:`~fleet.policies.base.Action` that tries zones in
  order (the first as ``target``, the rest as ``fallbacks``) and ends on a last resort.
* :func:`history_rejected`, :func:`hold_p_value`, :func:`fisher_rejects`: tests of the
  job's own preemptions against the history (spotfleet's opt-in ``own_runs="switch"`` /
  ``"switch_emp"``).
* :func:`changepoint_run`: each held zone's expected up-run averaged over "unchanged since
  the history" and "changed", weighted by the job's own holds and preemptions there
  (spotfleet's opt-in ``zone_model="changepoint"``); :func:`changepoint_run_emp` the same
  with the history's own run law as "unchanged" (``zone_model="changepoint_emp"``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fleet.policies.base import IDLE, Action, Observation


@dataclass(frozen=True)
class PriorStats:
    """Per-zone statistics over the lookback window (hours)."""

    availability: np.ndarray  # share of ticks up
    mean_up_hours: np.ndarray  # held hours / (preemptions + 1): conservative MTTP
    mean_down_hours: np.ndarray  # down hours / (regains + 1)
    all_down: float  # share of ticks with no zone up
    up_after_neighbour_hours: np.ndarray | None = None  # see ``from_history``

    @classmethod
    def from_history(cls, history: np.ndarray, gap_hours: float,
                     lookback_hours: float = 24.0 * 30,
                     regions: tuple[str, ...] = ()) -> PriorStats:
        """Statistics of ``history`` (zones x ticks) over the last ``lookback_hours``.

        With ``regions``: ``up_after_neighbour_hours[z]`` = mean time (h) until zone ``z``
        next loses capacity, measured from the moments another zone of its region was
        preempted while ``z`` was up (region-correlated reclaims make that shorter than
        the mean up-run); the mean up-run where fewer than 3 such moments exist.
        """
        n = max(2, int(lookback_hours / gap_hours))
        h = np.asarray(history[:, -n:], dtype=bool)
        if h.shape[1] < 2:
            z = h.shape[0]
            return cls(np.full(z, 0.5), np.full(z, 1.0), np.full(z, 1.0), 0.5)
        up_ticks = h.sum(axis=1)
        pre = np.count_nonzero(h[:, :-1] & ~h[:, 1:], axis=1)
        reg = np.count_nonzero(~h[:, :-1] & h[:, 1:], axis=1)
        mean_up = np.maximum(up_ticks * gap_hours / (pre + 1), gap_hours)
        after = mean_up.copy()
        if regions and len(regions) == h.shape[0]:
            nz, nt = h.shape
            # next tick at or after t where zone z is down (nt: none in the window)
            nxt = np.full((nz, nt + 1), nt, dtype=np.int64)
            for t in range(nt - 1, -1, -1):
                nxt[:, t] = np.where(h[:, t], nxt[:, t + 1], t)
            drops = [np.flatnonzero(h[z, :-1] & ~h[z, 1:]) + 1 for z in range(nz)]
            for z in range(nz):
                ts = [t for z2 in range(nz) if z2 != z and regions[z2] == regions[z]
                      for t in drops[z2] if h[z, t]]
                if len(ts) >= 3:
                    ts = np.asarray(ts)
                    after[z] = max(float(np.mean(nxt[z, ts] - ts)) * gap_hours, gap_hours)
        return cls(availability=up_ticks / h.shape[1], mean_up_hours=mean_up,
                   mean_down_hours=np.maximum((h.shape[1] - up_ticks) * gap_hours / (reg + 1),
                                              gap_hours),
                   all_down=float(np.mean(~h.any(axis=0))), up_after_neighbour_hours=after)


def poisson_tail(lam: float, n: int) -> float:
    """``P(N >= n)`` for ``N ~ Poisson(lam)`` (``n >= 0``; 1 for ``n <= 0``)."""
    if n <= 0:
        return 1.0
    term = math.exp(-lam)
    below = term
    for k in range(1, n):
        term *= lam / k
        below += term
    return max(0.0, 1.0 - below)


SHIFT_ALPHA = 0.01
"""Significance of :func:`history_rejected` and :func:`fisher_rejects` (structural: the
usual 1 % level)."""
SHIFT_MIN_PREEMPTIONS = 2
"""Fewest preemptions those tests act on: one early preemption is what a
heavy-tailed run law produces often, whatever the mean."""


def history_rejected(mean_up_hours: np.ndarray, held_hours: np.ndarray,
                     own_preemptions: np.ndarray, alpha: float = SHIFT_ALPHA) -> bool:
    """Whether the job's own preemptions, over all the zones it held together, reject the
    history's mean up-runs: ``P(Poisson(sum H / mean_up) >= sum n) < alpha`` with at least
    ``SHIFT_MIN_PREEMPTIONS`` preemptions."""
    n = int(np.asarray(own_preemptions).sum())
    lam = float((np.asarray(held_hours, dtype=float) / np.asarray(mean_up_hours, dtype=float)).sum())
    return n >= SHIFT_MIN_PREEMPTIONS and lam > 0 and poisson_tail(lam, n) < alpha


def hold_p_value(hold_hours: float, mean_up_hours: float, runs_hours: np.ndarray) -> float:
    """How surprising a hold of ``hold_hours`` that ended in a preemption is to the history:
    the larger of ``P(T <= hold)`` for ``T`` exponential with the history's mean up-run and
    the share of the zone's history up-runs no longer than the hold, ``(count + 0.5) /
    (runs + 1)`` (the empirical law; heavy-tailed histories with many short runs make short
    holds unsurprising). The larger of the two: a hold is evidence only when both models
    call it rare."""
    expo = 1.0 - math.exp(-max(hold_hours, 0.0) / max(mean_up_hours, 1e-9))
    runs = np.asarray(runs_hours, dtype=float)
    emp = (np.count_nonzero(runs <= hold_hours + 1e-9) + 0.5) / (runs.size + 1)
    return min(1.0, max(expo, emp))


def fisher_rejects(p_values: Sequence[float], alpha: float = SHIFT_ALPHA) -> bool:
    """Fisher's combined test of ``p_values`` (at least ``SHIFT_MIN_PREEMPTIONS``): ``X =
    -2 sum ln p`` against chi-squared with ``2k`` degrees of freedom, whose survival for
    even degrees of freedom is ``P(Poisson(X / 2) < k)``."""
    k = len(p_values)
    if k < SHIFT_MIN_PREEMPTIONS:
        return False
    x = -2.0 * sum(math.log(max(p, 1e-300)) for p in p_values)
    return 1.0 - poisson_tail(x / 2.0, k) < alpha


def own_evidence_caps(run_hours: np.ndarray, holds: Sequence[Sequence[tuple]]) -> np.ndarray:
    """Expected up-runs (h) capped by the job's own holds (``holds[z]``: (hours, ended by a
    preemption?, ...) per hold of zone ``z``): a zone that preempted the job runs at most its
    hours held per preemption there; a zone the job never held at most the hours held per
    preemption over all zones; a zone held without a preemption keeps ``run_hours``."""
    out = np.array(run_hours, dtype=float)
    held = [sum(h[0] for h in zh) for zh in holds]
    pre = [sum(1 for h in zh if h[1]) for zh in holds]
    pooled = sum(held) / sum(pre) if sum(pre) else math.inf  # no preemption: no cap
    for z, zh in enumerate(holds):
        if not zh:
            out[z] = min(out[z], pooled)
        elif pre[z]:
            out[z] = min(out[z], held[z] / pre[z])
    return out


def holds_reject_model(holds: Sequence[tuple[float, bool, float]],
                       alpha: float = SHIFT_ALPHA) -> bool:
    """True when the job's holds ``(hours, ended by a preemption?, run expected at its
    launch h)`` show significantly more preemptions than the expected runs predict: at
    least ``SHIFT_MIN_PREEMPTIONS`` and ``P(Poisson(sum hours / expected) >= seen) < alpha``."""
    n = sum(1 for _, pre, _ in holds if pre)
    if n < SHIFT_MIN_PREEMPTIONS:
        return False
    lam = sum(h / max(e, 1e-9) for h, _, e in holds)
    return poisson_tail(lam, n) < alpha


def holds_reject_run_law(holds: Sequence[Sequence[tuple]], runs_hours: Sequence[np.ndarray],
                         gap_hours: float, alpha: float = SHIFT_ALPHA, residual: bool = False) -> bool:
    """True when the job's preempted holds are significantly shorter than each zone's own run
    law says (``holds[z]``: (hours, ended by a preemption?, ...) per hold of zone ``z``;
    ``runs_hours[z]``: the history's up-runs, the mixture of exponentials of
    :func:`run_law_log_likelihood`). Each preempted hold gives ``p = P(run <= hours)`` under
    its zone's law, the hours floored at one tick (a hold seen as 0 h lasted up to a tick);
    Fisher's combination of them (:func:`fisher_rejects`, at least
    ``SHIFT_MIN_PREEMPTIONS``) below ``alpha``. A zone whose history flickers makes short
    holds unsurprising; one whose history is calm does not.

    ``residual``: a hold whose 4th field is False began at an arbitrary moment of an up-run
    (the job had not watched the zone come back), so it is judged by the run law's residual
    life, ``p = 1 - E[R exp(-x / R)] / E[R]`` (runs weighted by their length; for one
    exponential the same p as a fresh run). Holds without a 4th field count as fresh."""
    pv = []
    for zh, runs in zip(holds, runs_hours, strict=True):
        r = np.maximum(np.asarray(runs, dtype=float), 1e-9)
        for h in zh:
            if not h[1]:
                continue
            e = np.exp(-max(float(h[0]), gap_hours) / r)
            if residual and len(h) > 3 and not h[3]:
                pv.append(float(1.0 - np.mean(r * e) / np.mean(r)))
            else:
                pv.append(float(np.mean(1.0 - e)))
    return fisher_rejects(pv, alpha)


CHANGE_PRIOR = 0.1
"""Prior probability that a zone's run law during the job is not its history's
(:func:`changepoint_run`; fixed before the thirteenth round's runs, not tuned)."""


def _changed_posterior(log_l0: float, n: float, h: float, b: float, prior: float) -> float:
    """P(H1) from H0's log-likelihood and H1's (exponential, rate ~ Gamma(1, ``b``)): ``n``
    events in ``h`` hours give ``b n! / (b + h)^(n + 1)``; ``prior`` = P(H1) before them."""
    log_l1 = math.log(b) + math.lgamma(n + 1.0) - (n + 1.0) * math.log(b + h)
    log_odds = math.log(prior / (1.0 - prior)) + log_l1 - log_l0
    if log_odds > 50.0:
        return 1.0
    return math.exp(log_odds) / (1.0 + math.exp(log_odds))


def changed_probability(mean_up_hours: float, preemptions: float, held_hours: float,
                        prior_hours: float, prior: float = CHANGE_PRIOR) -> float:
    """Posterior probability that a zone changed, from the job's ``preemptions`` in
    ``held_hours`` of holding it.

    H0: preemptions come at the history's rate ``1 / mean_up_hours`` (likelihood
    ``m^-n exp(-H / m)``); H1: at an unknown rate with a Gamma(1, ``prior_hours``) prior
    (marginal likelihood ``b n! / (b + H)^(n + 1)``), ``prior`` = P(H1) before the evidence.
    Long holds without a preemption favour H0 (H1's mass sits on high rates), short holds
    ending in preemptions favour H1."""
    m = max(float(mean_up_hours), 1e-9)
    n = max(float(preemptions), 0.0)
    h = max(float(held_hours), 0.0)
    b = max(float(prior_hours), 1e-9)
    log_l0 = -n * math.log(m) - h / m
    return _changed_posterior(log_l0, n, h, b, prior)


def changepoint_run(run_hours: np.ndarray, mean_up_hours: np.ndarray, preemptions: np.ndarray,
                    held_hours: np.ndarray, prior_hours: float,
                    prior: float = CHANGE_PRIOR) -> np.ndarray:
    """Expected up-run (h) of each zone averaged over the two hypotheses of
    :func:`changed_probability`: ``run_hours`` (the history's estimate) if unchanged, the
    job's own ``(b + held) / (preemptions + 1)`` if changed. Zones the job never held keep
    ``run_hours``."""
    out = np.array(run_hours, dtype=float)
    for z in range(out.size):
        n, h = float(preemptions[z]), float(held_hours[z])
        if n <= 0 and h <= 0:
            continue
        p1 = changed_probability(float(mean_up_hours[z]), n, h, prior_hours, prior)
        out[z] = (1.0 - p1) * out[z] + p1 * (prior_hours + h) / (n + 1.0)
    return out


def run_law_log_likelihood(holds: Sequence[tuple], runs_hours: np.ndarray) -> float:
    """Log-likelihood of the job's ``holds`` under a zone's own run law: the mixture, with
    equal weights, of exponentials whose means are ``runs_hours`` (the history's up-runs).

    A hold is ``(hours, ended by a preemption?)`` or ``(hours, preempted?, fresh?)``.
    A *fresh* hold (the default) began with its run: a preempted one contributes the
    mixture's density at its length, any other (still open, or left by the job) its
    survival. A hold that began at an arbitrary moment of an up-run (``fresh`` False: a
    launch into a zone the job had not just seen come back) samples runs in proportion to
    their length, so it contributes the residual life of the run law: density
    ``S(x) / E[R]`` (``S`` the mixture's survival, ``E[R]`` its mean) when preempted,
    survival ``E[R e^(-x/R)] / E[R]`` otherwise. A few short runs in the history make
    short fresh holds plausible, much less short holds that began mid-run."""
    r = np.maximum(np.asarray(runs_hours, dtype=float), 1e-9)
    mean_r = float(np.mean(r))
    out = 0.0
    for hold in holds:
        x, preempted = max(float(hold[0]), 0.0), bool(hold[1])
        fresh = bool(hold[2]) if len(hold) > 2 else True
        e = np.exp(-x / r)
        if fresh:
            v = float(np.mean(e / r)) if preempted else float(np.mean(e))
        else:
            v = float(np.mean(e)) / mean_r if preempted else float(np.mean(r * e)) / mean_r
        out += math.log(max(v, 1e-300))
    return out


def changed_probability_emp(holds: Sequence[tuple], runs_hours: np.ndarray,
                            prior_hours: float, prior: float = CHANGE_PRIOR) -> float:
    """:func:`changed_probability` with the zone's own run law as H0
    (:func:`run_law_log_likelihood`) and per-hold evidence; H1 as there."""
    n = float(sum(1 for hold in holds if hold[1]))
    h = float(sum(max(float(hold[0]), 0.0) for hold in holds))
    b = max(float(prior_hours), 1e-9)
    log_l0 = run_law_log_likelihood(holds, runs_hours)
    return _changed_posterior(log_l0, n, h, b, prior)


def changepoint_run_emp(run_hours: np.ndarray, holds: Sequence[Sequence[tuple]],
                        runs_hours: Sequence[np.ndarray], prior_hours: float | np.ndarray,
                        prior: float = CHANGE_PRIOR) -> np.ndarray:
    """Expected up-run (h) of each zone averaged over :func:`changed_probability_emp`'s two
    hypotheses: ``run_hours`` if unchanged; if changed, the posterior mean of the run
    ``1 / lambda``, ``(b + held) / max(preemptions, 1)`` (the hours held so far when there
    was no preemption). Zones with no holds keep ``run_hours``. ``prior_hours`` (H1's
    ``b``): one value, or one per zone (:func:`h1_prior_hours`)."""
    out = np.array(run_hours, dtype=float)
    for z, p1, r1 in changed_runs_emp(holds, runs_hours, prior_hours, prior):
        out[z] = (1.0 - p1) * out[z] + p1 * r1
    return out


def changed_runs_emp(holds: Sequence[Sequence[tuple]], runs_hours: Sequence[np.ndarray],
                     prior_hours: float | np.ndarray, prior: float = CHANGE_PRIOR):
    """(zone, P(changed), the changed run's posterior mean (h)) for each zone with holds:
    :func:`changepoint_run_emp`'s two ingredients, for averaging something other than runs."""
    b = np.broadcast_to(np.asarray(prior_hours, dtype=float), (len(holds),))
    for z, n, h, p1 in _hold_posteriors(holds, runs_hours, b, prior):
        yield z, p1, (b[z] + h) / max(n, 1)


def _hold_posteriors(holds: Sequence[Sequence[tuple]], runs_hours: Sequence[np.ndarray],
                     prior_hours: np.ndarray, prior: float):
    """(zone, preemptions, hours held, P(changed)) for each zone with holds; H1's ``b`` per
    zone from ``prior_hours``."""
    for z, zone_holds in enumerate(holds):
        if not zone_holds:
            continue
        n = sum(1 for hold in zone_holds if hold[1])
        h = sum(max(float(hold[0]), 0.0) for hold in zone_holds)
        yield z, n, h, changed_probability_emp(zone_holds, runs_hours[z], float(prior_hours[z]), prior)


CHANGE_POOLS = ("off", "seen", "all")
"""The values of ``SpotfleetParams.change_pool`` (:func:`pooled_changed_runs_emp`)."""

POOL_CONCENTRATION = 2.0
"""a + b of the Beta prior on the share of zones that changed (:func:`pooled_change_posteriors`):
mean :data:`CHANGE_PRIOR`, weight of two zones. Fixed before the nineteenth round's runs."""


def _log_beta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


def pooled_change_posteriors(log_l0: Sequence[float], log_l1: Sequence[float],
                             prior: float = CHANGE_PRIOR,
                             concentration: float = POOL_CONCENTRATION) -> tuple[np.ndarray, float]:
    """P(changed) of each of K zones, and of a zone without evidence, when the zones change
    *together*: each zone changed with probability ``pi``, ``pi ~ Beta(prior c, (1 - prior) c)``
    (``c`` = ``concentration``), so a change seen in one zone raises the chance that the
    others changed too (a market whose histories are stale), where v6's per-zone update
    (:func:`_changed_posterior`, ``prior`` fixed) treats each zone on its own.

    ``log_l0[z]`` / ``log_l1[z]``: zone z's log-likelihood of the job's evidence under
    "as its history says" / "changed". Exact: integrating ``pi`` out gives the configuration
    prior ``B(a + k, b + K - k) / B(a, b)`` for any ``k`` changed zones of K, and the sum
    over configurations runs over ``k`` (elementary symmetric sums, O(K^2)). With one zone
    of evidence its P(changed) is v6's. Returns (P(changed) per zone, E[pi | evidence])."""
    l0 = np.asarray(log_l0, dtype=float)
    l1 = np.asarray(log_l1, dtype=float)
    k_n = l0.size
    a, b = prior * concentration, (1.0 - prior) * concentration
    if k_n == 0:
        return np.zeros(0), prior
    top = np.maximum(l0, l1)
    w0, w1 = np.exp(l0 - top), np.exp(l1 - top)  # common factors cancel

    def sym(skip: int) -> np.ndarray:
        # e[k] = sum over configurations of the zones other than ``skip`` with k changed
        e = np.zeros(k_n + 1)
        e[0] = 1.0
        for z in range(k_n):
            if z == skip:
                continue
            e[1:] = e[1:] * w0[z] + e[:-1] * w1[z]
            e[0] *= w0[z]
        return e

    ks = np.arange(k_n + 1)
    log_conf = np.array([_log_beta(a + k, b + k_n - k) for k in ks]) - _log_beta(a, b)
    conf = np.exp(log_conf - log_conf.max())
    e_all = sym(-1)
    evidence = float(np.sum(conf * e_all))
    post_k = conf * e_all / evidence  # P(k zones changed | evidence)
    mean_pi = float(np.sum(post_k * (a + ks) / (a + b + k_n)))
    p1 = np.empty(k_n)
    for z in range(k_n):
        e = sym(z)  # the others; zone z changed adds one to k
        p1[z] = float(np.sum(conf[1:] * e[:-1] * w1[z])) / evidence
    return np.clip(p1, 0.0, 1.0), mean_pi


def pooled_changed_runs_emp(holds: Sequence[Sequence[tuple]], runs_hours: Sequence[np.ndarray],
                            prior_hours: float | np.ndarray, unseen: bool,
                            prior: float = CHANGE_PRIOR,
                            concentration: float = POOL_CONCENTRATION):
    """:func:`changed_runs_emp` with the zones' changes pooled
    (:func:`pooled_change_posteriors`): (zone, P(changed), the changed run's posterior mean
    (h)) for each zone with holds and, with ``unseen``, for every zone without: P(changed) =
    E[pi | evidence], and the changed run pooled over the zones the job held, each weighted
    by its P(changed): ``(b + sum p H) / max(sum p n, 1)`` (a zone the job never held is
    taken to have changed as the held ones did)."""
    b = np.broadcast_to(np.asarray(prior_hours, dtype=float), (len(holds),))
    seen = [z for z, zh in enumerate(holds) if zh]
    l0, l1, nh = [], [], []
    for z in seen:
        zone_holds = holds[z]
        n = float(sum(1 for hold in zone_holds if hold[1]))
        h = float(sum(max(float(hold[0]), 0.0) for hold in zone_holds))
        bz = max(float(b[z]), 1e-9)
        l0.append(run_law_log_likelihood(zone_holds, runs_hours[z]))
        l1.append(math.log(bz) + math.lgamma(n + 1.0) - (n + 1.0) * math.log(bz + h))
        nh.append((n, h))
    p1, mean_pi = pooled_change_posteriors(l0, l1, prior, concentration)
    for i, z in enumerate(seen):
        n, h = nh[i]
        yield z, float(p1[i]), (b[z] + h) / max(n, 1.0)
    if unseen and seen:
        pn = sum(float(p1[i]) * nh[i][0] for i in range(len(seen)))
        ph = sum(float(p1[i]) * nh[i][1] for i in range(len(seen)))
        for z in range(len(holds)):
            if not holds[z]:
                yield z, mean_pi, (float(b[z]) + ph) / max(pn, 1.0)


def changepoint_hazard_emp(run_hours: np.ndarray, holds: Sequence[Sequence[tuple]],
                           runs_hours: Sequence[np.ndarray], prior_hours: float | np.ndarray,
                           prior: float = CHANGE_PRIOR) -> np.ndarray:
    """Posterior mean hazard (1/h) of each zone over :func:`changed_probability_emp`'s two
    hypotheses: ``(1 - p1) / run_hours`` (unchanged) plus ``p1 (1 + n) / (b + H)`` (changed:
    H1's posterior rate is Gamma(1 + n, b + H), ``n`` preemptions in ``H`` hours held).
    Zones with no holds: ``1 / run_hours``. What sets a checkpoint interval under an uncertain
    hazard (saves ``C / T`` plus expected losses ``E[lambda] T / 2`` per hour), where
    :func:`changepoint_run_emp`'s average of runs would understate it."""
    r0 = np.maximum(np.asarray(run_hours, dtype=float), 1e-9)
    out = 1.0 / r0
    b = np.maximum(np.broadcast_to(np.asarray(prior_hours, dtype=float), r0.shape), 1e-9)
    for z, n, h, p1 in _hold_posteriors(holds, runs_hours, b, prior):
        out[z] = (1.0 - p1) / r0[z] + p1 * (1.0 + n) / (b[z] + h)
    return out


def h1_prior_hours(history_hours: np.ndarray, gap_hours: float, rate_ratio: float,
                   prior_seconds: float = 0.0) -> np.ndarray:
    """H1's ``b`` (hours) per zone for the own-evidence updates: one tick when
    ``rate_ratio <= 0`` and ``prior_seconds <= 0`` (v6: H1's prior mean rate is one event
    per tick, so the update depends on the trace's tick: 32 s to 600 s across the
    collection, 23-227x the histories' median rate); ``prior_seconds`` / 3600 when
    ``prior_seconds > 0`` (``SpotfleetParams.h1_prior_seconds``, session 11, opt-in: the same
    b at every tick); else ``history_hours / rate_ratio``, the zone's history mean
    (run or outage, hours) over ``rate_ratio``: H1's prior mean rate is ``rate_ratio`` x
    the history's, whatever the tick (``SpotfleetParams.h1_rate_ratio``, session 10
    exploration, not adopted)."""
    h = np.asarray(history_hours, dtype=float)
    if prior_seconds > 0:
        return np.full(h.shape, float(prior_seconds) / 3600.0)
    if rate_ratio <= 0:
        return np.full(h.shape, float(gap_hours))
    return np.maximum(h / float(rate_ratio), 1e-9)


def up_run_ticks(up: np.ndarray) -> np.ndarray:
    """Lengths (ticks) of the maximal up-runs of one zone's history ``up`` (bool per
    tick); a run cut by either end of the history counts at its observed length
    (censored, so conservative)."""
    x = np.asarray(up, dtype=np.int8)
    d = np.diff(np.concatenate([[0], x, [0]]))
    return (np.flatnonzero(d == -1) - np.flatnonzero(d == 1)).astype(np.int64)


def belief_up(obs: Observation, prior: PriorStats) -> np.ndarray:
    """P(a launch in each zone succeeds now): the observed state when it is fresh, decaying
    toward the prior availability with the time since it was seen (a two-state chain
    with the zone's mean up / down run lengths)."""
    a = prior.availability
    if not obs.probed or obs.last_seen_tick is None:
        return np.where(obs.available, 1.0, 0.0)
    seen = obs.last_seen_tick
    age = np.where(seen >= 0, (obs.tick - seen) * obs.gap_hours, np.inf)
    rate = 1.0 / prior.mean_up_hours + 1.0 / prior.mean_down_hours
    decay = np.exp(-rate * np.minimum(age, 1e6))
    last_up = obs.available.astype(float)
    b = a + (last_up - a) * decay
    return np.where(np.isfinite(age), b, np.where(obs.available, np.maximum(a, 0.5), a))


def launch_action(order, last_resort: int = IDLE, interval: float | None = None,
                  recheck_tick: int | None = None, max_tries: int | None = None) -> Action:
    """Try the zones of ``order`` in turn, then ``last_resort`` (idle or on-demand).

    ``max_tries`` caps the zones tried (failed tries delay the last resort; see
    :func:`fleet.policies.safety.affordable_probes`)."""
    order = [int(z) for z in order]
    if max_tries is not None:
        order = order[:max(0, max_tries)]
    if not order:
        return Action(last_resort, interval if last_resort >= 0 else None, recheck_tick)
    return Action(order[0], interval, recheck_tick, fallbacks=(*order[1:], last_resort))
