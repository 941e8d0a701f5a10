"""Cluster state shared by the simulator and the placement algorithms.

GPU amounts are integer *slots* (one slot = one GPU for v2026-style traces; one tenth
of a GPU for the fractional v2023 pods). Per-node numpy arrays keep the hot path
vectorised; nodes are grouped into *pools* (one per GPU model, or one for the whole
cluster when jobs may run on any model).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PTSParams:
    """Table 4 parameters used by PTS (Eq. 15-19)."""

    beta: float = 0.5  # Eq. 19 weight of the usage impact
    gamma: float = 0.8  # Eq. 15 short/long weight
    m: float = 3.0  # Eq. 16 penalty
    short_window_s: float = 3600.0  # e_short window (1 h)
    long_window_s: float = 86400.0  # e_long window (24 h); T_long = 24 (hours)
    usage_window_s: float = 3600.0  # T in the Eq. 19 denominator sum_k S_k * T
    guarantee_s: float = 3600.0  # H hours in seconds: "gfs-bf" preemption spares spot runs inside it


class SimJob:
    """One HP or spot job: ``w`` pods (workers) of ``g`` slots each.

    Times in seconds. ``remaining`` is the work (wall seconds at full gang) still to do;
    ``ckpt`` the checkpoint interval (0: never checkpoints, evictions lose the whole run).
    """

    __slots__ = (
        "id", "pool", "org", "is_hp", "g", "w", "submit", "duration", "ckpt",
        "remaining", "run_start", "token", "enqueued", "jqt", "runs", "evictions",
        "suspends", "finish", "pods", "lost_gpu_s", "first_start", "guar_start", "guar_periods",
    )

    def __init__(self, id: int, pool: int, org: int, is_hp: bool, g: int, w: int,
                 submit: float, duration: float, ckpt: float = 0.0) -> None:
        self.id, self.pool, self.org, self.is_hp = id, pool, org, is_hp
        self.g, self.w, self.submit, self.duration, self.ckpt = g, w, submit, duration, ckpt
        self.remaining = duration
        self.run_start = -1.0
        self.token = 0
        self.enqueued = submit
        self.jqt = 0.0
        self.runs = 0
        self.evictions = 0
        self.suspends = 0
        self.finish = -1.0
        self.pods: dict[int, int] = {}  # node -> slots held while running
        self.lost_gpu_s = 0.0
        self.first_start = -1.0
        # spot: when the current run's H-hour guarantee began (-1: a best-effort backfill
        # run outside the quota, GFS-BF), and guarantee periods of H hours completed so far
        self.guar_start = -1.0
        self.guar_periods = 0

    @property
    def slots(self) -> int:
        return self.g * self.w

    def last_checkpoint(self, t: float) -> float:
        """Time of the last checkpoint of the current run (run start if none yet)."""
        if self.ckpt <= 0:
            return self.run_start
        return self.run_start + math.floor((t - self.run_start) / self.ckpt) * self.ckpt

    def waste(self, t: float) -> float:
        """Eq. 17: unsaved GPU-seconds lost if evicted at ``t`` (whole gang: g*w GPUs)."""
        return self.slots * (t - self.last_checkpoint(t))


class ClusterState:
    """Per-node free/HP/spot slot counts, running spot pods per node, eviction history."""

    def __init__(self, node_pool: np.ndarray, node_total: np.ndarray, pool_names: list[str]) -> None:
        node_pool = np.asarray(node_pool, dtype=np.int64)
        node_total = np.asarray(node_total, dtype=np.int64)
        if node_pool.shape != node_total.shape:
            raise ValueError("node_pool and node_total must have the same length")
        if np.any(node_total <= 0):
            raise ValueError("every node needs at least one GPU slot (node_total > 0)")
        self.pool_names = list(pool_names)
        self.node_pool = node_pool
        self.total = node_total.copy()
        self.free = node_total.copy()
        self.hp = np.zeros_like(node_total)
        self.spot = np.zeros_like(node_total)
        self.pool_nodes = [np.flatnonzero(node_pool == p) for p in range(len(pool_names))]
        self.node_pos = np.zeros(len(node_total), dtype=np.int64)  # index within its pool
        for ids in self.pool_nodes:
            self.node_pos[ids] = np.arange(len(ids))
        self.pool_capacity = np.array([int(node_total[ids].sum()) for ids in self.pool_nodes])
        self.pool_free = self.pool_capacity.copy()
        self.pool_spot = np.zeros(len(pool_names), dtype=np.int64)
        self.node_spot_jobs: list[dict[int, int]] = [{} for _ in range(len(node_total))]
        self.evict_times: dict[int, deque] = {}
        self.jobs: dict[int, SimJob] = {}
        self.spot_succeeded = 0  # G in Eq. 18
        self.spot_evicted = 0  # F in Eq. 18

    # -- allocation ---------------------------------------------------------------
    def allocate(self, job: SimJob, nodes: list[int]) -> None:
        """Give ``job`` one pod (``job.g`` slots) on each node in ``nodes`` (repeats allowed)."""
        g = job.g
        for n in nodes:
            self.free[n] -= g
            if job.is_hp:
                self.hp[n] += g
            else:
                self.spot[n] += g
                d = self.node_spot_jobs[n]
                d[job.id] = d.get(job.id, 0) + g
            job.pods[n] = job.pods.get(n, 0) + g
        if np.any(self.free[list(job.pods)] < 0):
            raise RuntimeError(f"over-allocation placing job {job.id}")
        self.pool_free[job.pool] -= job.slots
        if not job.is_hp:
            self.pool_spot[job.pool] += job.slots

    def release(self, job: SimJob) -> None:
        for n, s in job.pods.items():
            self.free[n] += s
            if job.is_hp:
                self.hp[n] -= s
            else:
                self.spot[n] -= s
                self.node_spot_jobs[n].pop(job.id, None)
        job.pods = {}
        self.pool_free[job.pool] += job.slots
        if not job.is_hp:
            self.pool_spot[job.pool] -= job.slots

    # -- eviction history (Eq. 15) ---------------------------------------------------
    def record_eviction(self, nodes, t: float) -> None:
        self._ebar_cache = {}
        for n in nodes:
            self.evict_times.setdefault(int(n), deque()).append(t)

    def ebar(self, pool: int, t: float, params: PTSParams) -> np.ndarray:
        """Weighted eviction rate e_bar (Eq. 15) of the nodes of ``pool`` (in
        ``pool_nodes[pool]`` order) at time ``t``."""
        out = np.zeros(len(self.pool_nodes[pool]))
        if not self.evict_times:
            return out
        cache = getattr(self, "_ebar_cache", {})
        hit = cache.get((pool, t))
        if hit is not None:
            return hit
        stale = []
        t_long_h = params.long_window_s / 3600.0
        for n, times in self.evict_times.items():
            while times and times[0] < t - params.long_window_s:
                times.popleft()
            if not times:
                stale.append(n)
                continue
            if self.node_pool[n] != pool:
                continue
            e_long = len(times)
            e_short = sum(1 for x in times if x >= t - params.short_window_s)
            out[self.node_pos[n]] = params.gamma * e_short + (1 - params.gamma) * e_long / t_long_h
        for n in stale:
            del self.evict_times[n]
        if len(cache) > 64:
            cache.clear()
        cache[(pool, t)] = out
        self._ebar_cache = cache
        return out
