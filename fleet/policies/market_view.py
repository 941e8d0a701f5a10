"""What a policy can know about the market, computed once per job (pure numpy).

* :class:`PriorStats`: per-zone statistics from the market's past **before the job
  started** (``obs.history[:, :start]``: the statistics DB / public traces a live system
  has): availability, mean up-run (time to preemption) and mean down-run (time to
  regain), all over ``lookback_hours``.
* :func:`belief_up`: the chance a launch in each zone succeeds now, from the job's own
  observations (``last_seen_tick``) and the prior.
* :func:`launch_action`: an :class:`~fleet.policies.base.Action` that tries zones in
  order (the first as ``target``, the rest as ``fallbacks``) and ends on a last resort.
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
    runs_after_recovery_hours: tuple[np.ndarray, ...] | None = None  # see ``from_history``
    runs_after_outage_hours: tuple[np.ndarray, ...] | None = None  # see ``from_history``
    up_runs_ticks: tuple[np.ndarray, ...] | None = None  # see ``from_history``
    neighbour_remaining_ticks: tuple[np.ndarray, ...] | None = None  # see ``from_history``
    preemptions: np.ndarray | None = None  # up -> down changes per zone in the window
    down_total_hours: np.ndarray | None = None  # down hours in the window, per zone
    regains: np.ndarray | None = None  # down -> up changes in the window, per zone
    down_runs_ticks: tuple[np.ndarray, ...] | None = None  # see ``from_history``

    @classmethod
    def from_history(cls, history: np.ndarray, gap_hours: float,
                     lookback_hours: float = 24.0 * 30,
                     regions: tuple[str, ...] = (),
                     recovery_window_hours: float = 0.0,
                     run_lists: bool = False, down_runs: bool = False) -> PriorStats:
        """Statistics of ``history`` (zones x ticks) over the last ``lookback_hours``.

        With ``regions``: ``up_after_neighbour_hours[z]`` = mean time (h) until zone ``z``
        next loses capacity, measured from the moments another zone of its region was
        preempted while ``z`` was up (region-correlated reclaims make that shorter than
        the mean up-run); the mean up-run where fewer than 3 such moments exist.

        With ``recovery_window_hours > 0``: ``runs_after_recovery_hours[z]`` = the lengths
        (h) of ``z``'s up-runs that began at most that long after ``z`` itself lost
        capacity (:func:`runs_after_recovery`), and ``runs_after_outage_hours[z]`` those
        after an outage of any length (the same with an unbounded window); ``None``
        otherwise.

        With ``run_lists`` (the opt-in hold ranking, ``SpotfleetParams.hold_ranking``):
        ``up_runs_ticks[z]`` = the lengths (ticks) of ``z``'s up-runs in the window
        (:func:`up_run_ticks`), ``neighbour_remaining_ticks[z]`` = the ticks ``z`` stayed
        up after each of those neighbour preemptions (the samples whose mean is
        ``up_after_neighbour_hours``; empty without ``regions``), and ``preemptions[z]``
        its up -> down changes; ``None`` otherwise.

        With ``down_runs`` (the opt-in ``SpotfleetParams.patience_wait="residual"``):
        ``down_runs_ticks[z]`` = the lengths (ticks) of ``z``'s down-runs that ended in the
        window (:func:`ended_down_run_ticks`); ``None`` otherwise.
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
        neigh = [np.zeros(0, dtype=np.int64) for _ in range(h.shape[0])]
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
                    if run_lists:
                        neigh[z] = (nxt[z, ts] - ts).astype(np.int64)
        rec = out = None
        if recovery_window_hours > 0:
            rec = tuple(runs_after_recovery(h[z], gap_hours, recovery_window_hours)
                        for z in range(h.shape[0]))
            out = tuple(runs_after_recovery(h[z], gap_hours, np.inf) for z in range(h.shape[0]))
        return cls(availability=up_ticks / h.shape[1], mean_up_hours=mean_up,
                   mean_down_hours=np.maximum((h.shape[1] - up_ticks) * gap_hours / (reg + 1),
                                              gap_hours),
                   all_down=float(np.mean(~h.any(axis=0))), up_after_neighbour_hours=after,
                   runs_after_recovery_hours=rec, runs_after_outage_hours=out,
                   up_runs_ticks=tuple(up_run_ticks(h[z]) for z in range(h.shape[0]))
                   if run_lists else None,
                   neighbour_remaining_ticks=tuple(neigh) if run_lists else None,
                   preemptions=pre.astype(np.int64) if run_lists else None,
                   down_total_hours=(h.shape[1] - up_ticks) * gap_hours, regains=reg,
                   down_runs_ticks=tuple(ended_down_run_ticks(h[z]) for z in range(h.shape[0]))
                   if down_runs else None)


def run_stats(history: np.ndarray, gap_hours: float,
              lookback_hours: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(availability, mean up-run h, mean down-run h) per zone over the last
    ``lookback_hours`` of ``history`` (zones x ticks, bool): the same estimates as
    :meth:`PriorStats.from_history` (``held / (preemptions + 1)``, ``down / (regains +
    1)``, at least one tick; a run still in progress at the end counts with the hours it
    has lasted). On a probed observation's history this is the statistics before the job
    updated with what the job has observed since its start."""
    n = max(2, int(lookback_hours / gap_hours))
    h = np.asarray(history[:, -n:], dtype=bool)
    if h.shape[1] < 2:
        z = h.shape[0]
        return np.full(z, 0.5), np.full(z, 1.0), np.full(z, 1.0)
    up_ticks = h.sum(axis=1)
    pre = np.count_nonzero(h[:, :-1] & ~h[:, 1:], axis=1)
    reg = np.count_nonzero(~h[:, :-1] & h[:, 1:], axis=1)
    mean_up = np.maximum(up_ticks * gap_hours / (pre + 1), gap_hours)
    mean_down = np.maximum((h.shape[1] - up_ticks) * gap_hours / (reg + 1), gap_hours)
    return up_ticks / h.shape[1], mean_up, mean_down


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
"""Significance of :func:`shifted_up_runs`' test (structural: the usual 1 % level)."""
SHIFT_MIN_PREEMPTIONS = 2
"""Fewest preemptions :func:`shifted_up_runs` acts on: one early preemption is what a
heavy-tailed run law produces often, whatever the mean."""


def poisson_mean_lower(n: int, alpha: float) -> float:
    """The smallest Poisson mean under which ``n`` or more events are not rejected at level
    ``alpha``: the ``lam`` with ``P(N >= n | lam) = alpha`` (0 for ``n <= 0``; bisection)."""
    if n <= 0:
        return 0.0
    lo, hi = 0.0, float(n) + 10.0 * math.sqrt(n) + 10.0
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        if poisson_tail(mid, n) < alpha:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def history_rejected(mean_up_hours: np.ndarray, held_hours: np.ndarray,
                     own_preemptions: np.ndarray, alpha: float = SHIFT_ALPHA) -> bool:
    """Whether the job's own preemptions, over all the zones it held together, reject the
    history's mean up-runs: ``P(Poisson(sum H / mean_up) >= sum n) < alpha`` with at least
    ``SHIFT_MIN_PREEMPTIONS`` preemptions (the joint test of :func:`shifted_up_runs`)."""
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


def shifted_up_runs(mean_up_hours: np.ndarray, held_hours: np.ndarray, own_preemptions: np.ndarray,
                    market_wide: bool = True, alpha: float = SHIFT_ALPHA,
                    estimate: str = "mle", regions: Sequence[str] | None = None,
                    scale_mask: np.ndarray | None = None) -> np.ndarray:
    """The zones' mean up-runs (h) once the job's own experience is weighed against them.

    A zone the job held ``H`` hours and lost ``n >= SHIFT_MIN_PREEMPTIONS`` times is
    tested against the history: if ``P(Poisson(H / mean_up) >= n) < alpha`` the history's
    mean no longer describes it, and its mean up-run becomes what the job saw, ``H / n``.
    ``market_wide``: the same test on all held zones together (``sum n`` against ``sum H /
    mean_up``); when it rejects, every zone not rejected on its own has its mean divided
    by the observed rate multiplier ``sum n / sum (H / mean_up)`` (a shift seen in the held
    zones is taken to concern the market). Otherwise the means are returned unchanged:
    nothing moves until the evidence is strong, so a history that describes the job's
    period gives v5's statistics exactly.

    ``regions`` (with ``market_wide``): the joint test is made per region (the held zones
    of each region together) and scales only that region's zones: a capacity pool that
    changes is a region's, and a shift seen in one region says nothing of another's.

    ``scale_mask``: the zones the market-wide multiplier may scale (default: all), e.g.
    the zones no dearer than the dearest one that preempted the job: the evidence is
    about capacity at that price, not about dearer pools.

    ``estimate="lower"``: a rejected zone's rate (and the market's multiplier) is the
    least the evidence forces at level ``alpha`` (:func:`poisson_mean_lower`: the zone's
    mean up-run ``H / lam_low(n)`` instead of ``H / n``), not the maximum-likelihood one:
    a burst of preemptions in flapping zones moves the statistics only as far as it
    must."""
    mu = np.asarray(mean_up_hours, dtype=float)
    held = np.asarray(held_hours, dtype=float)
    n = np.asarray(own_preemptions, dtype=np.int64)
    out = mu.copy()
    lam = held / mu
    rejected = np.zeros(mu.size, dtype=bool)
    for z in range(mu.size):
        if n[z] >= SHIFT_MIN_PREEMPTIONS and poisson_tail(float(lam[z]), int(n[z])) < alpha:
            rejected[z] = True
            events = poisson_mean_lower(int(n[z]), alpha) if estimate == "lower" else float(n[z])
            out[z] = min(mu[z], held[z] / events)
    if not market_wide:
        return out
    groups = [np.ones(mu.size, dtype=bool)] if regions is None else \
        [np.array([r == g for r in regions]) for g in dict.fromkeys(regions)]
    for members in groups:
        if history_rejected(mu[members], held[members], n[members], alpha):
            total, expected = int(n[members].sum()), float(lam[members].sum())
            k = (poisson_mean_lower(total, alpha) if estimate == "lower" else total) / expected
            scale = members & ~rejected & (True if scale_mask is None else np.asarray(scale_mask))
            out[scale] = mu[scale] / max(1.0, k)
    return out


def current_down_hours(history: np.ndarray, gap_hours: float) -> np.ndarray:
    """Hours each zone has been down at the end of ``history`` (zones x ticks, bool): the
    trailing run of down ticks, 0 for a zone up at the last tick. On a probed
    observation this is the job's belief (the last observed state carried forward)."""
    h = np.asarray(history, dtype=bool)
    if h.ndim != 2:
        raise ValueError(f"history must be zones x ticks, got shape {h.shape}")
    up_at = np.where(h.any(axis=1), h.shape[1] - 1 - np.argmax(h[:, ::-1], axis=1), -1)
    return (h.shape[1] - 1 - up_at) * gap_hours


def mean_down_with_current(down_total_hours: np.ndarray, regains: np.ndarray,
                           current_hours: np.ndarray, gap_hours: float) -> np.ndarray:
    """Mean down time (h) per zone counting the outage in progress: ``(down hours in the
    window + hours the current outage has lasted) / (regains + 1)``, at least one tick.

    :class:`PriorStats`'s ``mean_down_hours`` is the same without the outage in
    progress; a zone never seen down before the job gets one tick there, however long
    the job has waited for it. Counting the censored run (what it has lasted so far) is
    the usual estimate of an exponential mean from censored observations, with
    ``PriorStats``'s conservative ``+ 1`` in the denominator."""
    tot = np.asarray(down_total_hours, dtype=float) + np.asarray(current_hours, dtype=float)
    return np.maximum(tot / (np.asarray(regains, dtype=float) + 1.0), gap_hours)


PATIENCE_MIN_RUNS = 3
"""``residual_wait_ticks``: the history's conditional residual is used only while at least
this many of the zone's down-runs outlasted the outage in progress. Structural, not
fitted: the empirical residual ``E[D - a | D > a]`` over ``m`` runs is, for ``m = 1``, the
one longest run's remainder (an order statistic, not a mean: it shrinks to one tick as
``a`` nears the longest outage ever seen, i.e. it says "nearly over" exactly where the
history stops knowing), and with ``m = 2`` still the midpoint of two such remainders; 3 is
also the least number of samples :class:`PriorStats`' neighbour statistic and the hold
ranking (``HOLD_MIN_PREEMPTIONS``) accept."""


def ended_down_run_ticks(up: np.ndarray) -> np.ndarray:
    """Lengths (ticks) of the down-runs of one zone's history ``up`` (bool per tick) that
    ended inside it (a down -> up change; so as many as ``PriorStats.regains``): a run cut
    by the history's start counts at its observed length (censored, a lower bound); the
    run still in progress at the history's end is left out (it is the outage the job
    measures itself)."""
    x = np.asarray(up, dtype=np.int8)
    d = np.diff(np.concatenate([[1], x, [1]]))
    starts, ends = np.flatnonzero(d == -1), np.flatnonzero(d == 1)
    keep = ends < x.size
    return (ends - starts)[keep].astype(np.int64)


def residual_wait_ticks(down_runs_ticks: np.ndarray, age_ticks: int, floor_ticks: float,
                        min_runs: int = PATIENCE_MIN_RUNS) -> float:
    """Expected remaining down time (ticks) of a zone down for ``age_ticks`` so far.

    Within the history's experience (at least ``min_runs`` of its down-runs
    ``down_runs_ticks`` longer than ``age_ticks``): the conditional residual
    ``E[D - a | D > a]`` over those runs. Beyond it (an outage longer than all but a
    couple ever seen, or a zone with no outage in the history): the outage in progress is
    the evidence, remaining ``~ a`` (the doubling / Lindy estimate for an outage of
    unknown law: an outage seen ``a`` ticks in is as likely as not to last ``2 a``),
    never less than ``floor_ticks`` (the history's mean down time, v5's wait)."""
    k = np.asarray(down_runs_ticks, dtype=np.int64)
    a = max(int(age_ticks), 0)
    longer = k[k > a]
    if longer.size >= min_runs:
        return float(np.mean(longer - a))
    return max(float(a), float(floor_ticks))


def runs_after_recovery(up: np.ndarray, gap_hours: float, window_hours: float) -> np.ndarray:
    """Lengths (h) of the up-runs of one zone's history ``up`` (bool per tick) that began
    at most ``window_hours`` after the zone lost capacity: the down-run before the run
    started inside the history and lasted at most ``window_hours``.

    These are the runs a job meets when it relaunches in a zone that preempted it less
    than ``window_hours`` ago and is up again. The history's first run is never one
    (nothing before it, or a down-run whose start is not in the history); the last run
    counts up to the history's end (censored, so conservative)."""
    x = np.asarray(up, dtype=np.int8)
    d = np.diff(np.concatenate([[0], x, [0]]))
    starts, ends = np.flatnonzero(d == 1), np.flatnonzero(d == -1)
    if starts.size < 2:
        return np.zeros(0)
    down = (starts[1:] - ends[:-1]) * gap_hours
    keep = down <= window_hours + 1e-9
    return ((ends[1:] - starts[1:]) * gap_hours)[keep].astype(float)


def up_run_ticks(up: np.ndarray) -> np.ndarray:
    """Lengths (ticks) of the maximal up-runs of one zone's history ``up`` (bool per
    tick); a run cut by either end of the history counts at its observed length
    (censored, so conservative)."""
    x = np.asarray(up, dtype=np.int8)
    d = np.diff(np.concatenate([[0], x, [0]]))
    return (np.flatnonzero(d == -1) - np.flatnonzero(d == 1)).astype(np.int64)


def run_law(runs_ticks: np.ndarray, residual: bool) -> np.ndarray:
    """The law of the run a launch meets, from a zone's up-runs ``runs_ticks``:
    ``p[j - 1]`` = P(the job holds the zone ``j`` ticks before it loses capacity).

    * ``residual=False`` (met at the start of a run: the job saw the zone come back
      up): the plain run law, ``p[j - 1] = #{runs of j ticks} / #runs``.
    * ``residual=True`` (launched at an arbitrary time): renewal theory's residual
      life on the tick grid. The launch falls on an up tick chosen uniformly, so a run
      of ``k`` ticks is met with probability proportional to ``k`` (length bias) and
      at a uniform position in it, leaving ``j`` uniform in ``1..k`` ticks:
      ``p[j - 1] = #{runs of >= j ticks} / sum of the runs' ticks``. Memoryless runs
      (geometric on the grid) give the plain law again; runs of a fixed ``k`` ticks
      give a mean of ``(k + 1) / 2`` ticks (``L / 2`` as the tick shrinks).

    An empty list gives an empty law."""
    k = np.asarray(runs_ticks, dtype=np.int64)
    k = k[k > 0]
    if k.size == 0:
        return np.zeros(0)
    counts = np.bincount(k)[1:].astype(float)
    if not residual:
        return counts / counts.sum()
    at_least = np.cumsum(counts[::-1])[::-1]  # runs of >= j ticks, j = 1..max
    return at_least / float(k.sum())


def run_law_since(runs_ticks: np.ndarray, age_below_ticks: int) -> np.ndarray:
    """The law of the run a launch meets in a zone the job saw down ``a =
    age_below_ticks`` ticks ago (so the run it meets began since: its age is below
    ``a``), as :func:`run_law`: the launch falls on an up tick chosen uniformly among
    those at most ``a - 1`` ticks into their run, so ``p[j - 1]`` is proportional to
    ``#{runs of j .. j + a - 1 ticks}`` (each run of ``L`` ticks has one such tick with
    ``j`` left when ``L - a < j <= L``). ``a = 1`` gives the plain law (met at the start),
    ``a`` beyond the longest run the residual law. An empty list gives an empty law."""
    k = np.asarray(runs_ticks, dtype=np.int64)
    k = k[k > 0]
    if k.size == 0:
        return np.zeros(0)
    a = max(int(age_below_ticks), 1)
    cum = np.concatenate([[0.0], np.cumsum(np.bincount(k)[1:].astype(float))])  # runs <= x
    j = np.arange(1, cum.size)
    w = cum[np.minimum(j + a - 1, cum.size - 1)] - cum[j - 1]
    return w / w.sum()


def expected_hold_hours(law: np.ndarray, gap_hours: float, need_hours: float) -> float:
    """``E[min(R, need)]`` (h) for the run law ``law`` of :func:`run_law` (``R = j``
    ticks of ``gap_hours``): the hours a job that needs ``need_hours`` holds the zone."""
    if law.size == 0:
        return float(need_hours)
    r = np.arange(1, law.size + 1) * gap_hours
    short = r < need_hours
    tail = 1.0 - float(law[short].sum())  # P(R >= need)
    return float(np.dot(law[short], r[short])) + (tail * need_hours if tail > 1e-12 else 0.0)


def hold_hours(runs: np.ndarray, cap_hours: float) -> float:
    """Expected hours a job holds a zone whose up-runs from launch are ``runs`` (h), when
    it needs at most ``cap_hours``: ``E[min(L, cap)]``. With the heavy-tailed runs of
    spot markets (many short runs, a few very long ones) this is well below
    ``min(E[L], cap)``, the cap of the mean that v5's cost per useful hour uses."""
    return float(np.mean(np.minimum(runs, cap_hours))) if runs.size else float(cap_hours)


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
