"""Preemptive Task Scheduler (GFS §3.4): Alg. 1 (non-preemptive), Alg. 2 (preemptive),
Alg. 3 (entry), plus the placement/preemption variants used by baselines and ablations.

All functions are pure with respect to :class:`ClusterState`: they return a plan
(list of nodes, one entry per pod, and a set of victim job ids) and never mutate the
state; the simulator applies the plan.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from fleet.scheduling.eviction import eviction_score
from fleet.scheduling.state import ClusterState, PTSParams, SimJob

# Placement modes for Alg. 1: "gfs" (three scores + circuit breaker), "pack" (Score1 only,
# GFS-s), "bestfit" (fewest free slots left, YARN-CS/Lyra), "fgd" (fragmentation-aware).
PLACEMENT_MODES = ("gfs", "pack", "bestfit", "fgd")
# Preemption modes for Alg. 2: "gfs" (Eq. 17-19), "gfs-bf" (Lyra's fewest-GPU victims,
# then sparing runs inside their H-hour guarantee, then least unsaved work; GFS-BF), "random" (GFS-p), "youngest" (YARN-CS),
# "lyra" (fewest victim GPUs), "none".
PREEMPTION_MODES = ("gfs", "gfs-bf", "random", "youngest", "lyra", "none")


@dataclass
class Plan:
    nodes: list[int]  # one node per pod
    victims: set[int] = field(default_factory=set)


def node_scores(state: ClusterState, pool: int, is_hp: bool, t: float,
                params: PTSParams) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Score1 (Eq. 13), Score2 (Eq. 14), Score3 (Eq. 16) of the nodes of ``pool``;
    Norm = identity (the ratios already lie in [0, 1]; a lexicographic sort is scale-free)."""
    ids = state.pool_nodes[pool]
    total = state.total[ids]
    s1 = 1.0 - state.free[ids] / total
    s2 = (state.hp[ids] if is_hp else state.spot[ids]) / total
    s3 = eviction_score(state.ebar(pool, t, params), is_hp, params.m)
    return s1, s2, s3


def fragmentation_table(max_slots: int, request_shares: dict[int, float]) -> np.ndarray:
    """FGD-style in-node fragmentation F(f) for f free slots: the expected number of free
    slots a request drawn from ``request_shares`` (slots -> share) cannot use."""
    f = np.arange(max_slots + 1)
    table = np.zeros(max_slots + 1)
    for g, share in request_shares.items():
        table += share * np.where(f < g, f, f % g)
    return table


def non_preemptive(state: ClusterState, job: SimJob, t: float, params: PTSParams,
                   mode: str = "gfs", frag: np.ndarray | None = None,
                   exclude: np.ndarray | None = None) -> Plan | None:
    """Alg. 1: place ``job.w`` pods of ``job.g`` slots on idle slots only, or None."""
    ids = state.pool_nodes[job.pool]
    if ids.size == 0:
        return None
    free = state.free[ids].copy()
    total = state.total[ids]
    ok = np.ones(len(ids), dtype=bool) if exclude is None else ~exclude
    if mode == "gfs":
        s1, s2, s3 = node_scores(state, job.pool, job.is_hp, t, params)
        same = (state.hp[ids] if job.is_hp else state.spot[ids]).astype(float)
        if not job.is_hp:
            ok &= s3 > 0  # circuit breaker: blacklist nodes with Score3 = 0 for spot
    g = job.g
    if mode not in PLACEMENT_MODES:
        raise ValueError(f"unknown placement mode {mode!r}; use one of {PLACEMENT_MODES}")
    if mode == "fgd" and frag is None:
        raise ValueError("mode 'fgd' needs a fragmentation table (frag=...)")
    # gang feasibility upper bound: pods that fit on idle slots of eligible nodes
    if int(np.sum(np.where(ok, free // g, 0))) < job.w:
        return None

    def keys(fr, sm):
        if mode == "gfs":
            # lexicographic <Score1, Score2, Score3>: for nodes of <= 8 GPUs Score1 values
            # differ by >= 1/56 and Score2 values too, so these weights keep the order.
            return (1.0 - fr / total_k) * 1e4 + (sm / total_k) * 100.0 + s3_k
        if mode == "pack":
            return 1.0 - fr / total_k
        if mode == "bestfit":
            return -fr.astype(float)
        return -(frag[fr - np.minimum(fr, g)] - frag[fr]) * 1e3 - fr  # fgd

    total_k = total
    s3_k = s3 if mode == "gfs" else 0.0
    key = np.where(ok & (free >= g), keys(free, same if mode == "gfs" else None), -np.inf)
    out: list[int] = []
    for _ in range(job.w):
        k = int(np.argmax(key))
        if key[k] == -np.inf:
            return None
        free[k] -= g
        if mode == "gfs":
            same[k] += g
        if free[k] >= g:
            sl = slice(k, k + 1)
            total_k = total[sl]
            s3_k = s3[sl] if mode == "gfs" else 0.0
            key[k] = keys(free[sl], same[sl] if mode == "gfs" else None)[0]
        else:
            key[k] = -np.inf
        out.append(int(ids[k]))
    return Plan(out)


def preemption_cost(n_victims: int, waste_gpu_s: float, succeeded: int, evicted: int,
                    capacity_slots: int, params: PTSParams) -> float:
    """Eq. 19: (F+|T|)/(G+F+|T|) + beta * sum(waste) / (sum_k S_k * T)."""
    denom = succeeded + evicted + n_victims
    evict_term = (evicted + n_victims) / denom if denom > 0 else 0.0
    usage_term = waste_gpu_s / (capacity_slots * params.usage_window_s)
    return evict_term + params.beta * usage_term


def _victims_on_node(node_free: int, tasks: list[tuple[int, int, float]], g: int,
                     order_key: Callable[[tuple[int, int, float]], float]) -> tuple[list, int]:
    """Alg. 2 lines 6-14: start from all spot tasks on the node, walk them in ``order_key``
    order and *spare* each one whose GPUs are not needed to fit ``g`` slots.
    Returns (victims, slots available after evicting them)."""
    r = node_free + sum(s for _, s, _ in tasks)
    victims = []
    for task in sorted(tasks, key=order_key):
        if r - task[1] >= g:
            r -= task[1]
        else:
            victims.append(task)
    return victims, r


def preemptive(state: ClusterState, job: SimJob, t: float, params: PTSParams,
               mode: str = "gfs", rng: np.random.Generator | None = None) -> Plan | None:
    """Alg. 2: place an HP job by evicting spot jobs; choose per pod the node of least cost.

    ``mode``: "gfs" (waste-sorted sparing + Eq. 19 cost), "random" (random node, random
    victims; GFS-p), "youngest" (best-fit node, evict most recently started; YARN-CS),
    "lyra" (node whose victims hold the fewest GPUs in total, gangs counted whole).
    Evicting a gang job frees all its pods, including those on other nodes.
    """
    if mode == "none":
        return None
    if mode not in PREEMPTION_MODES:
        raise ValueError(f"unknown preemption mode {mode!r}; use one of {PREEMPTION_MODES}")
    ids = state.pool_nodes[job.pool]
    pos = state.node_pos
    free = state.free[ids].copy()  # local view: victims' pods are added back as chosen
    spot = state.spot[ids].copy()
    g = job.g
    if int(np.sum((free + spot) // g)) < job.w:  # upper bound even if all spot is evicted
        return None
    victims: set[int] = set()
    out: list[int] = []
    jobs = state.jobs
    cap = int(state.pool_capacity[job.pool])
    G, F = state.spot_succeeded, state.spot_evicted
    rng = rng or np.random.default_rng(0)
    tasks_of: dict[int, list] = {}

    def evaluate(c: int):
        """(key, victims on node) for pool position ``c``, or None if it cannot host a pod."""
        fr = int(free[c])
        if fr + int(spot[c]) < g:
            return None
        if c not in tasks_of:
            n = int(ids[c])
            tasks_of[c] = [(j, s, jobs[j].waste(t)) for j, s in state.node_spot_jobs[n].items()]
        tasks = [x for x in tasks_of[c] if x[0] not in victims]
        if mode == "gfs":
            chosen, _ = _victims_on_node(fr, tasks, g, lambda x: -x[2])
            key = (preemption_cost(len(chosen), sum(x[2] for x in chosen), G, F, cap, params),)
        elif mode == "gfs-bf":
            # Lyra's victim rule (spare small runs first; the node whose victims hold the
            # fewest GPUs, gangs counted whole: a big run is the hardest to restart), then
            # the H-hour guarantee (among equal-GPU choices, spare guaranteed runs and break
            # fewest), then checkpoint awareness (spare the runs with the most unsaved work,
            # Eq. 17, and pick the node that loses the least). (Putting the guarantee count
            # *first* queued spot ~10x longer on v2026-low than Lyra; Eq. 19 alone, or the
            # least-waste node first, evicted big runs that then waited a day for a free node.)
            def protected(x):
                gs = jobs[x[0]].guar_start
                return gs >= 0 and t - gs < params.guarantee_s

            chosen, _ = _victims_on_node(fr, tasks, g, lambda x: (jobs[x[0]].slots, not protected(x), -x[2]))
            key = (sum(jobs[x[0]].slots for x in chosen), sum(1 for x in chosen if protected(x)),
                   sum(x[2] for x in chosen))
        elif mode == "youngest":
            chosen, r = [], fr
            for task in sorted(tasks, key=lambda x: -jobs[x[0]].run_start):
                if r >= g:
                    break
                chosen.append(task)
                r += task[1]
            key = (fr + sum(x[1] for x in tasks),)  # best fit on reclaimable slots
        elif mode == "lyra":
            chosen, _ = _victims_on_node(fr, tasks, g, lambda x: jobs[x[0]].slots)
            key = (sum(jobs[x[0]].slots for x in chosen), len(chosen))
        else:  # random: victims in random order until the pod fits
            order = [tasks[i] for i in rng.permutation(len(tasks))]
            chosen, r = [], fr
            for task in order:
                if r >= g:
                    break
                chosen.append(task)
                r += task[1]
            key = (0,)
        return key + (c,), chosen

    evals = {}
    for c in np.flatnonzero(free + spot >= g):
        e = evaluate(int(c))
        if e is not None:
            evals[int(c)] = e
    for _ in range(job.w):
        if not evals:
            return None
        if mode == "random":
            keys = list(evals)
            c = keys[int(rng.integers(len(keys)))]
        else:
            c = min(evals, key=lambda x: evals[x][0])
        chosen = evals[c][1]
        touched = {c}
        for task in chosen:
            j = task[0]
            victims.add(j)
            for n, s in jobs[j].pods.items():
                free[pos[n]] += s
                spot[pos[n]] -= s
                touched.add(int(pos[n]))
        if free[c] < g:
            raise RuntimeError("preemption plan does not free enough slots")  # pragma: no cover
        free[c] -= g
        out.append(int(ids[c]))
        for x in touched:
            e = evaluate(x)
            if e is None:
                evals.pop(x, None)
            else:
                evals[x] = e
    return Plan(out, victims)


def pts_schedule(state: ClusterState, job: SimJob, t: float, params: PTSParams,
                 quota_ok: bool = True, placement: str = "gfs", preemption: str = "gfs",
                 frag: np.ndarray | None = None,
                 rng: np.random.Generator | None = None) -> Plan | None:
    """Alg. 3: quota check, Alg. 1, and for HP jobs Alg. 2 when Alg. 1 fails."""
    if not quota_ok:
        return None
    plan = non_preemptive(state, job, t, params, placement, frag)
    if plan is None and job.is_hp:
        plan = preemptive(state, job, t, params, preemption, rng)
    return plan
