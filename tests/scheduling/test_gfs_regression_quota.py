"""Issue 13 regression, on small synthetic traces whose spot quota binds (every gated
baseline queues spot longer than its ungated self), for each of seeds 0-5:

1. GFS queues spot no longer than any quota-gated baseline (YARN-CS+Q, Lyra+Q, FGD+Q:
   same quota, eta fixed at 1) -- the paper's direction, like for like;
2. the beyond-the-paper GFS-BF is not Pareto-dominated by any baseline of either family
   or by GFS on (spot JQT, spot preemptions per run, HP JQT).

Why the trace is this size. The first version ran 8 nodes with ~110 spot jobs in 2 days:
about two spot runs end per hour, so Eq. 11's window rate e is 0 or >= 0.5 and a single
eviction cut eta to a fifth (seed 2: GFS 522 s vs Lyra+Q 242 s spot JQT; seeds 4 and 5
failed too). Two fixes, both kept: (a) the cut branch of Eq. 11 now acts on the Wilson
lower bound of e at confidence p (``SQAParams.eta_evidence="wilson"``), not on the raw
share of a handful of runs; (b) the trace has 32 nodes and 6.5x the arrivals (~740 spot,
~1,900 HP jobs, ~15 spot runs ending per hour at the same ~62% allocation), closer to
the paper's cluster (~160 spot runs an hour) than to a coin flip per hour. With (b) alone
seed 4 still failed (GFS 6,842 s vs Lyra+Q 5,771 s); with both, GFS is 12-73% below the
best gated baseline on seeds 0-9. GFS-BF's margins are small on some seeds (e.g. HP JQT
0.00 vs Lyra's 0.08 s decides one): this asserts the front, not a wide gap.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fleet.scheduling.baselines import BASELINES, GATED, POLICIES
from fleet.scheduling.cluster_sim import simulate
from fleet.scheduling.evaluation import COLUMNS, dominated_by
from fleet.scheduling.trace_format import JobTrace


def workload(seed: int, nodes: int = 32, days: int = 2, rate: float = 6.5) -> JobTrace:
    """HP jobs with a daily cycle (mean ``rate`` per 15 min) and spot jobs (``rate`` per
    25 min) on ``nodes`` 8-GPU nodes; sizes 1-8 GPUs, some 2-pod gangs; spot checkpoints
    every 30 min."""
    rng = np.random.default_rng(seed)
    jobs = []
    t, end = 0.0, days * 86400.0
    while t < end:
        t += rng.exponential(900.0 / rate / (1.5 + np.sin(2 * np.pi * t / 86400.0)))
        g = int(rng.choice([1, 2, 4, 8], p=[0.5, 0.2, 0.15, 0.15]))
        jobs.append((1, g, int(rng.choice([1, 2], p=[0.9, 0.1])), t, float(rng.lognormal(np.log(1800), 1.0)), 0.0))
    t = 0.0
    while t < end:
        t += rng.exponential(1500.0 / rate)
        g = int(rng.choice([1, 2, 4, 8], p=[0.6, 0.15, 0.15, 0.1]))
        jobs.append((0, g, int(rng.choice([1, 2], p=[0.8, 0.2])), t, float(rng.lognormal(np.log(3600), 1.0)),
                     1800.0))
    a = np.array(jobs)
    n = len(a)
    return JobTrace("regression", ["pool"], np.zeros(nodes, dtype=int), np.full(nodes, 8), ["o"],
                    np.zeros(n, dtype=int), np.zeros(n, dtype=int), a[:, 0] > 0, a[:, 1].astype(int),
                    a[:, 2].astype(int), a[:, 3], a[:, 4], a[:, 5])


@pytest.mark.parametrize("seed", range(6))
def test_gfs_beats_gated_baselines_and_gfs_bf_is_not_dominated(seed):
    tr = workload(seed)
    cap = tr.capacity_gpus
    demand = tr.hp_demand().sum(axis=1)  # [1 pool, hours]: HP's true hourly peak
    nxt = np.maximum(demand, np.roll(demand, -1))
    # an over-covering forecast (true peak of this and the next hour + 20% + 1/16 of the
    # pool): the quota binds although GPUs sit idle, as the GDE bound does on the real traces
    upper = np.minimum(nxt * 1.2 + cap / 16, cap)
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
