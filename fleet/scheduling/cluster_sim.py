"""Discrete-event simulator of a GPU pool shared by HP and spot jobs (GFS §4).

Events (heapq): job arrival, run finish, spot quota update (every 300 s), Chronus lease
expiry, hourly allocation sample. After the events of one instant, the pending queues
of the touched pools are scanned in the policy's order and each job is tried with
Alg. 3 (quota -> Alg. 1 -> Alg. 2 for HP). Spot jobs checkpoint every ``ckpt`` seconds;
an eviction loses the work since the last checkpoint and requeues the job.

A spot run admitted under the quota is *guaranteed* for H hours (it counts in S_a).
With ``PolicyConfig.backfill`` (GFS-BF, beyond the paper) a spot job the quota refuses
may still start on idle GPUs as a *best-effort* run (by default on any idle GPU; with
``SQAParams.backfill_p > 0`` only while total spot <= C - the ``backfill_p``-quantile HP
bound); its Alg. 2 variant ("gfs-bf") takes Lyra's fewest-GPU victims, then breaks the
fewest guaranteed runs, then loses the least unsaved work (Eq. 17); a best-effort run is
promoted to guaranteed at a quota update when the quota has room for it. With
``PolicyConfig.starvation_guard`` (GFS-BF) spot jobs waiting longer than theta are
scanned before the rest, longest wait first.

Speed: per-node numpy arrays; per-pool free/spot counters for O(1) fast fails; within
one scan a failed (g, w) shape makes every larger shape skip (capacity only shrinks
while a scan places jobs).
"""

from __future__ import annotations

import heapq
import time
from bisect import insort
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from fleet.scheduling.baselines import PolicyConfig
from fleet.scheduling.pts import fragmentation_table, non_preemptive, preemptive
from fleet.scheduling.sqa import SQAParams, eta_eviction_rate, spot_quota, update_eta
from fleet.scheduling.state import ClusterState, PTSParams, SimJob
from fleet.scheduling.trace_format import JobTrace

FINISH, LEASE, ARRIVAL, QUOTA, SAMPLE = 0, 1, 2, 3, 4


@dataclass
class SimResult:
    """Per-job outcomes and time series of one run. Times in seconds."""

    policy: str
    trace: str
    is_hp: np.ndarray
    jct: np.ndarray  # finish - submit (nan if unfinished)
    jqt: np.ndarray  # summed queueing segments
    runs: np.ndarray
    evictions: np.ndarray
    suspends: np.ndarray
    lost_gpu_s: np.ndarray
    alloc_t: np.ndarray  # sample times (s)
    alloc_rate: np.ndarray  # [samples, pools+1]: allocated/total, last column = cluster
    spot_share: np.ndarray  # [samples]: spot slots / capacity
    quota_t: np.ndarray = field(default_factory=lambda: np.zeros(0))
    quota: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))  # [updates, pools]
    eta: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    guar_periods: np.ndarray = field(default_factory=lambda: np.zeros(0))  # H-hour guarantees completed
    wall_s: float = 0.0
    events: int = 0
    unfinished: int = 0

    arrivals_end_s: float = 0.0

    def mean_alloc_pct(self) -> float:
        """Mean cluster GPU allocation rate (%) while jobs still arrive (drain excluded)."""
        m = self.alloc_t <= self.arrivals_end_s
        if not np.any(m):
            return float("nan")
        return float(100.0 * np.mean(self.alloc_rate[m, -1]))

    def summary(self) -> dict[str, float]:
        """Table 5 metrics: HP JCT-p99/JCT/JQT, spot JCT/JQT/eviction rate (%).

        JCT is averaged over finished jobs; JQT over all jobs, a job still waiting when
        the run stops counting its wait so far (a lower bound); ``unfinished`` counts them.
        """
        hp, sp = self.is_hp, ~self.is_hp
        done = ~np.isnan(self.jct)

        def mean(x, m):
            sel = m if x is self.jqt else m & done
            return float(np.mean(x[sel])) if np.any(sel) else float("nan")

        runs = self.runs[sp].sum()
        ev = float(self.evictions[sp].sum())
        completions = float(np.sum(sp & done))
        gh = float(self.guar_periods[sp].sum()) if len(self.guar_periods) else 0.0
        return {
            "hp_jct_p99": float(np.percentile(self.jct[hp & done], 99)) if np.any(hp & done) else float("nan"),
            "hp_jct": mean(self.jct, hp),
            "hp_jqt": mean(self.jqt, hp),
            "spot_jct": mean(self.jct, sp),
            "spot_jqt": mean(self.jqt, sp),
            "spot_evict_pct": float(100.0 * self.evictions[sp].sum() / runs) if runs else 0.0,
            # the GFS authors' logger: evictions / (evictions + guarantee periods completed +
            # completions); every run that outlives its H-hour guarantee adds a success
            "spot_evict_gh_pct": 100.0 * ev / (ev + gh + completions) if ev + gh + completions else 0.0,
            # evictions + lease suspensions (Chronus) per run: the Pareto plot's preemption axis
            "spot_preempt_pct": float(100.0 * (ev + self.suspends[sp].sum()) / runs) if runs else 0.0,
            "alloc_rate_pct": self.mean_alloc_pct(),
            "unfinished": float(self.unfinished),
        }


class ClusterSimulator:
    """Run one policy over one :class:`JobTrace`.

    ``hp_upper``: [pools, hours] forecast of the HP demand upper bound used by SQA (the
    sum over organizations of the max p-quantile over the next H hours, in slots); needed
    when the policy uses a quota. ``hp_backfill``: the same at ``sqa.backfill_p``, the
    bound of GFS-BF's best-effort tier (needed when ``policy.backfill``).
    """

    def __init__(self, trace: JobTrace, policy: PolicyConfig, hp_upper: np.ndarray | None = None,
                 sqa: SQAParams | None = None, pts: PTSParams | None = None, seed: int = 0,
                 sample_s: float = 3600.0, max_time_s: float | None = None,
                 hp_backfill: np.ndarray | None = None) -> None:
        if policy.quota == "sqa" and hp_upper is None:
            raise ValueError(f"policy {policy.name} uses a spot quota: pass hp_upper (a GDE forecast)")
        if policy.backfill and hp_backfill is None:
            raise ValueError(f"policy {policy.name} backfills: pass hp_backfill (the GDE bound at backfill_p)")
        self.trace, self.policy = trace, policy
        self.hp_upper = hp_upper
        self.hp_backfill = hp_backfill
        self.sqa = sqa or SQAParams()
        self.pts = pts or replace(PTSParams(), guarantee_s=self.sqa.horizon_h * 3600.0)
        self.rng = np.random.default_rng(seed)
        self.sample_s = sample_s
        end = float(np.max(trace.submit + trace.duration)) if trace.n_jobs else 0.0
        self.max_time_s = max_time_s if max_time_s is not None else end * 2 + 30 * 86400
        self.state = ClusterState(trace.node_pool, trace.node_total, trace.pool_names)
        n_pools = len(trace.pool_names)
        self.frag = None
        if policy.placement == "fgd":
            sizes, counts = np.unique(trace.g, return_counts=True)
            shares = {int(s): c / counts.sum() for s, c in zip(sizes, counts, strict=True)}
            self.frag = fragmentation_table(int(trace.node_total.max()), shares)
        self.quota = np.full(n_pools, np.inf)
        self.bf_quota = np.zeros(n_pools)  # GFS-BF: cap on all spot slots (best-effort tier)
        # spot slots under guarantee (run started < H hours ago); the quota caps this sum
        self.guaranteed = np.zeros(n_pools)
        self.eta = np.full(n_pools, self.sqa.eta_init)
        self.hp_q: list[list] = [[] for _ in range(n_pools)]
        self.spot_q: list[list] = [[] for _ in range(n_pools)]
        self.running_spot: list[set[int]] = [set() for _ in range(n_pools)]
        self.starts_log: list[deque] = [deque() for _ in range(n_pools)]  # (t, wait_s) spot starts
        self.evict_log: list[deque] = [deque() for _ in range(n_pools)]  # t of spot evictions
        # (t, run_start) of every spot run that ended (finish, eviction, lease suspend)
        self.stop_log: list[deque] = [deque() for _ in range(n_pools)]
        self.next_eta_update = self.sqa.horizon_h * 3600.0

    # -- queues -------------------------------------------------------------------
    def _key(self, job: SimJob) -> tuple:
        if self.policy.queue_order == "fcfs":
            return (job.submit, job.id)
        return (job.g, job.w, job.submit, job.id)

    def _enqueue(self, job: SimJob, t: float) -> None:
        job.enqueued = t
        insort(self.hp_q[job.pool] if job.is_hp else self.spot_q[job.pool], self._key(job))

    # -- job life cycle -----------------------------------------------------------
    def _start(self, job: SimJob, nodes: list[int], t: float, guaranteed: bool = True) -> None:
        st = self.state
        st.allocate(job, nodes)
        wait = t - job.enqueued
        job.jqt += wait
        job.runs += 1
        job.run_start = t
        if job.first_start < 0:
            job.first_start = t
        job.token += 1
        heapq.heappush(self.heap, (t + job.remaining, self._seq(), FINISH, job.id, job.token))
        lease = self.policy.lease_hp_s if job.is_hp else self.policy.lease_spot_s
        if lease > 0 and lease < job.remaining:
            heapq.heappush(self.heap, (t + lease, self._seq(), LEASE, job.id, job.token))
        if not job.is_hp:
            self.running_spot[job.pool].add(job.id)
            self.starts_log[job.pool].append((t, wait))
            if guaranteed:
                job.guar_start = t
                self.guaranteed[job.pool] += job.slots
            else:
                job.guar_start = -1.0

    def _stop(self, job: SimJob, t: float) -> None:
        H = self.sqa.horizon_h * 3600.0
        if not job.is_hp and job.guar_start >= 0:
            if t - job.guar_start < H:
                self.guaranteed[job.pool] = max(0.0, self.guaranteed[job.pool] - job.slots)
            job.guar_periods += int((t - job.guar_start) // H)
        self.state.release(job)
        job.token += 1
        if not job.is_hp:
            self.running_spot[job.pool].discard(job.id)
            if job.guar_start >= 0:  # eta's e counts runs that had a guarantee
                self.stop_log[job.pool].append((t, job.run_start))

    def _evict(self, job: SimJob, t: float) -> None:
        saved = job.last_checkpoint(t) - job.run_start
        job.lost_gpu_s += job.slots * (t - job.run_start - saved)
        job.remaining -= saved
        self.state.record_eviction(list(job.pods), t)
        job.evictions += 1
        self.state.spot_evicted += 1
        if job.guar_start >= 0:
            self.evict_log[job.pool].append(t)
        self._stop(job, t)
        self._enqueue(job, t)

    def _seq(self) -> int:
        self._n += 1
        return self._n

    # -- SQA ----------------------------------------------------------------------
    def _update_quota(self, t: float) -> None:
        st, H = self.state, self.sqa.horizon_h
        hour = int(t // 3600)
        update_eta_now = self.policy.eta_feedback and t >= self.next_eta_update
        if update_eta_now:
            self.next_eta_update = t + H * 3600.0
        for p in range(len(self.trace.pool_names)):
            cap = float(st.pool_capacity[p])
            demand = float(self.hp_upper[p, min(hour, self.hp_upper.shape[1] - 1)])
            inventory = cap - min(cap, demand)
            horizon_s = H * 3600.0
            # S_a: spot GPUs still inside the H-hour guarantee of their current run
            sa = 0
            lo = t - horizon_s
            for j in self.running_spot[p]:
                job = st.jobs[j]
                if job.guar_start >= 0 and t - job.guar_start < horizon_s:
                    sa += job.slots
            self.guaranteed[p] = sa
            if update_eta_now:
                starts, evs, stops = self.starts_log[p], self.evict_log[p], self.stop_log[p]
                while starts and starts[0][0] < lo:
                    starts.popleft()
                while evs and evs[0] < lo:
                    evs.popleft()
                while stops and stops[0][0] < lo:
                    stops.popleft()
                # e = §4.2's evictions / runs, estimated on the spot runs that *ended* in
                # the window (finished, evicted or suspended): the share of runs that ended
                # by eviction, in [0, 1]. (Dividing by the runs started in the window gave
                # e > 1 after a burst of evictions, and e = 0 when no run started; dividing
                # by the runs active in it measures an hourly hazard, far below the
                # per-run rate when runs last many hours.)
                # (with eta_evidence="wilson" the cut branch uses a lower confidence bound)
                e_cut, e = eta_eviction_rate(len(evs), len(stops), self.sqa)
                waits = [w for _, w in starts]
                waits += [t - st.jobs[k[-1]].enqueued for k in self.spot_q[p]]
                l_max = max(waits) if waits else 0.0
                self.eta[p] = update_eta(self.eta[p], e, l_max, self.sqa, cut_rate=e_cut)
            self.quota[p] = spot_quota(inventory, self.eta[p], float(st.pool_free[p]), float(sa))
            if self.policy.backfill:
                bf = float(self.hp_backfill[p, min(hour, self.hp_backfill.shape[1] - 1)])
                self.bf_quota[p] = max(self.quota[p], cap - min(cap, bf))
                # promote best-effort runs (oldest first) while the quota has room
                waiting = sorted((st.jobs[j] for j in self.running_spot[p] if st.jobs[j].guar_start < 0),
                                 key=lambda x: x.run_start)
                for job in waiting:
                    if self.guaranteed[p] + job.slots <= self.quota[p]:
                        job.guar_start = t
                        self.guaranteed[p] += job.slots
        self.quota_log.append((t, self.quota.copy(), self.eta.copy()))

    # -- scheduling scan ----------------------------------------------------------
    def _scan(self, p: int, t: float) -> None:
        pol, st = self.policy, self.state
        can_preempt = pol.preemption != "none"
        by_size = pol.queue_order == "size"  # queue sorted by g first: lets us stop early
        for is_hp in (True, False):
            queue = self.hp_q[p] if is_hp else self.spot_q[p]
            if not queue:
                continue
            failed: list[tuple[int, int]] = []
            keep = []
            blocked = False
            n_aged = 0
            if not is_hp and pol.starvation_guard:
                # spot jobs waiting longer than theta (Eq. 11's JQT threshold) are tried
                # first, longest wait first; the rest keeps the policy's order
                theta = self.sqa.theta_s
                aged = sorted((k for k in queue if t - st.jobs[k[-1]].enqueued > theta),
                              key=lambda k: st.jobs[k[-1]].enqueued)
                if aged:
                    n_aged = len(aged)
                    aged_ids = {k[-1] for k in aged}
                    queue = aged + [k for k in queue if k[-1] not in aged_ids]
            for i, key in enumerate(queue):
                job = st.jobs[key[-1]]
                if blocked:
                    keep.extend(queue[i:])
                    break
                reclaim = st.pool_free[p] + (st.pool_spot[p] if is_hp and can_preempt else 0)
                room = reclaim if is_hp else min(reclaim, self.quota[p] - self.guaranteed[p])
                if not is_hp and pol.backfill:
                    room = max(room, min(reclaim, self.bf_quota[p] - st.pool_spot[p]))
                # in size order every later job has g >= this one: none can fit either
                # (not within the aged prefix, which is in wait order)
                if room < 1 or (by_size and i >= n_aged and (job.g > room or any(
                        b == 1 and job.g >= a for a, b in failed))):
                    keep.extend(queue[i:])
                    break
                shape = (job.g, job.w)
                guaranteed = is_hp or self.guaranteed[p] + job.slots <= self.quota[p]
                admissible = guaranteed or (pol.backfill and st.pool_spot[p] + job.slots <= self.bf_quota[p])
                if job.slots > reclaim or any(shape[0] >= a and shape[1] >= b for a, b in failed) \
                        or not admissible:
                    keep.append(key)
                    blocked = pol.strict_fcfs
                    continue
                plan = non_preemptive(st, job, t, self.pts, pol.placement, self.frag)
                if plan is None and is_hp and can_preempt:
                    plan = preemptive(st, job, t, self.pts, pol.preemption, self.rng)
                if plan is None:
                    failed.append(shape)
                    keep.append(key)
                    blocked = pol.strict_fcfs
                    continue
                if plan.victims:
                    for v in plan.victims:
                        self._evict(st.jobs[v], t)
                    failed.clear()  # evicted gangs free pods elsewhere
                self._start(job, plan.nodes, t, guaranteed)
            # spot jobs evicted during the HP scan were insorted into spot_q before the
            # spot scan read it; the spot scan itself never evicts, so `keep` is complete
            if is_hp:
                self.hp_q[p] = keep
            else:
                if n_aged:
                    keep.sort()  # back to the policy's queue order (insort relies on it)
                self.spot_q[p] = keep

    # -- main loop ----------------------------------------------------------------
    def run(self, progress: Callable[[float, int, int], None] | None = None) -> SimResult:
        t0 = time.perf_counter()
        tr, st = self.trace, self.state
        self.heap: list = []
        self._n = 0
        self.quota_log: list = []
        order = np.argsort(tr.submit, kind="stable")
        for i in order:
            job = SimJob(int(i), int(tr.pool[i]), int(tr.org[i]), bool(tr.is_hp[i]), int(tr.g[i]),
                         int(tr.w[i]), float(tr.submit[i]), float(tr.duration[i]), float(tr.ckpt[i]))
            st.jobs[job.id] = job
            self.heap.append((job.submit, self._seq(), ARRIVAL, job.id, 0))
        heapq.heapify(self.heap)
        if self.policy.quota == "sqa":
            heapq.heappush(self.heap, (0.0, -1, QUOTA, -1, 0))
        heapq.heappush(self.heap, (0.0, -2, SAMPLE, -1, 0))
        n_jobs, finished, events = tr.n_jobs, 0, 0
        alloc_t, alloc, spot_share = [], [], []
        n_pools = len(tr.pool_names)
        next_progress = 0.0
        t = 0.0
        while self.heap and finished < n_jobs:
            t = self.heap[0][0]
            if t > self.max_time_s:
                break
            dirty: set[int] = set()
            while self.heap and self.heap[0][0] == t:
                _, _, kind, jid, token = heapq.heappop(self.heap)
                events += 1
                if kind == FINISH:
                    job = st.jobs[jid]
                    if token != job.token:
                        continue
                    self._stop(job, t)
                    job.remaining = 0.0
                    job.finish = t
                    finished += 1
                    if not job.is_hp:
                        st.spot_succeeded += 1
                    dirty.add(job.pool)
                elif kind == ARRIVAL:
                    job = st.jobs[jid]
                    self._enqueue(job, t)
                    dirty.add(job.pool)
                elif kind == LEASE:
                    job = st.jobs[jid]
                    if token != job.token:
                        continue
                    if not job.is_hp and self.hp_q[job.pool]:
                        job.remaining -= t - job.run_start  # checkpoint at lease end
                        job.suspends += 1
                        self._stop(job, t)
                        self._enqueue(job, t)
                        dirty.add(job.pool)
                    else:
                        lease = self.policy.lease_hp_s if job.is_hp else self.policy.lease_spot_s
                        if t + lease < job.run_start + job.remaining:
                            heapq.heappush(self.heap, (t + lease, self._seq(), LEASE, jid, token))
                elif kind == QUOTA:
                    self._update_quota(t)
                    dirty.update(range(n_pools))
                    heapq.heappush(self.heap, (t + self.sqa.update_interval_s, -1, QUOTA, -1, 0))
                elif kind == SAMPLE:
                    used = st.pool_capacity - st.pool_free
                    rates = np.append(used / st.pool_capacity, used.sum() / st.pool_capacity.sum())
                    alloc_t.append(t)
                    alloc.append(rates)
                    spot_share.append(st.pool_spot.sum() / st.pool_capacity.sum())
                    heapq.heappush(self.heap, (t + self.sample_s, -2, SAMPLE, -1, 0))
            for p in dirty:
                self._scan(p, t)
            if progress is not None and t >= next_progress:
                progress(t, finished, n_jobs)
                next_progress = t + 86400.0
        if progress is not None:
            progress(t, finished, n_jobs)
        jobs = [st.jobs[i] for i in range(n_jobs)]
        jct = np.array([j.finish - j.submit if j.finish >= 0 else np.nan for j in jobs])
        ql = self.quota_log
        return SimResult(
            policy=self.policy.name, trace=tr.name, is_hp=tr.is_hp.astype(bool).copy(), jct=jct,
            jqt=np.array([j.jqt + (t - j.enqueued if j.finish < 0 and not j.pods else 0.0) for j in jobs]),
            runs=np.array([j.runs for j in jobs]), evictions=np.array([j.evictions for j in jobs]),
            suspends=np.array([j.suspends for j in jobs]),
            lost_gpu_s=np.array([j.lost_gpu_s for j in jobs]) / tr.slots_per_gpu,
            guar_periods=np.array([j.guar_periods for j in jobs]),
            alloc_t=np.array(alloc_t), alloc_rate=np.array(alloc).reshape(-1, n_pools + 1),
            spot_share=np.array(spot_share),
            quota_t=np.array([q[0] for q in ql]),
            quota=np.array([q[1] for q in ql]).reshape(-1, n_pools) / tr.slots_per_gpu,
            eta=np.array([q[2] for q in ql]).reshape(-1, n_pools),
            wall_s=time.perf_counter() - t0, events=events, unfinished=n_jobs - finished,
            arrivals_end_s=float(tr.submit.max()) if n_jobs else 0.0,
        )


def simulate(trace: JobTrace, policy: PolicyConfig, hp_upper: np.ndarray | None = None,
             **kwargs) -> SimResult:
    """Convenience wrapper: build a :class:`ClusterSimulator` and run it."""
    progress = kwargs.pop("progress", None)
    return ClusterSimulator(trace, policy, hp_upper, **kwargs).run(progress)


__all__ = ["ClusterSimulator", "SimResult", "simulate"]
