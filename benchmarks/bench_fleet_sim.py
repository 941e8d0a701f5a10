"""Fleet simulator speed: the full 9-zone Must-show sweep.

Every online policy x three job shapes (24/36 h, 48/72 h, 12/14 h) x 100 start times x
{no notice, 120 s notice}, plus the exact omniscient DP per (shape, start) (the bound
does not depend on the notice, so it is computed once). Prints simulated job-hours per
second (simulated wall-clock hours of all runs / CPU seconds) and the sweep's wall time
as a ratio to the 60 s budget.

    python benchmarks/bench_fleet_sim.py [--starts 100] [--markdown out.md] [--plot out.png]
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fleet.policies.base import JobSpec  # noqa: E402
from fleet.simulation.market import Market  # noqa: E402
from fleet.simulation.omniscient import omniscient_bound  # noqa: E402
from fleet.simulation.sweep import (  # noqa: E402
    SweepResult,
    format_table,
    make_policies,
    run_sweep,
    start_ticks,
    summarize,
)

DATA = Path(os.environ.get("SPOTFLEET_SHARED_DATA", ROOT.parent / "shared" / "data"))
TRACES = DATA / "spot-traces/availability/1-node/aws-02-15-2023"
SHAPES = [(24.0, 36.0), (48.0, 72.0), (12.0, 14.0)]
BUDGET_S = 60.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--starts", type=int, default=100)
    ap.add_argument("--markdown", default="", help="write the tables (Markdown) here")
    ap.add_argument("--plot", default="", help="save the cost-distribution plot here")
    args = ap.parse_args()
    if not TRACES.is_dir():
        print(f"skip: {TRACES} not found (set SPOTFLEET_SHARED_DATA)")
        return 0
    market = Market.from_dir(TRACES)
    omniscient_bound(market, JobSpec(1.0, 2.0), 0)  # compile the DP outside the timing
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"python {platform.python_version()}; {market.n_zones} zones, {args.starts} starts")
    wall0, cpu0 = time.perf_counter(), time.process_time()
    sim_hours = 0.0
    dp_cpu = 0.0
    sweeps: list[tuple[str, SweepResult]] = []
    md: list[str] = []
    for work, deadline in SHAPES:
        base = JobSpec(work, deadline)
        starts = start_ticks(market, base, args.starts)
        t = time.process_time()
        bound = [omniscient_bound(market, base, s).cost for s in starts]
        dp_cpu += time.process_time() - t
        print(f"W={work:g} D={deadline:g}: omniscient DP {len(starts)} starts "
              f"({time.process_time() - t:.1f} s CPU)", flush=True)
        for notice in (0.0, 120.0):
            spec = JobSpec(work, deadline, notice_seconds=notice)
            res = run_sweep(market, spec, make_policies(), starts, with_omniscient=False,
                            progress=lambda line: print(line, flush=True))
            res.omniscient = bound
            sim_hours += sum(r.completion_hours for runs in res.runs.values() for r in runs
                             if math.isfinite(r.completion_hours))
            title = f"W={work:g} h, D={deadline:g} h, notice {notice:g} s"
            sweeps.append((title, res))
            rows = summarize(res)
            ours = next(r for r in rows if r.policy == "spotfleet")
            print(f"{title}: spotfleet / omniscient = {ours.cost_vs_omniscient:.3f}, "
                  f"deadlines met {ours.deadline_met_rate:.0%}")
            md += [f"### {title}", "", format_table(rows), ""]
    wall = time.perf_counter() - wall0
    cpu = time.process_time() - cpu0
    print(f"\nsimulated job-hours: {sim_hours:,.0f} in {cpu:.1f} s CPU "
          f"({sim_hours / cpu:,.0f} job-hours/s; online policies alone "
          f"{sim_hours / max(cpu - dp_cpu, 1e-9):,.0f} job-hours/s, DP {dp_cpu:.1f} s CPU)")
    print(f"sweep wall time {wall:.1f} s = {wall / BUDGET_S:.2f} x the {BUDGET_S:.0f} s budget "
          f"(CPU {cpu:.1f} s = {cpu / BUDGET_S:.2f} x)")
    if args.markdown:
        Path(args.markdown).write_text("\n".join(md) + "\n", encoding="utf-8")
        print(f"tables written to {args.markdown}")
    if args.plot:
        from fleet.simulation.plot import plot_sweeps

        print(f"plot saved to {plot_sweeps(sweeps, args.plot)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
