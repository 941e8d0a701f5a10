"""Simulator speed: one month of the v2026-scale synthetic trace (~86,000 jobs on the
real 10,412-GPU node list) under GFS, as jobs per second and as a ratio of the
5-minute budget (ratio < 1 = within budget). Also times YARN-CS in the same run as a
peer (a simpler scheduler over the same event stream). The GDE forecast is refitted every
simulated day on the past only (``--refit daily``, the default since issue 13); its cost
is reported on its own line and is not part of the simulator's budget.

    python benchmarks/bench_gfs_sim.py [--days 30] [--policies GFS,YARN-CS] [--refit daily|once]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from fleet.scheduling.baselines import get_policy
from fleet.scheduling.cluster_sim import simulate
from fleet.scheduling.evaluation import forecast_hp_upper
from fleet.scheduling.traces import SynthConfig, synth_v2026

BUDGET_S = 300.0


def main() -> int:
    here = Path(__file__).resolve().parents[1]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--policies", default="GFS,YARN-CS")
    ap.add_argument("--refit", choices=["daily", "once"], default="daily")
    ap.add_argument("--data-dir", default=os.environ.get("SPOTFLEET_SHARED_DATA", str(here.parent / "shared" / "data")))
    args = ap.parse_args()
    t0 = time.perf_counter()
    trace = synth_v2026(args.data_dir, SynthConfig(days=args.days))
    built = time.perf_counter() - t0
    upper, info = forecast_hp_upper(trace, "orglinear", refit=args.refit)
    print(f"trace: {trace.n_jobs} jobs ({int((~trace.is_hp).sum())} spot), {trace.capacity_gpus:.0f} GPUs, "
          f"{args.days} days; built in {built:.1f}s")
    print(f"GDE ({args.refit}): {info['series']} series x {info['hours']} h, {info.get('refits', 1)} fits, "
          f"OrgLinear training {info.get('train_s', 0):.1f}s, forecast total {time.perf_counter() - t0 - built:.1f}s")
    for name in args.policies.split(","):
        pol = get_policy(name)
        res = simulate(trace, pol, upper if pol.quota == "sqa" else None)
        rate = trace.n_jobs / res.wall_s
        print(f"{name:8s} wall {res.wall_s:7.1f}s  {rate:8.0f} jobs/s  {res.events} events  "
              f"ratio vs 5-min budget {res.wall_s / BUDGET_S:.2f}  "
              f"(HP JQT {res.summary()['hp_jqt']:.0f}s, unfinished {res.unfinished})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
