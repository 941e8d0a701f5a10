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
import torch
from scipy.stats import norm

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
    "spot_evict_gh_pct": "Spot e/gh (%)", "spot_preempt_pct": "Spot preempt (%)",
    "alloc_rate_pct": "GPU alloc (%)", "unfinished": "unfinished",
}
# "Spot e (%)": evictions / runs (paper §4.2). "Spot e/gh (%)": evictions / (evictions +
# completed guarantee periods + completions), the scale of the GFS authors' logger.
# "Spot preempt (%)": (evictions + Chronus lease suspensions) / runs, the Pareto axis.
PARETO_AXES = ("Spot JQT (s)", "Spot preempt (%)", "HP JQT (s)")


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


def hp_series(trace: JobTrace, count: str = "gang") -> tuple[DemandSeries, np.ndarray]:
    """Per-(pool, org) hourly HP demand of every pool and organization the trace declares
    (``pool_names`` x ``org_names``, the cluster's configuration), and the pool of each series.
    ``count``: GPUs per HP job, "gang" (g x w) or "pod" (g; the authors' code).

    Every declared pair, not only the pairs with HP demand somewhere in the trace: choosing
    the series by their demand over the WHOLE trace let an organization's first HP job on
    day 8 change the network, its training batches and the bound of days 0-7 (a series of
    zeros that existed only because of its future)."""
    d = trace.hp_demand(count=count)
    pools, orgs = np.nonzero(np.ones(d.shape[:2], dtype=bool))
    values = d[pools, orgs]
    attrs = np.stack([orgs, pools], axis=1)
    return DemandSeries(values, attrs), pools


REFIT_MODES = ("daily", "once")
#: hours of history OrgLinear sees in the daily (rolling-origin) refit; history before hour 0
#: is zeros, so any trace length works. (Until 2026-11-28 it was ``min(72, T // 4)`` of the
#: WHOLE trace's T hours: one late job changed the lookback, and so the bound, of every
#: earlier hour; the v2023 replay, 155 h, ran with 38.)
DAILY_LOOKBACK_H = 72


def _forecast_all_origins(series: DemandSeries, method: str, H: int, refit: str, train_frac: float,
                          epochs: int, refit_steps: int, refit_window_h: int) -> tuple[np.ndarray, np.ndarray, dict]:
    """mu, sigma [origins, series, H] for every hour of ``series`` as a forecast origin.

    ``refit="daily"`` (rolling origin, no future data): history before hour 0 is zeros
    (the simulated cluster starts empty); hours of day 0 use the running peak of the hours
    already seen; from day d >= 1 on, OrgLinear is refitted at each day boundary on the
    origins whose targets lie before it (at most ``refit_window_h`` hours back; first fit
    at least 300 Adam steps from scratch, later ``refit_steps`` steps warm-started) and forecasts
    that day. ``refit="once"``: the earlier protocol, one fit on the first ``train_frac`` of
    hours, reflection padding (in-sample for those hours)."""
    S, T = series.values.shape
    # "once" fits on the first train_frac of the whole series anyway (partly in-sample);
    # "daily" must not size its window by the series' future length
    lookback = DAILY_LOOKBACK_H if refit == "daily" else int(max(4, min(72, T // 4)))
    info: dict = {"method": method, "lookback_h": lookback, "hours": T, "series": S, "refit": refit}
    if refit not in REFIT_MODES:
        raise ValueError(f"unknown refit {refit!r}; use one of {REFIT_MODES}")
    origins = np.arange(T)

    def shaped(fc, n):
        return fc.mu[:, :H].reshape(n, S, H), fc.sigma[:, :H].reshape(n, S, H)

    if method == "lastweek_peak":
        f = LastWeekPeak(168 if refit == "daily" else min(168, T), H)
        f.pad = "zeros" if refit == "daily" else "reflect"
        mu, sg = shaped(f.predict(series, origins), T)
        return mu, sg, info
    if method != "orglinear":
        raise ValueError(f"unknown forecaster {method!r}; use orglinear or lastweek_peak")
    f = OrgLinear(lookback, H, epochs=epochs, kernel=min(25, lookback - 1))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny net: extra threads only contend on a shared CPU
    try:
        if refit == "once":
            train = np.arange(lookback, max(lookback + 1, int(T * train_frac) - H + 1))
            f.fit(series, train)
            mu, sg = shaped(f.predict(series, origins), T)
        else:
            f.pad = "zeros"
            mu, sg, info["refits"] = _rolling(series, f, T, S, H, epochs, refit_steps, refit_window_h)
    finally:
        torch.set_num_threads(threads)
    info["train_s"] = f.train_s
    return mu, sg, info


def _rolling(series: DemandSeries, f: OrgLinear, T: int, S: int, H: int, epochs: int, refit_steps: int,
             refit_window_h: int) -> tuple[np.ndarray, np.ndarray, int]:
    def shaped(fc, n):
        return fc.mu[:, :H].reshape(n, S, H), fc.sigma[:, :H].reshape(n, S, H)

    mu = np.zeros((T, S, H))
    sg = np.zeros((T, S, H))
    day0 = np.arange(min(24, T))
    peak = LastWeekPeak(168, H)  # zero-padded: a week of history whatever the trace's length
    peak.pad = "zeros"
    mu[day0], sg[day0] = shaped(peak.predict(series, day0), len(day0))
    refits = 0
    for d0 in range(24, T, 24):
        train = np.arange(max(1, d0 - refit_window_h), d0 - H + 1)
        if len(train) == 0:
            continue
        # 300 Adam steps for the first fit, 60 warm-started steps per daily refit (random
        # batches of the window): cheap enough to refit every simulated day
        batches = int(np.ceil(len(train) * S / f.batch))
        first = refits == 0
        n_steps = max(epochs * batches, 300) if first else refit_steps
        f.fit(series, train, epochs=int(np.ceil(n_steps / batches)), warm_start=not first, max_steps=n_steps)
        refits += 1
        day = np.arange(d0, min(d0 + 24, T))
        mu[day], sg[day] = shaped(f.predict(series, day), len(day))
    return mu, sg, refits


def forecast_hp_bounds(trace: JobTrace, method: str, sqa: SQAParams | None = None,
                       ps: Sequence[float] | None = None, refit: str = "daily", train_frac: float = 0.4,
                       epochs: int = 15, refit_steps: int = 60,
                       refit_window_h: int = 168) -> tuple[dict[float, np.ndarray], dict]:
    """{p: [pools, hours] HP demand bound} (slots) for SQA, one per quantile in ``ps``
    (default: ``sqa.p``): per hour, the Eq. 9 aggregate (``sqa.aggregate``) of the
    p-quantiles over the next H hours, from one forecast run (see
    :func:`_forecast_all_origins` for ``refit``). ``method``: "orglinear" (GDE) or
    "lastweek_peak" (GFS-e)."""
    sqa = sqa or SQAParams()
    ps = tuple(ps) if ps is not None else (sqa.p,)
    series, pools = hp_series(trace, sqa.hp_count)
    T = series.values.shape[1]
    H = sqa.horizon_h
    mu, sg, info = _forecast_all_origins(series, method, H, refit, train_frac, epochs, refit_steps,
                                         refit_window_h)
    info["aggregate"], info["hp_count"] = sqa.aggregate, sqa.hp_count
    out: dict[float, np.ndarray] = {}
    n_pools = len(trace.pool_names)
    for p in ps:
        bound = np.zeros((n_pools, T))
        if p <= 0.0:  # no HP demand assumed: a bound of 0 (GFS-BF with backfill_p = 0: any idle GPU)
            out[p] = bound
            continue
        z = float(norm.ppf(p))
        if sqa.aggregate == "sum_of_quantiles":
            per_series = np.maximum((mu + z * np.maximum(sg, 0.0)).max(axis=2), 0.0)  # [T, S]
            for s_i, pool in enumerate(pools):
                bound[pool] += per_series[:, s_i]
        else:  # quantile_of_sum: p-quantile of N(sum mu, sqrt(sum sigma^2)) per hour, max over H
            for pool in np.unique(pools):
                m = pools == pool
                tot = mu[:, m].sum(axis=1)
                sd = np.sqrt((np.maximum(sg[:, m], 0.0) ** 2).sum(axis=1))
                bound[pool] = np.maximum((tot + z * sd).max(axis=1), 0.0)
        out[p] = bound
    return out, info


def forecast_hp_upper(trace: JobTrace, method: str, sqa: SQAParams | None = None,
                      train_frac: float = 0.4, epochs: int = 15, refit: str = "daily") -> tuple[np.ndarray, dict]:
    """[pools, hours] HP demand bound for SQA at ``sqa.p`` (slots), see :func:`forecast_hp_bounds`."""
    sqa = sqa or SQAParams()
    bounds, info = forecast_hp_bounds(trace, method, sqa, refit=refit, train_frac=train_frac, epochs=epochs)
    return bounds[sqa.p], info


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
                   sqa: SQAParams | None = None, refit: str = "daily") -> Comparison:
    """Simulate ``policies`` on one trace/level; rows = policies, columns = COLUMNS.
    ``sqa`` overrides Table 4's SQA parameters (e.g. the guarantee hours H, Table 6, or
    the quota-tightness options); ``refit``: GDE "daily" (rolling origin) or "once"."""
    sqa = sqa or SQAParams()
    say = progress or (lambda msg: None)
    t0 = time.perf_counter()
    trace = build_trace(trace_name, level, data_dir, scale)
    say(f"{trace.name}: {trace.n_jobs} jobs ({int((~trace.is_hp).sum())} spot) on "
        f"{trace.capacity_gpus:.0f} GPUs; built in {time.perf_counter() - t0:.1f}s")
    uppers: dict[str, dict[float, np.ndarray]] = {}
    infos: dict[str, dict] = {}
    results: dict[str, SimResult] = {}
    rows = []
    for name in policies:
        pol = get_policy(name)
        upper = backfill = None
        if pol.quota == "sqa":
            if pol.forecaster not in uppers:
                say(f"  GDE forecast ({pol.forecaster}, refit {refit}) ...")
                uppers[pol.forecaster], infos[pol.forecaster] = forecast_hp_bounds(
                    trace, pol.forecaster, sqa, ps=(sqa.p, sqa.backfill_p), refit=refit)
            upper = uppers[pol.forecaster][sqa.p]
            backfill = uppers[pol.forecaster][sqa.backfill_p] if pol.backfill else None
        t1 = time.perf_counter()

        def tick(t, done, total, _n=name):
            say(f"  {_n}: sim day {t / 86400:6.1f}, {done}/{total} jobs done")

        res = simulate(trace, pol, upper, sqa=sqa, progress=tick if progress else None, hp_backfill=backfill)
        results[name] = res
        summ = res.summary()
        if pol.preemption == "none":  # Chronus: suspends at lease end, no evictions
            summ["spot_evict_pct"] = summ["spot_evict_gh_pct"] = float("nan")
        rows.append({"policy": name, **{COLUMNS[k]: summ[k] for k in COLUMNS},
                     "wall (s)": time.perf_counter() - t1, "jobs/s": trace.n_jobs / max(res.wall_s, 1e-9)})
        say(f"  {name}: done in {time.perf_counter() - t1:.1f}s "
            f"(HP JQT {summ['hp_jqt']:.0f}s, spot JQT {summ['spot_jqt']:.0f}s, e {summ['spot_evict_pct']:.2f}%)")
    table = pd.DataFrame(rows).set_index("policy")
    return Comparison(trace.name, level, table, results, infos)


def improvement_row(table: pd.DataFrame, ours: str = "GFS", against: Sequence[str] | None = None) -> pd.Series:
    """Paper's IMP. row: ``ours`` vs the best of ``against`` (default: every other policy)
    per column (lower is better), %."""
    others = table.drop(index=ours) if against is None else table.loc[[p for p in against if p in table.index]]
    cols = [c for c in COLUMNS.values() if c not in ("GPU alloc (%)", "unfinished", "Spot preempt (%)")
            and c in table.columns]
    best = others[cols].min()
    mine = table.loc[ours, cols]
    return (100.0 * (best - mine) / best.where(best != 0)).astype(float)


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


FAMILY_LABEL = {"ungated": "ungated", "gated": "gated (+Q)", "gfs": "GFS", "beyond": "beyond",
                "ablation": "ablation"}


def dominated_by(table: pd.DataFrame, policy: str, candidates: Sequence[str] | None = None,
                 axes: Sequence[str] = PARETO_AXES) -> list[str]:
    """Policies among ``candidates`` (default: all others) that Pareto-dominate ``policy``
    on ``axes`` (all lower is better): no worse on every axis and better on one."""
    me = table.loc[policy, list(axes)].astype(float)
    out = []
    for other in (candidates if candidates is not None else table.index):
        if other == policy or other not in table.index:
            continue
        o = table.loc[other, list(axes)].astype(float)
        if (o <= me).all() and (o < me).any():
            out.append(other)
    return out


def pareto_front(table: pd.DataFrame, axes: Sequence[str] = PARETO_AXES) -> list[str]:
    """Policies of ``table`` that no other row dominates on ``axes``."""
    return [p for p in table.index if not dominated_by(table, p, axes=axes)]


def gfs_vs_gated(table: pd.DataFrame, ours: str = "GFS") -> dict[str, bool]:
    """Does ``ours`` beat every gated baseline in ``table`` on spot JQT, on evictions per
    run and on evictions per guarantee-hour (strictly lower, ties count as a win)?"""
    from fleet.scheduling.baselines import GATED

    gated = [p for p in GATED if p in table.index]
    if ours not in table.index or not gated:
        return {}
    out = {}
    for col in ("Spot JQT (s)", "Spot e (%)", "Spot e/gh (%)"):
        out[col] = bool(all(table.loc[ours, col] <= table.loc[g, col] for g in gated))
    return out


def to_markdown(table: pd.DataFrame, digits: int = 1, families: bool = False) -> str:
    """Plain markdown table (no tabulate dependency); ``families`` adds each policy's
    baseline family (ungated / gated (+Q) / GFS / beyond / ablation)."""
    from fleet.scheduling.baselines import POLICIES

    cols = [c for c in table.columns if c not in ("wall (s)", "jobs/s")]
    head = ["policy"] + (["family"] if families else []) + cols
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for idx, row in table.iterrows():
        cells = [str(idx)]
        if families:
            pol = POLICIES.get(str(idx))
            cells.append(FAMILY_LABEL.get(pol.family, pol.family) if pol else "")
        for c in cols:
            v = row[c]
            nd = 0 if c == "unfinished" else 2 if "(%)" in c and c != "GPU alloc (%)" else digits
            cells.append("-" if pd.isna(v) else f"{v:,.{nd}f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _imp_line(table: pd.DataFrame, label: str, against: Sequence[str]) -> str:
    imp = improvement_row(table, "GFS", against)
    cells = []
    for c in [c for c in table.columns if c not in ("wall (s)", "jobs/s")]:
        v = imp.get(c)
        cells.append("-" if v is None or pd.isna(v) else f"{v:+.1f}%")
    return f"| {label} | | " + " | ".join(cells) + " |"


def report_markdown(tables: dict[tuple[str, str], pd.DataFrame], img_prefix: str = "img") -> str:
    """Markdown for docs/gfs.md from {(trace, level): full policy table}: per trace and level
    a Table 5 analogue (both baseline families, GFS, GFS-BF, IMP. rows vs each family,
    the like-for-like verdict and the Pareto front) and a Tables 8-10 analogue (ablations)."""
    from fleet.scheduling.baselines import ABLATIONS_PTS, BASELINES, GATED, UNGATED

    out = []
    for (trace, level), table in tables.items():
        base = table.loc[[p for p in BASELINES if p in table.index]]
        out.append(f"\n#### {trace}, {level} spot workload: GFS vs both baseline families (Table 5)\n")
        md = to_markdown(base, families=True)
        if "GFS" in base.index:
            for label, fam in (("IMP. vs gated", GATED), ("IMP. vs ungated", UNGATED)):
                if any(p in base.index for p in fam):
                    md += "\n" + _imp_line(base, label, fam)
        out.append(md)
        v = gfs_vs_gated(base)
        if v:
            out.append("\nGFS <= every gated baseline: "
                       + ", ".join(f"{k} {'yes' if ok else '**no**'}" for k, ok in v.items()) + ".")
        if all(a in base.columns for a in PARETO_AXES):
            front = pareto_front(base)
            line = f"Pareto front on (spot JQT, spot preemptions per run, HP JQT): {', '.join(front)}."
            if "GFS-BF" in base.index:
                dom = dominated_by(base, "GFS-BF", [p for p in base.index if p != "GFS-BF"])
                line += (" GFS-BF is dominated by " + ", ".join(dom) + "." if dom
                         else " GFS-BF is not dominated by any policy.")
            out.append(line)
        abl = [p for p in ("GFS-e", "GFS-d") + ABLATIONS_PTS if p in table.index]
        if len(abl) > 1:
            out.append(f"\n#### {trace}, {level}: ablations (Tables 8-10)\n")
            out.append(to_markdown(table.loc[list(dict.fromkeys(abl))]))
        out.append(f"\n![{trace} {level}]({img_prefix}/gfs-{trace}-{level}.png)\n")
    return "\n".join(out)


def plot_pareto(tables: dict[tuple[str, str], pd.DataFrame], path: str | Path) -> Path:
    """One panel per (trace, level): spot JQT (x, log) vs spot preemptions per run (y),
    colour = HP JQT; non-dominated policies (all three axes) ringed, the front's 2-D
    projection drawn as a step line."""
    from fleet.figures import pyplot, save_figure
    from fleet.scheduling.baselines import POLICIES

    plt = pyplot()
    keys = list(tables)
    traces = list(dict.fromkeys(k[0] for k in keys))
    levels = list(dict.fromkeys(k[1] for k in keys))
    fig, axes = plt.subplots(len(traces), len(levels), figsize=(4.6 * len(levels), 4.0 * len(traces)),
                             squeeze=False)
    marker = {"ungated": "s", "gated": "^", "gfs": "o", "beyond": "*", "ablation": "."}
    for (trace, level), table in tables.items():
        ax = axes[traces.index(trace)][levels.index(level)]
        t = table.loc[[p for p in table.index if POLICIES.get(p) and POLICIES[p].family != "ablation"]]
        t = t.dropna(subset=list(PARETO_AXES))
        front = set(pareto_front(t))
        x = np.maximum(t["Spot JQT (s)"].to_numpy(float), 1.0)
        y = t["Spot preempt (%)"].to_numpy(float)
        hp = t["HP JQT (s)"].to_numpy(float)
        norm_c = plt.Normalize(vmin=0.0, vmax=max(float(hp.max()), 1.0))
        for i, name in enumerate(t.index):
            fam = POLICIES[name].family
            sc = ax.scatter(x[i], y[i], c=[hp[i]], cmap="viridis", norm=norm_c, marker=marker[fam],
                            s=160 if fam == "beyond" else 60, edgecolors="k", linewidths=0.5, zorder=3)
            if name in front:
                ax.scatter(x[i], y[i], s=320, facecolors="none", edgecolors="tab:red", linewidths=1.2, zorder=2)
            ax.annotate(name, (x[i], y[i]), fontsize=7, xytext=(4, 3), textcoords="offset points")
        order = np.argsort(x)
        fx, fy, best = [], [], np.inf
        for i in order:  # 2-D (spot JQT, preemptions) lower-left staircase
            if y[i] < best:
                fx.append(x[i])
                fy.append(y[i])
                best = y[i]
        ax.step(fx, fy, where="post", color="tab:red", lw=0.8, alpha=0.6)
        ax.set_xscale("log")
        ax.set_xlabel("spot JQT (s, log)")
        ax.set_ylabel("spot preemptions per run (%)")
        ax.set_title(f"{trace} {level}", fontsize=9)
        fig.colorbar(sc, ax=ax, label="HP JQT (s)")
    fig.suptitle("square: ungated, triangle: gated (+Q), circle: GFS, star: GFS-BF; "
                 "red ring: not dominated on (spot JQT, preemptions, HP JQT)", fontsize=9)
    return save_figure(fig, path, dpi=80)
