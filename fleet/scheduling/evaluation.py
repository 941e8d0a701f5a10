"""Trace-driven evaluation of GFS against baselines and ablations (paper §4.4-4.6).

``run_comparison`` simulates a list of policies on one trace and workload level and
returns a table with the paper's Table 5 columns; ``forecast_hp_upper`` turns a GDE
forecaster into the per-pool HP demand bound SQA consumes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from fleet.scheduling.baselines import BASELINES, get_policy
from fleet.scheduling.cluster_sim import SimResult, simulate
from fleet.scheduling.gde import DemandSeries, LastWeekPeak, OrgLinear
from fleet.scheduling.sqa import SQAParams
from fleet.scheduling.trace_format import JobTrace
from fleet.scheduling.traces import (
    WORKLOAD_LEVELS,
    SynthConfig,
    load_alibaba_v2023,
    scale_spot,
    synth_v2026,
)

COLUMNS = {
    "hp_jct_p99": "HP JCT-p99 (s)", "hp_jct": "HP JCT (s)", "hp_jqt": "HP JQT (s)",
    "spot_jct": "Spot JCT (s)", "spot_jqt": "Spot JQT (s)", "spot_evict_pct": "Spot e (%)",
    "alloc_rate_pct": "GPU alloc (%)", "unfinished": "unfinished",
}


@dataclass(frozen=True)
class EvalScale:
    """How much of a trace to simulate. v2026: ``days`` from ``start_day`` with
    ``fraction`` of the jobs on ``node_fraction`` of the nodes (fewer nodes than jobs
    raises the load: a month that starts empty lacks the real trace's multi-day jobs);
    v2023: the whole (thinned, compressed) pod list."""

    days: int = 14
    fraction: float = 0.25  # share of the arrivals
    node_fraction: float = 0.18  # share of each model's nodes (< fraction: more contention)
    start_day: int = 31
    seed: int = 0


def build_trace(name: str, level: str, data_dir: str | Path, scale: EvalScale | None = None) -> JobTrace:
    scale = scale or EvalScale()
    if level not in WORKLOAD_LEVELS:
        raise ValueError(f"unknown workload level {level!r}; use low, medium or high")
    if name == "v2023":
        base = load_alibaba_v2023(data_dir)
    elif name == "v2026":
        base = synth_v2026(data_dir, SynthConfig(start_day=scale.start_day, days=scale.days,
                                                 seed=scale.seed, job_fraction=scale.fraction,
                                                 node_fraction=scale.node_fraction))
    else:
        raise ValueError(f"unknown trace {name!r}; use v2023 or v2026")
    out = scale_spot(base, WORKLOAD_LEVELS[level], seed=scale.seed)
    out.name = f"{name}-{level}"
    return out


def hp_series(trace: JobTrace) -> tuple[DemandSeries, np.ndarray]:
    """Per-(pool, org) hourly HP demand with any demand, and the pool of each series."""
    d = trace.hp_demand()
    pools, orgs = np.nonzero(d.sum(axis=2) > 0)
    values = d[pools, orgs]
    attrs = np.stack([orgs, pools], axis=1)
    return DemandSeries(values, attrs), pools


def forecast_hp_upper(trace: JobTrace, method: str, sqa: SQAParams | None = None,
                      train_frac: float = 0.4, epochs: int = 15) -> tuple[np.ndarray, dict]:
    """[pools, hours] HP demand bound for SQA (slots): sum over organizations of the max of
    the p-quantile over the next H hours (Eq. 9). ``method``: "orglinear" (GDE, trained on
    origins in the first ``train_frac`` of hours) or "lastweek_peak" (GFS-e)."""
    sqa = sqa or SQAParams()
    series, pools = hp_series(trace)
    T = series.values.shape[1]
    H = sqa.horizon_h
    lookback = int(max(4, min(72, T // 4)))
    origins = np.arange(T)
    info: dict = {"method": method, "lookback_h": lookback, "hours": T, "series": len(pools)}
    if method == "orglinear":
        f = OrgLinear(lookback, max(H, 1), epochs=epochs, kernel=min(25, lookback - 1))
        train = np.arange(lookback, max(lookback + 1, int(T * train_frac) - H + 1))
        f.fit(series, train)
        fc = f.predict(series, origins)
        info["train_s"] = f.train_s
        upper = np.maximum(fc.quantile(sqa.p)[:, :H].max(axis=1), 0.0)
    elif method == "lastweek_peak":
        fc = LastWeekPeak(min(168, T), max(H, 1)).predict(series, origins)
        upper = fc.mu[:, 0]
    else:
        raise ValueError(f"unknown forecaster {method!r}; use orglinear or lastweek_peak")
    # windows() stacks origin-major: row = origin * S + series
    S = len(pools)
    upper = upper.reshape(T, S)
    out = np.zeros((len(trace.pool_names), T))
    for s in range(S):
        out[pools[s]] += upper[:, s]
    return out, info


@dataclass
class Comparison:
    trace: str
    level: str
    table: pd.DataFrame
    results: dict[str, SimResult] = field(default_factory=dict)
    forecasts: dict[str, dict] = field(default_factory=dict)


def run_comparison(trace_name: str, level: str, data_dir: str | Path,
                   policies: Sequence[str] = BASELINES, scale: EvalScale | None = None,
                   progress: Callable[[str], None] | None = None,
                   sqa: SQAParams | None = None) -> Comparison:
    """Simulate ``policies`` on one trace/level; rows = policies, columns = COLUMNS.
    ``sqa`` overrides Table 4's SQA parameters (e.g. the guarantee hours H, Table 6)."""
    sqa = sqa or SQAParams()
    say = progress or (lambda msg: None)
    t0 = time.perf_counter()
    trace = build_trace(trace_name, level, data_dir, scale)
    say(f"{trace.name}: {trace.n_jobs} jobs ({int((~trace.is_hp).sum())} spot) on "
        f"{trace.capacity_gpus:.0f} GPUs; built in {time.perf_counter() - t0:.1f}s")
    uppers: dict[str, np.ndarray] = {}
    infos: dict[str, dict] = {}
    results: dict[str, SimResult] = {}
    rows = []
    for name in policies:
        pol = get_policy(name)
        upper = None
        if pol.quota == "sqa":
            if pol.forecaster not in uppers:
                say(f"  GDE forecast ({pol.forecaster}) ...")
                uppers[pol.forecaster], infos[pol.forecaster] = forecast_hp_upper(trace, pol.forecaster, sqa)
            upper = uppers[pol.forecaster]
        t1 = time.perf_counter()

        def tick(t, done, total, _n=name):
            say(f"  {_n}: sim day {t / 86400:6.1f}, {done}/{total} jobs done")

        res = simulate(trace, pol, upper, sqa=sqa, progress=tick if progress else None)
        results[name] = res
        summ = res.summary()
        if pol.preemption == "none":
            summ["spot_evict_pct"] = float("nan")  # Chronus: suspends at lease end, no evictions
        rows.append({"policy": name, **{COLUMNS[k]: summ[k] for k in COLUMNS},
                     "wall (s)": time.perf_counter() - t1, "jobs/s": trace.n_jobs / max(res.wall_s, 1e-9)})
        say(f"  {name}: done in {time.perf_counter() - t1:.1f}s "
            f"(HP JQT {summ['hp_jqt']:.0f}s, spot JQT {summ['spot_jqt']:.0f}s, e {summ['spot_evict_pct']:.2f}%)")
    table = pd.DataFrame(rows).set_index("policy")
    return Comparison(trace.name, level, table, results, infos)


def improvement_row(table: pd.DataFrame, ours: str = "GFS") -> pd.Series:
    """Paper's IMP. row: GFS vs the best other policy per column (lower is better), %."""
    others = table.drop(index=ours)
    cols = [c for c in COLUMNS.values() if c not in ("GPU alloc (%)", "unfinished")]
    best = others[cols].min()
    mine = table.loc[ours, cols]
    return (100.0 * (best - mine) / best.where(best != 0)).astype(float)


def to_markdown(table: pd.DataFrame, digits: int = 1) -> str:
    """Plain markdown table (no tabulate dependency)."""
    cols = [c for c in table.columns if c not in ("wall (s)", "jobs/s")]
    lines = ["| policy | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for idx, row in table.iterrows():
        cells = []
        for c in cols:
            v = row[c]
            nd = 0 if c == "unfinished" else 2 if "e (%)" in c or "%" in str(idx) else digits
            cells.append("-" if pd.isna(v) else f"{v:,.{nd}f}")
        lines.append(f"| {idx} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_comparison(comp: Comparison, path: str | Path) -> Path:
    """Cluster GPU allocation rate over time per policy, and spot JQT/eviction bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4))
    end_day = 0.0
    for name, res in comp.results.items():
        if len(res.alloc_t):
            a.plot(res.alloc_t / 86400.0, 100 * res.alloc_rate[:, -1], label=name, lw=1)
            end_day = max(end_day, res.arrivals_end_s / 86400.0)
    if end_day > 0:
        a.set_xlim(0, end_day * 1.25)
    a.set_xlabel("simulated day (arrivals end at the left of the right margin)")
    a.set_ylabel("GPU allocation rate (%)")
    a.set_title(f"{comp.trace}: allocation over time")
    a.legend(fontsize=7)
    t = comp.table
    x = np.arange(len(t))
    b.bar(x, t[COLUMNS["spot_jqt"]], color="tab:blue")
    b.set_xticks(x, t.index, rotation=30, fontsize=8)
    if (t[COLUMNS["spot_jqt"]] > 0).any():
        b.set_yscale("log")
    b.set_ylabel("spot JQT (s, log)")
    b2 = b.twinx()
    b2.plot(x, t[COLUMNS["spot_evict_pct"]], "o", color="tab:red")
    b2.set_ylabel("spot eviction rate (%)", color="tab:red")
    b.set_title("spot queueing (bars) and evictions (dots)")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def report_markdown(tables: dict[tuple[str, str], pd.DataFrame], img_prefix: str = "img") -> str:
    """Markdown for docs/gfs.md from {(trace, level): full policy table}: per trace and level
    a Table 5 analogue (baselines + GFS + IMP. row) and a Tables 8-10 analogue (ablations)."""
    from fleet.scheduling.baselines import ABLATIONS_PTS, BASELINES

    out = []
    for (trace, level), table in tables.items():
        base = table.loc[[p for p in BASELINES if p in table.index]]
        out.append(f"\n#### {trace}, {level} spot workload: GFS vs baselines (Table 5)\n")
        md = to_markdown(base)
        if "GFS" in base.index and len(base) > 1:
            imp = improvement_row(base)
            cells = " | ".join("-" if pd.isna(imp.get(c)) else f"{imp[c]:+.1f}%"
                               for c in base.columns if c not in ("wall (s)", "jobs/s")
                               and c in imp.index or c in ("GPU alloc (%)", "unfinished"))
            md += f"\n| IMP. | {cells} |"
        out.append(md)
        abl = [p for p in ("GFS-e", "GFS-d") + ABLATIONS_PTS if p in table.index]
        if len(abl) > 1:
            out.append(f"\n#### {trace}, {level}: ablations (Tables 8-10)\n")
            out.append(to_markdown(table.loc[list(dict.fromkeys(abl))]))
        out.append(f"\n![{trace} {level}]({img_prefix}/gfs-{trace}-{level}.png)\n")
    return "\n".join(out)
