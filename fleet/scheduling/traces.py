"""Job traces for the GFS simulator.

* :func:`load_alibaba_v2023` — the real Alibaba GPU pod trace (cluster-trace-gpu-v2023):
  BE pods are the spot class, LS/Burstable/Guaranteed pods are HP.
* :func:`synth_v2026` — a synthetic trace in the GFS job format on the real v2026 node
  list, calibrated to the published aggregates (see docs/gfs.md, "Traces").
* :func:`scale_spot` — the low / medium / high spot workloads of §4.1 (x1, x2, x4).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from fleet.scheduling.trace_format import JobTrace

V2023_DIR = "alibaba-gpu-v2023"
V2026_DIR = "alibaba-spot-gpu-v2026"
WORKLOAD_LEVELS = {"low": 1.0, "medium": 2.0, "high": 4.0}

# Paper Table 3: share of pods by GPU request (<1, 1, 2, 4, 8) and gang share, per type.
TABLE3_GPU_SHARE = {
    True: {0: 0.0011, 1: 0.5511, 2: 0.1337, 4: 0.0753, 8: 0.2369},
    False: {0: 0.0082, 1: 0.6735, 2: 0.0567, 4: 0.1200, 8: 0.1404},
}
TABLE3_GANG_SHARE = {True: 0.0866, False: 0.2726}
# Paper Table 1 allocation rates, used as the offered load of each GPU model.
TABLE1_LOAD = {"A10": 0.8459, "A100-SXM4-80GB": 0.7434, "A800-SXM4-80GB": 0.6296, "H800": 0.6811}
DEFAULT_LOAD = 0.75


def _need(path: Path, what: str) -> Path:
    if not path.exists():
        raise FileNotFoundError(f"{what} not found at {path}; pass --data-dir pointing at shared/data")
    return path


def offered_load(submit: np.ndarray, duration: np.ndarray, slots: np.ndarray, capacity: float) -> float:
    """Share of ``capacity`` the jobs would occupy over [0, last submit] if run on arrival."""
    span = float(submit.max()) if len(submit) else 0.0
    if span <= 0:
        return 0.0
    return float(np.sum(slots * np.clip(span - submit, 0, duration)) / (capacity * span))


def compress_to_load(submit: np.ndarray, duration: np.ndarray, slots: np.ndarray, capacity: float,
                     target: float) -> float:
    """Factor k >= 1 such that arrivals at ``submit / k`` offer ``target`` load (bisection)."""
    lo, hi = 1.0, 1e5
    if offered_load(submit, duration, slots, capacity) >= target:
        return 1.0
    for _ in range(60):
        mid = np.sqrt(lo * hi)
        if offered_load(submit / mid, duration, slots, capacity) < target:
            lo = mid
        else:
            hi = mid
    return float(hi)


def load_alibaba_v2023(data_dir: str | Path, slots_per_gpu: int = 10, spot_ckpt_s: float = 1800.0,
                       target_load: float = 0.5, min_daily_pods: int = 50,
                       max_duration_s: float = 86400.0, time_compression: float = 6.0) -> JobTrace:
    """Real v2023 pods as jobs of one worker, replayed at their real times.

    GPU amounts are in tenths of a GPU: fractional pods keep their ``gpu_milli`` share,
    rounded up to 0.1 GPU, and a node pools its cards (node-level accounting, as Alg. 1
    line 7 does for g < 1). CPU-only pods and pods that never ran are dropped;
    ``gpu_spec`` is empty in this file, so all nodes form one pool.

    The file was published as a packing workload: its 6,212 GPUs are ~0.2% busy over
    149 days and nearly all pods arrive in the last ~34 days. So the replay starts at the
    first day with ``min_daily_pods`` arrivals (times shifted to 0), arrival times are
    divided by ``time_compression`` (34 days -> ~6 days), durations are capped at
    ``max_duration_s``, and the node list is thinned (evenly within each
    (model, GPUs per node) group, keeping at least one node of each size that a pod
    needs) until the pods offer ``target_load`` of the remaining GPUs.
    """
    d = Path(data_dir) / V2023_DIR
    nodes = pd.read_csv(_need(d / "openb_node_list_gpu_node.csv", "v2023 node list"))
    pods = pd.read_csv(_need(d / "openb_pod_list_default.csv", "v2023 pod list"))
    start = np.maximum(pods.scheduled_time.to_numpy(float), pods.creation_time.to_numpy(float))
    dur = pods.deletion_time.to_numpy(float) - start
    keep = (pods.num_gpu.to_numpy() > 0) & (dur > 0)
    pods, dur = pods[keep], np.minimum(dur[keep], max_duration_s)
    day = (pods.creation_time.to_numpy(float) // 86400).astype(int)
    busy_days = np.flatnonzero(np.bincount(day) >= min_daily_pods)
    first = int(busy_days[0]) if len(busy_days) else 0
    recent = day >= first
    pods, dur = pods[recent], dur[recent]
    submit = (pods.creation_time.to_numpy(float) - first * 86400.0) / time_compression
    milli = pods.gpu_milli.to_numpy(float)
    ngpu = pods.num_gpu.to_numpy(int)
    g = np.where(ngpu == 1, np.ceil(np.maximum(milli, 1) / (1000 / slots_per_gpu)), ngpu * slots_per_gpu).astype(np.int64)
    qos_names = ["LS", "BE", "Burstable", "Guaranteed"]
    org = pods.qos.map({q: i for i, q in enumerate(qos_names)}).to_numpy(int)
    is_hp = pods.qos.to_numpy() != "BE"
    # thin the node list to the target load
    need = float(np.sum(g * np.clip(submit.max() - submit, 0, dur)) / submit.max()) / target_load
    frac = min(1.0, need / float(nodes.gpu.sum() * slots_per_gpu))
    rank = nodes.groupby(["model", "gpu"]).cumcount()
    keep_n = np.floor((rank + 1) * frac) > np.floor(rank * frac)  # evenly spaced picks
    biggest = nodes.gpu * slots_per_gpu >= g.max()
    if not np.any(keep_n & biggest):
        keep_n |= biggest & (rank == 0) & (nodes.gpu == nodes.gpu[biggest].max())
    nodes = nodes[keep_n]
    return JobTrace(
        name="v2023", pool_names=["any"], node_pool=np.zeros(len(nodes), dtype=np.int64),
        node_total=nodes.gpu.to_numpy(np.int64) * slots_per_gpu, org_names=qos_names,
        pool=np.zeros(len(pods), dtype=np.int64), org=org, is_hp=is_hp, g=g,
        w=np.ones(len(pods), dtype=np.int64), submit=submit, duration=dur,
        ckpt=np.where(is_hp, 0.0, spot_ckpt_s), slots_per_gpu=slots_per_gpu,
    )


@dataclass(frozen=True)
class SynthConfig:
    """Knobs of the synthetic v2026 trace."""

    start_day: int = 31  # first trace day of the window (spot jobs appear from day ~31)
    days: int = 30
    seed: int = 0
    spot_ckpt_s: float = 1800.0  # checkpoint interval of spot jobs, seconds
    max_duration_s: float = 14 * 86400.0
    load_scale: float = 1.0  # x Table 1 allocation rate = cap on each model's offered load
    job_fraction: float = 1.0  # thin arrivals (tests use small clusters/fractions)
    node_fraction: float = 1.0  # keep this share of each model's nodes


def _lognormal_params(median: float, p90: float) -> tuple[float, float]:
    return float(np.log(median)), float(np.log(p90 / median) / 1.2815515655446004)


def synth_v2026(data_dir: str | Path, cfg: SynthConfig | None = None) -> JobTrace:
    """Synthetic month of HP and spot jobs on the real v2026 node list.

    Calibration (each from ``aggregates/``): hourly arrivals = the real hourly job counts
    of the window; HP/spot split per day = real daily hp_jobs/spot_jobs; organizations
    drawn by their real job counts (top 12, rest pooled as "other"); GPU model by
    real per-model job share, restricted to models whose nodes fit the pod; GPU request
    per pod and gang share from paper Table 3; worker counts of gangs from the real
    worker-count distribution; durations lognormal per type fitted to the real median and
    p90 (job_type_summary), truncated at ``max_duration_s``, then scaled per GPU model so
    that the month's offered load equals the paper's Table 1 allocation rate.
    """
    cfg = cfg or SynthConfig()
    rng = np.random.default_rng(cfg.seed)
    base = Path(data_dir) / V2026_DIR
    agg = base / "aggregates"
    nodes = pd.read_csv(_need(base / "node_info_df.csv", "v2026 node list"))
    if cfg.node_fraction < 1.0:
        rank = nodes.groupby("gpu_model").cumcount()
        size = nodes.gpu_model.map(nodes.gpu_model.value_counts())
        nodes = nodes[rank < np.maximum(1, np.round(size * cfg.node_fraction))]
    hourly = pd.read_csv(_need(agg / "hourly_summary.csv", "hourly_summary.csv"))
    daily = pd.read_csv(agg / "daily_summary.csv")
    by_model = pd.read_csv(agg / "demand_by_model.csv")
    types = pd.read_csv(agg / "job_type_summary.csv").set_index("job_type")
    orgs = pd.read_csv(agg / "org_by_gpu_seconds.csv").sort_values("jobs", ascending=False)
    workers = pd.read_csv(agg / "worker_count_distribution.csv")

    pool_names = sorted(nodes.gpu_model.unique())
    pool_of = {m: i for i, m in enumerate(pool_names)}
    node_pool = nodes.gpu_model.map(pool_of).to_numpy(np.int64)
    node_total = nodes.gpu_capacity_num.to_numpy(np.int64)
    max_slots = np.zeros(len(pool_names), dtype=np.int64)
    np.maximum.at(max_slots, node_pool, node_total)

    # arrivals: real hourly counts in the window, HP/spot split by the real daily mix
    h0, h1 = cfg.start_day * 24, (cfg.start_day + cfg.days) * 24
    hrs = hourly[(hourly.submit_hour >= h0) & (hourly.submit_hour < h1)]
    counts = rng.binomial(hrs.jobs.to_numpy(int), cfg.job_fraction)
    hour_idx = np.repeat(hrs.submit_hour.to_numpy(int) - h0, counts)
    submit = (hour_idx + rng.random(len(hour_idx))) * 3600.0
    day_mix = daily.set_index("submit_day")
    spot_frac = (day_mix.spot_jobs / day_mix.jobs).reindex(range(cfg.start_day, cfg.start_day + cfg.days)).fillna(0).to_numpy()
    is_hp = rng.random(len(submit)) >= spot_frac[hour_idx // 24]
    n = len(submit)

    # organizations
    top = orgs.head(12)
    org_names = [f"org-{o}" for o in top.organization] + ["other"]
    org_p = np.append(top.jobs.to_numpy(float), orgs.jobs.iloc[12:].sum())
    org = rng.choice(len(org_names), size=n, p=org_p / org_p.sum())

    # GPU model by its real job share; GPU request per pod from paper Table 3 ("<1"
    # becomes 1 GPU) restricted to sizes the model's largest node holds (A10: 1 GPU);
    # gang share from Table 3, gang sizes from the real worker-count distribution
    model_share = by_model.set_index("gpu_model").jobs.reindex(pool_names).fillna(0).to_numpy(float)
    pool = rng.choice(len(pool_names), size=n, p=model_share / model_share.sum())
    g = np.empty(n, dtype=np.int64)
    w = np.ones(n, dtype=np.int64)
    wk = workers[workers.worker_num > 1]
    wk_p = wk.jobs.to_numpy(float) / wk.jobs.sum()
    for hp in (True, False):
        sizes = np.maximum(np.array(list(TABLE3_GPU_SHARE[hp])), 1)
        share = np.array(list(TABLE3_GPU_SHARE[hp].values()))
        for p in range(len(pool_names)):
            m = (is_hp == hp) & (pool == p)
            pr = share * (sizes <= max_slots[p])
            g[m] = rng.choice(sizes, size=m.sum(), p=pr / pr.sum())
        gang = (is_hp == hp) & (rng.random(n) < TABLE3_GANG_SHARE[hp])
        w[gang] = rng.choice(wk.worker_num.to_numpy(int), size=gang.sum(), p=wk_p)
    # cap gangs so they fit their pool (a gang of w pods needs w*g slots)
    cap = np.bincount(node_pool, weights=node_total, minlength=len(pool_names))
    w = np.minimum(w, np.maximum(1, (cap[pool] // 4) // g)).astype(np.int64)

    # durations: the real duration buckets (job shares), log-uniform inside a bucket,
    # shifted per type by (type median / overall median); then scaled *down* per GPU model
    # where the month would offer more than the paper's Table 1 allocation rate
    buckets = pd.read_csv(agg / "bucket_duration.csv")
    quant = pd.read_csv(agg / "duration_quantiles.csv", index_col=0)
    edges = {"0 to 1 min": (1, 60), "1 to 10 min": (60, 600), "10 to 60 min": (600, 3600),
             "1 to 6 hours": (3600, 21600), "6 to 24 hours": (21600, 86400),
             "1 to 3 days": (86400, 259200), "over 3 days": (259200, cfg.max_duration_s)}
    bp = buckets.set_index("duration_bucket").jobs.reindex(list(edges)).fillna(0).to_numpy(float)
    lo_hi = np.array(list(edges.values()), dtype=float)
    pick = rng.choice(len(edges), size=n, p=bp / bp.sum())
    lo, hi = np.log(lo_hi[pick, 0]), np.log(np.maximum(lo_hi[pick, 1], lo_hi[pick, 0] + 1))
    dur = np.exp(lo + rng.random(n) * (hi - lo))
    overall_median = float(quant.loc[0.5].iloc[0])
    for hp, name in ((True, "HP"), (False, "Spot")):
        m = is_hp == hp
        dur[m] *= float(types.loc[name, "median_duration"]) / overall_median
    dur = np.clip(dur, 10.0, cfg.max_duration_s)
    window = cfg.days * 86400.0
    for p, model in enumerate(pool_names):
        m = pool == p
        offered = float(np.sum(g[m] * w[m] * np.minimum(dur[m], window - submit[m])))
        target = cfg.load_scale * TABLE1_LOAD.get(model, DEFAULT_LOAD) * cap[p] * window
        if offered > target > 0:
            dur[m] = np.clip(dur[m] * target / offered, 10.0, cfg.max_duration_s)
    order = np.argsort(submit, kind="stable")
    return JobTrace(
        name="v2026-synth", pool_names=pool_names, node_pool=node_pool, node_total=node_total,
        org_names=org_names, pool=pool[order], org=org[order], is_hp=is_hp[order], g=g[order],
        w=w[order], submit=submit[order], duration=dur[order],
        ckpt=np.where(is_hp[order], 0.0, cfg.spot_ckpt_s), slots_per_gpu=1,
    )


def scale_spot(trace: JobTrace, factor: float, seed: int = 0, jitter_s: float = 1800.0) -> JobTrace:
    """§4.1 workloads: spot submission rate x ``factor`` (1 low, 2 medium, 4 high).
    Extra spot jobs are copies of real ones with submit times jittered by +-``jitter_s``."""
    if factor < 1:
        raise ValueError(f"spot scale factor must be >= 1, got {factor}")
    rng = np.random.default_rng(seed)
    spot = np.flatnonzero(~trace.is_hp)
    reps = [np.arange(trace.n_jobs)]
    extra_submit = [trace.submit]
    k = factor - 1.0
    while k > 0:
        take = spot if k >= 1 else spot[rng.random(len(spot)) < k]
        reps.append(take)
        extra_submit.append(np.maximum(0.0, trace.submit[take] + rng.uniform(-jitter_s, jitter_s, len(take))))
        k -= 1.0
    idx = np.concatenate(reps)
    submit = np.concatenate(extra_submit)
    order = np.argsort(submit, kind="stable")
    idx, submit = idx[order], submit[order]
    return JobTrace(trace.name, trace.pool_names, trace.node_pool, trace.node_total, trace.org_names,
                    trace.pool[idx], trace.org[idx], trace.is_hp[idx], trace.g[idx], trace.w[idx],
                    submit, trace.duration[idx], trace.ckpt[idx], trace.slots_per_gpu)


def load_trace(name: str, data_dir: str | Path, level: str = "low", **kwargs) -> JobTrace:
    """``name`` in {"v2023", "v2026"}; ``level`` in {"low", "medium", "high"}."""
    if level not in WORKLOAD_LEVELS:
        raise ValueError(f"unknown workload level {level!r}; use low, medium or high")
    if name == "v2023":
        base = load_alibaba_v2023(data_dir)
    elif name == "v2026":
        base = synth_v2026(data_dir, SynthConfig(**kwargs))
    else:
        raise ValueError(f"unknown trace {name!r}; use v2023 or v2026")
    return scale_spot(base, WORKLOAD_LEVELS[level])


def calibration_report(trace: JobTrace, data_dir: str | Path, start_day: int = 31, days: int = 30) -> pd.DataFrame:
    """Synthetic v2026 trace vs the published aggregates it was calibrated to."""
    agg = Path(data_dir) / V2026_DIR / "aggregates"
    daily = pd.read_csv(agg / "daily_summary.csv")
    win = daily[(daily.submit_day >= start_day) & (daily.submit_day < start_day + days)]
    types = pd.read_csv(agg / "job_type_summary.csv").set_index("job_type")
    by_model = pd.read_csv(agg / "demand_by_model.csv").set_index("gpu_model")
    workers = pd.read_csv(agg / "bucket_worker_num.csv").set_index("worker_bucket")
    hp = trace.is_hp
    rows = [
        ("jobs per day", win.jobs.mean(), trace.n_jobs / days),
        ("spot share of jobs (%)", 100 * win.spot_jobs.sum() / win.jobs.sum(), 100 * (~hp).mean()),
        ("multi-worker share (%)", 100 * (1 - workers.loc["1", "jobs_share"]), 100 * np.mean(trace.w > 1)),
        ("HP median duration (s)", types.loc["HP", "median_duration"], float(np.median(trace.duration[hp]))),
        ("spot median duration (s)", types.loc["Spot", "median_duration"], float(np.median(trace.duration[~hp]))),
        ("HP p90 duration (s)", types.loc["HP", "p90_duration"], float(np.percentile(trace.duration[hp], 90))),
    ]
    for m in trace.pool_names:
        if m in by_model.index:
            share = np.mean(trace.pool == trace.pool_names.index(m))
            rows.append((f"{m} share of jobs (%)", 100 * by_model.loc[m, "jobs_share"], 100 * share))
    return pd.DataFrame(rows, columns=["statistic", "published", "synthetic"]).set_index("statistic")
