"""Exact offline lower bound: the cheapest schedule for a job that knows the future.

Dynamic programming over ticks x progress x location, for the same model the simulator
runs (:mod:`fleet.simulation.engine`), with one extra freedom: the offline schedule may
checkpoint whenever it likes, so it never checkpoints periodically and saves right before
it loses an instance (in the last ``checkpoint_hours`` of compute before a preemption, or
billed on the old instance when it moves voluntarily, exactly as the simulator does).
Any online run is therefore a feasible offline schedule, and the DP optimum is a lower
bound on every online policy, with or without notice.

Exactness: time is measured in a quantum ``q`` = gcd(gap, restart, checkpoint) in whole
seconds (15 s for 195 s / 6 min / 1 min), so every transition moves progress by an
integer number of quanta and the DP has no rounding (the work and the deadline are on the
grid too: the quantum divides them). Progress is "effective": a launch
subtracts the restart overhead at once and each held tick adds a gap, which is the same
arithmetic as paying the overhead first. Moves the optimum never makes (leaving during a
restart, a segment that computes less than one checkpoint) are modelled pessimistically,
so they cannot lower the bound. Two such moves can pay off across regions and have their
own exact transitions: a spot launch in another region that only moves committed work
(reclaimed or left during its restart; the checkpoint then lives there, and on-demand
with it), and leaving a launch with no progress yet (nothing to save, no save billed). Where
no quantum fits (times in fractional seconds, or a grid too large), a coarser one rounds
every duration in the bound's favour (work, restart, save and transfer down, deadline up):
still a lower bound, marked ``exact=False``; work or a deadline in fractional seconds alone
are rounded so to whole seconds (the quantum divides those). (Until 2026-11-28 the exact path rounded work up
and the deadline down to the quantum, "which can only raise the bound": a bound above the
optimum is no lower bound.)

State value: minimum $ spent so far. Locations: 0 = idle, 1 = on-demand, 2 + z = spot z.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fleet.market.regions import spec_migration
from fleet.market.traces import MAX_GAP_SECONDS
from fleet.policies.base import IDLE, ON_DEMAND, JobSpec
from fleet.simulation.market import Market

try:  # numba compiles the DP; without it the same code runs (slowly) in Python
    from numba import njit
except ImportError:  # pragma: no cover - numba is a declared dependency of spotfleet[fleet]
    def njit(*args, **kwargs):  # type: ignore[no-redef]
        if args and callable(args[0]):
            return args[0]
        return lambda f: f

_INF = 1e300
# ticks x locations x progress band (see _cells) above which a coarser grid is used.
# The cost-only DP keeps one progress row per location, so its limit is time alone
# (about 1.5 ns per cell on the shared VM: 1.5e9 is about 2 s); with want_plan every
# tick keeps its parent pointers (bytes), so the limit stays where it was.
_MAX_CELLS = 1_500_000_000
_MAX_PLAN_CELLS = 400_000_000


@dataclass(frozen=True)
class OmniscientResult:
    """Optimal offline cost ($) and, when asked, the per-tick plan (location ints)."""

    cost: float
    completion_hours: float
    plan: tuple[int, ...] | None = None
    quantum_seconds: int = 0
    exact: bool = True  # False: a coarser quantum was needed; still a lower bound


def quantum_seconds(gap_seconds: float, restart_hours: float, checkpoint_hours: float) -> int:
    """The DP's time quantum: gcd of gap, restart and checkpoint time in whole seconds."""
    vals = {"gap_seconds": gap_seconds, "restart_hours*3600": restart_hours * 3600.0,
            "checkpoint_hours*3600": checkpoint_hours * 3600.0}
    ints = []
    for name, v in vals.items():
        iv = round(v)
        if abs(v - iv) > 1e-6:
            raise ValueError(
                f"omniscient bound needs whole seconds: {name} = {v!r}; round the restart "
                "and checkpoint times to whole seconds")
        ints.append(int(iv))
    q = 0
    for iv in ints:
        q = math.gcd(q, iv)
    return max(q, 1)


def _divisors(n: int) -> list[int]:
    """The divisors of ``n`` >= 1, ascending, in O(sqrt(n)) steps (a scan of 1..n took 95 s
    for a 1000-day tick in code that builds a Market without the loader's one-day cap)."""
    small, large = [], []
    d = 1
    while d * d <= n:
        if n % d == 0:
            small.append(d)
            if d * d != n:
                large.append(n // d)
        d += 1
    return small + large[::-1]


@njit(cache=True)
def _dp(avail, g_u, r_u, c_u, w_u, d_u, unit_cost, want_plan, par, lsrc):  # pragma: no cover
    """Single-region DP with parent pointers (compiled). ``unit_cost[L, j]``: $ per
    quantum held at location L during tick j.

    Returns (best cost, completion quanta, end tick, end location, end p, end mode).
    """
    n_z, n_t = avail.shape
    n_l = n_z + 2
    off = r_u + 2 * c_u + 2 * g_u
    size = w_u + off + 1
    v = np.full((n_l, size), _INF)
    v2 = np.full((n_l, size), _INF)
    leave = np.full(size, _INF)
    alive = np.zeros(n_l, dtype=np.bool_)  # rows of v with a finite entry
    alive2 = np.zeros(n_l, dtype=np.bool_)
    dirty2 = np.ones(n_l, dtype=np.bool_)  # rows of v2 that may hold stale values
    v[0, off] = 0.0
    alive[0] = True
    best = _INF
    best_t = -1
    best_j = -1
    best_l = -1
    best_p = 0
    best_mode = 0
    for j in range(n_t):
        t0 = j * g_u
        if t0 >= d_u:
            break
        lo = max(-off + c_u, w_u - (d_u - t0))
        hi = min(j * g_u, w_u - 1)
        if lo > hi:
            break
        lo2 = max(-off + c_u, w_u - (d_u - t0 - g_u))
        hi2 = min((j + 1) * g_u, w_u - 1)
        # 1. leave vector: best value of being free (idle or about to launch) at tick j
        for p in range(lo - c_u, hi + 1):
            leave[p + off] = _INF
        for p in range(lo, hi + 1):
            leave[p + off] = v[0, p + off]
            if want_plan:
                lsrc[j, p + off] = 0
        for loc in range(1, n_l):
            if not alive[loc]:
                continue
            ride = loc >= 2 and not avail[loc - 2, j]
            cs = c_u * unit_cost[loc, j]
            for p in range(lo, hi + 1):
                x = v[loc, p + off]
                if x >= _INF:
                    continue
                if ride:  # preempted at this boundary: saved in the last C of tick j-1
                    q = p - c_u
                    if x < leave[q + off]:
                        leave[q + off] = x
                        if want_plan:
                            lsrc[j, q + off] = loc
                else:  # voluntary move: save billed on the old instance
                    y = x + cs
                    if y < leave[p + off]:
                        leave[p + off] = y
                        if want_plan:
                            lsrc[j, p + off] = loc
        # 2. next tick
        for loc in range(n_l):
            alive2[loc] = False
            if dirty2[loc]:
                for p in range(lo2, hi2 + 1):
                    v2[loc, p + off] = _INF
                dirty2[loc] = False
        for p in range(max(lo - c_u, lo2), min(hi, hi2) + 1):
            x = leave[p + off]
            if x < v2[0, p + off]:
                v2[0, p + off] = x
                alive2[0] = True
                if want_plan:
                    par[j, 0, p + off] = -2
        for loc in range(1, n_l):
            if loc >= 2 and not avail[loc - 2, j]:
                continue
            uc = unit_cost[loc, j]
            tick_cost = g_u * uc
            for p in range(lo, hi + 1 if alive[loc] else lo):  # stay
                x = v[loc, p + off]
                if x >= _INF:
                    continue
                q = p + g_u
                if q >= w_u:
                    need = w_u - p
                    if t0 + need <= d_u:
                        y = x + need * uc
                        if y < best:
                            best, best_t, best_j, best_l, best_p, best_mode = (
                                y, t0 + need, j, loc, p, 0)
                elif q >= lo2:
                    y = x + tick_cost
                    if y < v2[loc, q + off]:
                        v2[loc, q + off] = y
                        alive2[loc] = True
                        if want_plan:
                            par[j, loc, q + off] = -1
            for p in range(lo - c_u, hi + 1):  # launch here this tick
                x = leave[p + off]
                if x >= _INF:
                    continue
                q = p - r_u + g_u
                if q >= w_u:
                    need = w_u - p + r_u
                    if t0 + need <= d_u:
                        y = x + need * uc
                        if y < best:
                            best, best_t, best_j, best_l, best_p, best_mode = (
                                y, t0 + need, j, loc, p, 1)
                elif q >= lo2:
                    y = x + tick_cost
                    if y < v2[loc, q + off]:
                        v2[loc, q + off] = y
                        alive2[loc] = True
                        if want_plan:
                            par[j, loc, q + off] = -3
        # rows written this tick become v; the old v rows are stale in the new v2
        for loc in range(n_l):
            dirty2[loc] = alive[loc]
        v, v2 = v2, v
        alive, alive2 = alive2, alive
    return best, best_t, best_j, best_l, best_p, best_mode


@njit(cache=True)
def _dp_cost(avail, zreg, n_r, g_u, r_u, c_u, m_u, w_u, d_u, spot_uc, od_uc,
             mig_usd, od_first, od_keep):  # pragma: no cover
    """Cost-only DP over regions (compiled). Returns (best cost, completion quanta).

    Locations: 0 = fresh (never launched), 1..R = idle with the checkpoint in region r,
    R+1..2R = on-demand in region r, 2R+1+z = spot in zone z (region ``zreg[z]``).
    ``spot_uc[z, j]`` / ``od_uc[r]``: $ per quantum held. A spot launch in another region
    than the checkpoint's costs ``mig_usd`` and ``m_u`` more quanta of overhead.
    On-demand in region r is launched from the checkpoint's region r once work is
    committed (p > 0). With nothing committed there is nothing to move: after a launch in
    a region with ``od_keep[r]`` (tied for the cheapest on-demand) on-demand runs there,
    else (and at the first launch) in ``od_first``; ``od_first`` = -1: in any region.
    """
    n_z, n_t = avail.shape
    n_l = 1 + 2 * n_r + n_z
    off = r_u + m_u + 2 * c_u + 2 * g_u
    size = w_u + off + 1
    v = np.full((n_l, size), _INF)
    v2 = np.full((n_l, size), _INF)
    leave = np.full((n_r, size), _INF)
    m1 = np.full(size, _INF)
    m2 = np.full(size, _INF)
    mk = np.full(size, _INF)  # best leave over the regions without od_keep
    a1 = np.zeros(size, dtype=np.int64)
    alive = np.zeros(n_l, dtype=np.bool_)
    alive2 = np.zeros(n_l, dtype=np.bool_)
    v[0, off] = 0.0
    alive[0] = True
    best = _INF
    best_t = -1
    for j in range(n_t):
        t0 = j * g_u
        if t0 >= d_u:
            break
        lo = max(-off + c_u, w_u - (d_u - t0))
        hi = min(j * g_u, w_u - 1)
        if lo > hi:
            break
        lo2 = max(-off + c_u, w_u - (d_u - t0 - g_u))
        hi2 = min((j + 1) * g_u, w_u - 1)
        fresh = alive[0] and lo <= 0 and v[0, off] < _INF
        # 1. leave vectors per region
        for r in range(n_r):
            for p in range(lo - c_u + off, hi + 1 + off):
                leave[r, p] = _INF
            if alive[1 + r]:
                for p in range(lo + off, hi + 1 + off):
                    leave[r, p] = v[1 + r, p]
        for loc in range(1 + n_r, n_l):
            if not alive[loc]:
                continue
            row = v[loc]
            if loc >= 1 + 2 * n_r:
                z = loc - 1 - 2 * n_r
                rl = zreg[z]
                if not avail[z, j]:
                    for p in range(lo + off, hi + 1 + off):
                        if row[p] < leave[rl, p - c_u]:
                            leave[rl, p - c_u] = row[p]
                    continue
                cs = c_u * spot_uc[z, j]
            else:
                rl = loc - 1 - n_r
                cs = c_u * od_uc[rl]
            for p in range(lo + off, hi + 1 + off):
                # the save on the way out; with no progress (p <= 0) there is nothing to
                # save, as in the engine (a launch left right at the end of its restart)
                y = row[p] + cs if p > off else row[p]
                if y < leave[rl, p]:
                    leave[rl, p] = y
        if n_r > 1:
            for p in range(lo - c_u + off, hi + 1 + off):
                b1 = _INF
                b2 = _INF
                bk = _INF
                i1 = -1
                for r in range(n_r):
                    x = leave[r, p]
                    if x < b1:
                        b2 = b1
                        b1 = x
                        i1 = r
                    elif x < b2:
                        b2 = x
                    if not od_keep[r] and x < bk:
                        bk = x
                m1[p] = b1
                m2[p] = b2
                mk[p] = bk
                a1[p] = i1
        # 2. next tick
        for loc in range(n_l):
            for p in range(lo2 + off, hi2 + 1 + off):
                v2[loc, p] = _INF
            alive2[loc] = False
        if fresh and lo2 <= 0:
            v2[0, off] = v[0, off]
            alive2[0] = True
        pa = max(lo - c_u, lo2)
        pb = min(hi, hi2)
        if pa <= pb:
            for r in range(n_r):
                for p in range(pa + off, pb + 1 + off):
                    v2[1 + r, p] = leave[r, p]
                alive2[1 + r] = True
            # a spot launch in another region that moves committed work (p > 0) and ends
            # in its restart (reclaimed or left at the next tick, nothing computed): one
            # tick of the zone and the egress billed, the checkpoint then in the zone's
            # region with the progress it had. The launch's own arithmetic (overhead
            # first, a save at the preemption) would lose progress the engine keeps.
            if n_r > 1:
                for z in range(n_z):
                    if not avail[z, j]:
                        continue
                    if r_u + m_u < g_u and (j + 1 >= n_t or avail[z, j + 1]):
                        continue  # the restart ends within the tick: the launch computes
                    rz = zreg[z]
                    tcz = g_u * spot_uc[z, j] + mig_usd
                    for p in range(max(pa, 1) + off, pb + 1 + off):
                        x = m1[p] if a1[p] != rz else m2[p]
                        if x + tcz < v2[1 + rz, p]:
                            v2[1 + rz, p] = x + tcz
        for loc in range(1 + n_r, n_l):
            spot = loc >= 1 + 2 * n_r
            if spot:
                z = loc - 1 - 2 * n_r
                if not avail[z, j]:
                    continue
                rl = zreg[z]
                uc = spot_uc[z, j]
            else:
                z = -1
                rl = loc - 1 - n_r
                uc = od_uc[rl]
            alive2[loc] = True
            tc = g_u * uc
            dst = v2[loc]
            if alive[loc]:  # stay
                src = v[loc]
                for p in range(max(lo, lo2 - g_u), min(hi, w_u - 1 - g_u) + 1):
                    y = src[p + off] + tc
                    if y < dst[p + g_u + off]:
                        dst[p + g_u + off] = y
                for p in range(max(lo, w_u - g_u), hi + 1):
                    need = w_u - p
                    if t0 + need <= d_u and src[p + off] + need * uc < best:
                        best = src[p + off] + need * uc
                        best_t = t0 + need
            # launch from the same region. On-demand runs where the checkpoint is once work
            # is committed (p > 0); with nothing committed (p <= 0) there is nothing to move:
            # in the last launch's region if od_keep, else in od_first (-1: any region)
            od_free = not spot and od_first < 0 and n_r > 1
            od_here = not spot and od_keep[rl]
            od_pull = not spot and rl == od_first and n_r > 1
            # (the two loops below pick their source alike; a shared @njit helper for it,
            # tried in session 7, gave the same bounds but made the DP 3-7x slower)
            for p in range(max(lo - c_u, lo2 + r_u - g_u), min(hi, w_u - 1 + r_u - g_u) + 1):
                if spot or p > 0:
                    x = leave[rl, p + off]
                elif od_free:
                    x = m1[p + off]
                else:
                    x = leave[rl, p + off] if od_here else _INF
                    if od_pull and mk[p + off] < x:
                        x = mk[p + off]
                    if x >= _INF:
                        continue
                q = p - r_u + g_u + off
                y = x + tc
                if y < dst[q]:
                    dst[q] = y
            for p in range(max(lo - c_u, w_u + r_u - g_u), hi + 1):
                if spot or p > 0:
                    x = leave[rl, p + off]
                elif od_free:
                    x = m1[p + off]
                else:
                    x = leave[rl, p + off] if od_here else _INF
                    if od_pull and mk[p + off] < x:
                        x = mk[p + off]
                    if x >= _INF:
                        continue
                need = w_u - p + r_u
                if t0 + need <= d_u and x + need * uc < best:
                    best = x + need * uc
                    best_t = t0 + need
            # spot launch from another region; with nothing committed (p <= 0) there is
            # nothing to copy: no egress, no transfer
            if spot and n_r > 1:
                for p in range(max(lo - c_u, lo2 + r_u - g_u), hi + 1):
                    x = m1[p + off] if a1[p + off] != rl else m2[p + off]
                    if x >= _INF:
                        continue
                    if p > 0:
                        rm = r_u + m_u
                        mu = mig_usd
                    else:
                        rm = r_u
                        mu = 0.0
                    q = p - rm + g_u
                    if q >= w_u:
                        need = w_u - p + rm
                        if t0 + need <= d_u and x + mu + need * uc < best:
                            best = x + mu + need * uc
                            best_t = t0 + need
                    elif q >= lo2:
                        y = x + mu + tc
                        if y < dst[q + off]:
                            dst[q + off] = y
            # first launch (nothing to move)
            if fresh and (spot or od_first < 0 or rl == od_first):
                q = -r_u + g_u
                if q >= w_u:
                    need = w_u + r_u
                    if t0 + need <= d_u and v[0, off] + need * uc < best:
                        best = v[0, off] + need * uc
                        best_t = t0 + need
                elif q >= lo2:
                    y = v[0, off] + tc
                    if y < dst[q + off]:
                        dst[q + off] = y
        v, v2 = v2, v
        alive, alive2 = alive2, alive
    return best, best_t


def _cells(market: Market, spec: JobSpec, q: int, g_u: int, r_u: int, c_u: int, m_u: int) -> int:
    qh = q / 3600.0
    w_u = int(math.ceil(spec.work_hours / qh - 1e-9))
    d_u = int(math.floor(spec.deadline_hours / qh + 1e-9))
    n_t = int(math.ceil(d_u / g_u))
    n_l = market.n_zones + 2 * len(market.region_names) + 1
    band = max(1, min(d_u - w_u, w_u) + 2 * (r_u + c_u + g_u + m_u))
    return n_t * n_l * band


def omniscient_bound(market: Market, spec: JobSpec, start_tick: int,
                     want_plan: bool = False, max_cells: int | None = None,
                     first_on_demand_region: int | None = None) -> OmniscientResult:
    """Cheapest offline schedule for ``spec`` starting at ``start_tick`` ($, hours).
    A market whose tick is longer than a day (``MAX_GAP_SECONDS``, the loader's limit;
    only a Market built in code can have one) is refused with a ``ValueError``.

    Per-tick spot prices, per-region on-demand prices and cross-region migration (egress
    $ and transfer time, :mod:`fleet.market.regions`) are those the simulator charges.
    The time quantum is gcd(gap, restart, checkpoint, transfer, work, deadline) in whole
    seconds (exact); work or a deadline in fractional seconds are rounded to whole seconds,
    work down and deadline up (a lower bound within a second, ``exact=False``).
    When that DP would exceed ``max_cells`` (tiny ticks or odd durations; default 1.5e9
    ticks x locations x progress cells for the cost, about 2 s, and 4e8 with
    ``want_plan``, whose parent pointers take a byte per cell), a coarser quantum dividing
    the gap is used with restart, checkpoint and transfer times and the work rounded DOWN
    and the deadline UP: still a lower bound, marked ``exact=False``.

    ``want_plan`` also returns the location of every tick up to completion (single-region
    markets only; memory grows with ticks x zones x work; meant for checks and plots).

    ``first_on_demand_region`` (index into ``market.region_names``): the region of an
    on-demand launch while nothing is committed (the first launch, or after launches that
    saved nothing in a region not tied for the cheapest on-demand price, which keeps
    on-demand; once work is committed on-demand runs where the checkpoint is). ``None``
    (default): the simulator's, the cheapest on-demand region (the first on a tie), so
    that the DP and the simulator allow the same plans; -1: any region (what a controller
    could do that picks the on-demand region; the published bound before the fix;
    benchmarks/fleet_billing_quirks.py). Cost-only. A cross-region move with nothing
    committed is free, as in the simulator.
    """
    if market.gap_seconds > MAX_GAP_SECONDS:
        # the DP sizes each progress row by two ticks: a 1000-day tick with a restart time
        # in fractional seconds (quantum 1 s) took 49 s and gigabytes; within a day, < 2 s
        raise ValueError(
            f"omniscient bound: a tick of {market.gap_seconds:g} s "
            f"({market.gap_seconds / 3600.0:g} h) is longer than one day "
            f"({MAX_GAP_SECONDS:g} s, the longest tick the trace loader reads); give the "
            "market ticks of at most a day (check the unit: seconds), or skip the bound "
            "(fleet-sim --no-omniscient)")
    if max_cells is None:
        max_cells = _MAX_PLAN_CELLS if want_plan else _MAX_CELLS
    mig = spec_migration(spec, market.clouds[0] if market.clouds else "aws")
    n_r = len(market.region_names)
    mig_usd, mig_s = (mig.usd, mig.seconds) if n_r > 1 else (0.0, 0.0)
    exact = True
    try:
        q = quantum_seconds(market.gap_seconds, spec.restart_hours, spec.checkpoint_hours)
        if mig_s:
            q = math.gcd(q, int(round(mig_s))) if abs(mig_s - round(mig_s)) < 1e-6 else 0
            if q == 0:
                raise ValueError("transfer time is not whole seconds")
        # the work and the deadline fall on the grid too: rounded to a quantum they are not
        # (work up, deadline down) the bound was ABOVE the optimum (until 2026-11-28: with
        # --restart-minutes 0 --checkpoint-minutes 0 the quantum was the 195 s tick, 8 h of
        # work became 148 ticks = 8.017 h, and greedy_1zone paid 7.344 $ under a 7.359 $
        # "bound"). Work or a deadline in fractional seconds (SkyNomad's work = deadline / D/W)
        # fall on no grid: the work is rounded down and the deadline up to whole seconds (in
        # the bound's favour: a lower bound within a second of the optimum, exact=False)
        w_s, d_s = (x * 3600.0 for x in (spec.work_hours, spec.deadline_hours))
        if abs(w_s - round(w_s)) > 1e-6 or abs(d_s - round(d_s)) > 1e-6:
            exact = False
            w_s, d_s = math.floor(w_s + 1e-6), math.ceil(d_s - 1e-6)
        q = math.gcd(math.gcd(q, int(round(w_s))), int(round(d_s)))
        units = [int(round(x * 3600.0 / q)) for x in (market.gap_hours, spec.restart_hours,
                                                      spec.checkpoint_hours, mig_s / 3600.0)]
        if _cells(market, spec, q, *units) > max_cells:
            raise ValueError("too large")
    except ValueError:
        gap = market.gap_seconds
        if abs(gap - round(gap)) > 1e-6:
            raise ValueError(f"omniscient bound needs a whole-second tick, got {gap!r} s") from None
        gap_i = int(round(gap))
        exact = False
        q = 0
        for cand in _divisors(gap_i):
            units = [gap_i // cand] + [int(math.floor(x * 3600.0 / cand + 1e-9)) for x in (
                spec.restart_hours, spec.checkpoint_hours, mig_s / 3600.0)]
            if _cells(market, spec, cand, *units) <= max_cells:
                q = cand
                break
        if q == 0:
            raise ValueError(f"omniscient DP too large even with one quantum per tick "
                             f"({gap_i} s); shorten the job or the deadline") from None
    qh = q / 3600.0
    g_u = int(round(market.gap_seconds / q))
    r_u = int(math.floor(spec.restart_hours / qh + 1e-9))
    c_u = int(math.floor(spec.checkpoint_hours / qh + 1e-9))
    m_u = int(math.floor(mig_s / q + 1e-9))
    if exact:
        w_u = int(math.ceil(spec.work_hours / qh - 1e-9))
        d_u = int(math.floor(spec.deadline_hours / qh + 1e-9))
    else:
        w_u = max(1, int(math.floor(spec.work_hours / qh + 1e-9)))
        d_u = int(math.ceil(spec.deadline_hours / qh - 1e-9))
    n_t = int(math.ceil(d_u / g_u))
    if start_tick < 0 or start_tick + n_t > market.n_ticks:
        raise ValueError(f"start_tick={start_tick}: the deadline window needs {n_t} ticks; "
                         f"the market has {market.n_ticks}")
    avail = np.ascontiguousarray(market.available[:, start_tick:start_tick + n_t])
    sp, od = market.prices_for(spec.spot_price, spec.on_demand_price)
    spot_uc = np.ascontiguousarray(sp[:, start_tick:start_tick + n_t]) * qh
    zreg = market.region_index
    od_r = np.array([od[zreg == r].min() for r in range(n_r)])
    od_uc = od_r * qh
    if first_on_demand_region is None:
        od_all = market.prices_for(spec.spot_price, spec.on_demand_price)[1]
        first_on_demand_region = int(np.argmin(
            [od_all[market.region_index == r].min() for r in range(n_r)]))
    if not -1 <= first_on_demand_region < n_r:
        raise ValueError(f"first_on_demand_region={first_on_demand_region!r}: the market has "
                         f"{n_r} regions")
    if want_plan:
        if n_r > 1:
            raise ValueError("want_plan supports single-region markets only; pass a subset of "
                             "one region (Market.subset) or ask for the cost alone")
        n_l = market.n_zones + 2
        unit = np.empty((n_l, n_t))
        unit[0] = 0.0
        unit[1] = od_uc[0]
        unit[2:] = spot_uc
        off = r_u + 2 * c_u + 2 * g_u
        size = w_u + off + 1
        par = np.zeros((n_t, n_l, size), dtype=np.int8)
        lsrc = np.zeros((n_t, size), dtype=np.int8)
        best, best_t, j, loc, p, mode = _dp(avail, g_u, r_u, c_u, w_u, d_u, unit, True,
                                            par, lsrc)
    else:
        od_keep = od_r <= od_r.min()  # regions tied for the cheapest on-demand price
        best, best_t = _dp_cost(avail, zreg, n_r, g_u, r_u, c_u, m_u, w_u, d_u, spot_uc,
                                od_uc, mig_usd, int(first_on_demand_region), od_keep)
    if best >= _INF:
        raise ValueError("no offline schedule meets the deadline (deadline < work + restart?)")
    plan = None
    if want_plan:
        plan = _reconstruct(par, lsrc, avail, g_u, r_u, c_u, off, j, loc, p, mode)
    return OmniscientResult(cost=float(best), completion_hours=best_t * qh, plan=plan,
                            quantum_seconds=q, exact=exact)


def _to_loc(code: int) -> int:
    return IDLE if code == 0 else (ON_DEMAND if code == 1 else code - 2)


def _reconstruct(par, lsrc, avail, g_u, r_u, c_u, off, j, loc, p, mode) -> tuple[int, ...]:
    """Walk the parent pointers back from the completing tick; returns locations per tick."""
    plan = [_to_loc(loc)]
    # state at start of tick j: (loc, p) held during j-1 (stay) or free via leave (launch)
    if mode == 0:
        cur_loc, cur_p, free = loc, p, False
    else:
        cur_loc, cur_p, free = -1, p, True
    jj = j
    while jj > 0:
        if free:
            # leave[cur_p] at tick jj came from lsrc
            src = int(lsrc[jj, cur_p + off])
            if src == 0:
                cur_loc, free = 0, False
            else:
                ride = src >= 2 and not avail[src - 2, jj]
                cur_loc = src
                if ride:
                    cur_p = cur_p + c_u
                free = False
        # now (cur_loc, cur_p) is the state at the start of tick jj = after tick jj-1
        how = int(par[jj - 1, cur_loc, cur_p + off])
        plan.append(_to_loc(cur_loc))
        if how == -1:  # stayed at cur_loc during jj-1
            cur_p -= g_u
        elif how == -3:  # launched at cur_loc in tick jj-1 from leave[cur_p - g_u + r_u]
            cur_p = cur_p - g_u + r_u
            free = True
        elif how == -2:  # idle during jj-1: came from leave[cur_p]
            free = True
        else:
            raise AssertionError(f"broken parent pointer at tick {jj - 1}")
        jj -= 1
    plan.reverse()
    return tuple(plan)
