"""What checkpointing without a preemption notice must cost: a floor for online policies.

With a notice the simulator's emergency save loses ``C`` per preemption; without one the
job loses the work since its last save and pays for periodic saves. How much of that
no policy can avoid depends on what it knows about *when* the preemption comes. The
floor here gives a policy more than any online policy has: the exact distribution of
each zone's up-run lengths over the **whole** trace window (future included), with the
hazard's dependence on the run's age (many short runs, long survivors), but not the
instant of the next preemption. For a job of ``R`` minutes of work run in one zone it
computes the Bayes-optimal checkpoint schedule (a save after any amount of compute,
depending on the work committed and the age of the current run; a preemption loses the
work since the last save, then a restart; the job relaunches on a fresh draw) and
compares its expected waste with the notice's (``C`` plus the restart per preemption):

* :func:`zone_waste` — expected waste per minute of work, without and with a notice,
  for one zone's run-length distribution (dynamic programming, exact on a 1-minute grid;
  a memoryless zone gives Young/Daly's ``sqrt(2 C / M)`` to first order);
* :func:`schedule` — that optimal schedule itself (compute before the next save per
  work committed and run age);
* :func:`zone_excess` — the no-notice excess per minute of work of every zone, for runs
  launched at the start of an up-run (``fresh``) or at a random up tick (``residual``).

docs/fleet-policies-tuning-log.md (*The no-notice gap, measured*) prices each zone's spot hours up by
its excess and runs the exact omniscient DP on that market: a "no-notice oracle" that
knows availability and prices but pays, per useful hour in a zone, at least the waste an
optimal no-notice schedule has there. The time the waste takes is not charged (that only
lowers the floor further).
"""

from __future__ import annotations

import math

import numpy as np

try:
    from numba import njit
except ImportError:  # pragma: no cover - numba is a declared dependency of spotfleet[fleet]
    def njit(*args, **kwargs):  # type: ignore[no-redef]
        if args and callable(args[0]):
            return args[0]
        return lambda f: f


@njit(cache=True)
def _no_notice(surv, m1, work, c, d):  # pragma: no cover - compiled
    """Min expected waste (minutes) to complete ``work`` minutes from a fresh run.

    ``surv[x]`` = P(X > x), ``m1[y]`` = sum over x <= y of x P(X = x), X = compute minutes
    of a run (after its restart). State (committed w, age a of the current run at its
    last save). Action: compute ``T`` then save (``c``), or compute to the end. A
    preemption inside the segment loses everything since ``a`` plus a restart ``d`` and
    restarts from (w, 0), whose value ``v_w`` solves ``v = min_T A_T / p_T``. Returns the
    value and the optimal compute before the next save per state (``rem``: run to the end)."""
    amax = 2 * work + 1
    val = np.zeros((work + 1, amax + 1))
    arg = np.zeros((work + 1, amax + 1), np.int32)
    for w in range(work - 1, -1, -1):
        rem = work - w
        v = 1e300
        bt = rem
        for t in range(1, rem + 1):
            b = min(rem if t == rem else t + c, amax)
            ps = surv[b]
            if ps <= 0.0:
                continue
            fail = m1[b] + (1.0 - ps) * d
            succ = 0.0 if t == rem else c + val[w + t, b]
            x = (fail + ps * succ) / ps
            if x < v:
                v = x
                bt = t
        val[w, 0] = v
        arg[w, 0] = bt
        for a in range(1, min(2 * w, amax) + 1):
            sa = surv[a]
            if sa <= 0.0:
                val[w, a] = v
                arg[w, a] = rem
                continue
            best = 1e300
            bt = rem
            for t in range(1, rem + 1):
                b = min(a + (rem if t == rem else t + c), amax)
                ps = surv[b] / sa
                lost = ((m1[b] - m1[a]) - a * (surv[a] - surv[b])) / sa
                x = lost + (1.0 - ps) * (d + v) + ps * (0.0 if t == rem else c + val[w + t, b])
                if x < best:
                    best = x
                    bt = t
            val[w, a] = best
            arg[w, a] = bt
    return val[0, 0], arg


@njit(cache=True)
def _with_notice(p, work, c, d):  # pragma: no cover - compiled
    """Expected waste (minutes) with a notice: no periodic saves; a preemption after x
    minutes of compute commits ``x - c`` (the emergency save) and costs ``c`` + restart."""
    val = np.zeros(work + 1)
    for w in range(work - 1, -1, -1):
        rem = work - w
        acc = 0.0
        selfp = 0.0
        selfw = 0.0
        for x in range(p.size):
            if p[x] == 0.0 or x >= rem:
                continue
            if x <= c:
                selfp += p[x]
                selfw += p[x] * (x + d)
            else:
                acc += p[x] * (c + d + val[w + x - c])
        val[w] = (acc + selfw) / (1.0 - selfp)
    return val[0]


def _distribution(run_minutes: np.ndarray, work_minutes: int, checkpoint_minutes: int
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    xs = np.asarray(run_minutes, dtype=np.int64)
    xs = xs[xs >= 1]
    if xs.size == 0:
        raise ValueError("no run with at least one minute of compute")
    if work_minutes < 1 or checkpoint_minutes < 1:
        raise ValueError("work and checkpoint need at least one minute")
    cap = 2 * work_minutes + 2
    p = np.bincount(np.minimum(xs, cap), minlength=cap + 1).astype(float) / xs.size
    return p, np.maximum(1.0 - np.cumsum(p), 0.0), np.cumsum(np.arange(p.size) * p)


def schedule(run_minutes: np.ndarray, work_minutes: int, checkpoint_minutes: int = 1,
             restart_minutes: int = 6) -> np.ndarray:
    """The Bayes-optimal no-notice schedule: ``out[w, a]`` = minutes of compute before the
    next save with ``w`` minutes committed and the current run ``a`` minutes old (after its
    restart) at the last save; ``work_minutes - w`` means run to the end without a save."""
    _, surv, m1 = _distribution(run_minutes, work_minutes, checkpoint_minutes)
    return _no_notice(surv, m1, int(work_minutes), int(checkpoint_minutes), float(restart_minutes))[1]


def zone_waste(run_minutes: np.ndarray, work_minutes: int, checkpoint_minutes: int = 1,
               restart_minutes: int = 6) -> tuple[float, float]:
    """(no-notice, notice) expected waste per minute of work for a job of
    ``work_minutes`` in a zone whose runs give ``run_minutes`` of compute each (after the
    restart; whole minutes; runs with less than one minute are dropped: they cost the
    same with and without a notice). Runs longer than twice the work are capped there
    (the job ends before). Raises ValueError without any usable run."""
    p, surv, m1 = _distribution(run_minutes, work_minutes, checkpoint_minutes)
    nn = _no_notice(surv, m1, int(work_minutes), int(checkpoint_minutes), float(restart_minutes))[0]
    wn = _with_notice(p, int(work_minutes), int(checkpoint_minutes), float(restart_minutes))
    return nn / work_minutes, wn / work_minutes


def run_minutes(available: np.ndarray, gap_minutes: float, restart_minutes: float,
                residual: bool) -> np.ndarray:
    """Compute minutes of the runs a launch gets in one zone: at the start of every up-run
    (``residual=False``) or at every up tick (``residual=True``). An up-run still going
    at the window's end is taken as longer than any job."""
    av = np.asarray(available, dtype=bool)
    z = np.concatenate([[False], av, [False]])
    starts = np.flatnonzero(~z[:-1] & z[1:])
    ends = np.flatnonzero(z[:-1] & ~z[1:])
    out: list[int] = []
    big = 10**7
    for s, e in zip(starts, ends, strict=True):
        k = int(e - s)
        if e == av.size:
            out += [big] * (k if residual else 1)
            continue
        ks = range(1, k + 1) if residual else (k,)
        out += [int(math.floor(j * gap_minutes - restart_minutes)) for j in ks]
    return np.asarray(out, dtype=np.int64)


def zone_excess(available: np.ndarray, gap_seconds: float, work_hours: float,
                checkpoint_hours: float, restart_hours: float, residual: bool) -> np.ndarray:
    """No-notice waste minus notice waste, per hour of work, for every zone (rows of
    ``available``); 0 for a zone with no usable run (never up)."""
    g = gap_seconds / 60.0
    work = int(round(work_hours * 60))
    c = max(1, int(round(checkpoint_hours * 60)))
    d = restart_hours * 60.0
    out = np.zeros(available.shape[0])
    for z in range(available.shape[0]):
        xs = run_minutes(available[z], g, d, residual)
        if not np.any(xs >= 1):
            continue
        nn, wn = zone_waste(xs, work, c, int(round(d)))
        out[z] = max(0.0, nn - wn)
    return out
