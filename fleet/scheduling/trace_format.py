"""The in-memory job trace the simulator runs: nodes and jobs in the GFS job format."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class JobTrace:
    """Nodes and jobs. Times in seconds from trace start; GPU amounts in slots
    (``slots_per_gpu`` slots = one GPU)."""

    name: str
    pool_names: list[str]
    node_pool: np.ndarray  # int, per node
    node_total: np.ndarray  # int slots, per node
    org_names: list[str]
    pool: np.ndarray  # int, per job
    org: np.ndarray  # int, per job
    is_hp: np.ndarray  # bool, per job
    g: np.ndarray  # slots per pod
    w: np.ndarray  # pods (workers)
    submit: np.ndarray  # seconds
    duration: np.ndarray  # seconds of work at full gang
    ckpt: np.ndarray  # checkpoint interval, seconds (0: none)
    slots_per_gpu: int = 1

    def __post_init__(self) -> None:
        n = len(self.submit)
        for field in ("pool", "org", "is_hp", "g", "w", "duration", "ckpt"):
            if len(getattr(self, field)) != n:
                raise ValueError(f"trace {self.name}: job field {field!r} has {len(getattr(self, field))} rows, expected {n}")
        if n and (np.any(self.g < 1) or np.any(self.w < 1)):
            raise ValueError(f"trace {self.name}: every job needs g >= 1 slot and w >= 1 worker")
        if n and np.any(self.duration <= 0):
            raise ValueError(f"trace {self.name}: durations must be > 0 seconds")
        big = self.g > self.max_node_slots()[self.pool]
        if np.any(big):
            raise ValueError(f"trace {self.name}: {int(big.sum())} jobs ask more slots per pod than any node of their pool has; drop or split them")

    @property
    def n_jobs(self) -> int:
        return len(self.submit)

    @property
    def capacity_gpus(self) -> float:
        return float(self.node_total.sum()) / self.slots_per_gpu

    def max_node_slots(self) -> np.ndarray:
        out = np.zeros(len(self.pool_names), dtype=np.int64)
        np.maximum.at(out, self.node_pool, self.node_total)
        return out

    def subset(self, mask: np.ndarray, name: str | None = None) -> JobTrace:
        return JobTrace(name or self.name, self.pool_names, self.node_pool, self.node_total,
                        self.org_names, self.pool[mask], self.org[mask], self.is_hp[mask],
                        self.g[mask], self.w[mask], self.submit[mask], self.duration[mask],
                        self.ckpt[mask], self.slots_per_gpu)

    def hp_demand(self, n_hours: int | None = None, count: str = "gang") -> np.ndarray:
        """Hourly HP GPU-slot demand per (pool, org) if every HP job ran on arrival:
        array [pools, orgs, hours]; entry h is the *peak* number of slots held at once
        during [h, h+1) hours (the level SQA must leave to HP), not the sum over every job
        that touches the hour (that sum counts a GPU once per short job it serves and
        overstates the demand when jobs are shorter than an hour).

        ``count``: ``"gang"`` counts what a job holds (g x w slots); ``"pod"`` counts one
        pod (g slots) per job, as the GFS authors' code does (it undercounts gangs)."""
        if count not in ("gang", "pod"):
            raise ValueError(f"hp_demand count={count!r}; use 'gang' (g x w) or 'pod' (g)")
        end = self.submit + self.duration
        hours = int(np.ceil(end.max() / 3600.0)) + 1 if n_hours is None else n_hours
        out = np.zeros((len(self.pool_names), len(self.org_names), hours))
        hp = np.flatnonzero(self.is_hp)
        if len(hp) == 0 or hours <= 0:
            return out
        slots = (self.g * self.w if count == "gang" else self.g)[hp].astype(float)
        key = self.pool[hp].astype(np.int64) * len(self.org_names) + self.org[hp]
        # events: (series, time, delta); at equal times releases come before starts
        t = np.concatenate([self.submit[hp], end[hp]])
        d = np.concatenate([slots, -slots])
        k = np.concatenate([key, key])
        o = np.lexsort((d, t, k))
        t, d, k = t[o], d[o], k[o]
        edges = np.arange(hours + 1) * 3600.0
        for series in np.unique(k):
            lo, hi = np.searchsorted(k, [series, series + 1])
            ts, lvl = t[lo:hi], np.cumsum(d[lo:hi])
            # level in force at each hour start (after the events at that instant)
            at = np.searchsorted(ts, edges[:-1], side="right") - 1
            peak = np.where(at >= 0, lvl[np.maximum(at, 0)], 0.0)
            inside = ts < edges[-1]
            np.maximum.at(peak, (ts[inside] // 3600.0).astype(int), lvl[inside])
            out[series // len(self.org_names), series % len(self.org_names)] = np.maximum(peak, 0.0)
        return out
