"""Fleet simulator: the three-family sweep of docs/fleet-policies.md, and its speed.

Families v100 (9 AWS zones, real per-tick prices), h100 (13 GCP zones in 8 regions,
migration cost) and volatile (synthetic) x D/W in {1.05, 1.2, 1.5, 2, 3} x notice
{0, 120 s} x every policy, ``--starts`` start times per cell (same starts for every
policy), plus the exact omniscient DP per (ratio, start). Prints progress, the tables
(Markdown with ``--markdown``) and the speed: simulated job-hours (sum of run completion
times) per CPU second, whole sweep and online policies alone, and how many omniscient
bounds had to be coarsened (0 means every bound is exact). Families kept out of tuning
(each run once after the version it checked; seen since): volatile_holdout,
available_holdout (seeds 40-44), volatile_holdout50,
available_holdout50 (50-54), and session 5's v100_apr (the real April 2023 V100 preemption
traces), volatile_holdout60, available_holdout60 (seeds 60-64); session 6's shift_holdout70
(a regime shift: calm history, cheap zones flaky during the job; seeds 70-74).

    nice -n 10 python benchmarks/bench_fleet_sim.py [--starts 100] [--families v100,h100,volatile]
        [--markdown out.md] [--plot out.png]
        [--candidate NAME:field=value[,field=value...] ...]

``--candidate`` (repeatable) adds a spotfleet column ``candidate:NAME`` with those
``SpotfleetParams`` beside the default spotfleet (v6) in the same sweep; it never counts as a baseline and gets its
own goal table (``candidate:NAME (not a baseline) / best``). Without it the output is
unchanged.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fleet.policies.baselines import builtin_policy_factories  # noqa: E402
from fleet.simulation.families import (  # noqa: E402
    FAMILIES,
    NOTICES,
    RATIOS,
    candidate_factories,
    candidate_table,
    family_table,
    goal_table,
    half_cells,
    has_baseline,
    run_family,
    select_policies,
)
from fleet.simulation.sweep import speed_report  # noqa: E402

DATA = Path(os.environ.get("SPOTFLEET_SHARED_DATA", ROOT.parent / "shared" / "data"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--starts", type=int, default=100)
    ap.add_argument("--families", default="v100,h100,volatile")
    ap.add_argument("--ratios", default=",".join(f"{r:g}" for r in RATIOS))
    ap.add_argument("--policies", default="", help="comma-separated subset (default: all)")
    ap.add_argument("--markdown", default="", help="write the tables (Markdown) here")
    ap.add_argument("--plot", default="", help="save a cost-ratio plot here")
    ap.add_argument("--candidate", action="append", default=[],
                    metavar="NAME:field=value[,field=value...]",
                    help="add a spotfleet column with these SpotfleetParams (repeatable; "
                         "not a baseline)")
    ap.add_argument("--halves", action="store_true",
                    help="also the goal table per half of the starts (v100/h100: per half window)")
    args = ap.parse_args()
    names = [f for f in args.families.split(",") if f]
    if any(f in ("v100", "h100", "v100_apr") for f in names) and not DATA.is_dir():
        print(f"skip: {DATA} not found (set SPOTFLEET_SHARED_DATA)")
        return 0
    try:
        cand = candidate_factories(args.candidate)
        pols = select_policies(builtin_policy_factories(), args.policies, cand)
    except ValueError as e:
        ap.error(str(e))
    goals = has_baseline(list(pols))
    if not goals:
        print("no baseline among --policies: the goal tables (spotfleet against the best "
              "baseline) are skipped; add one (e.g. failover) to get them", flush=True)
    ratios = [float(x) for x in args.ratios.split(",")]
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"python {platform.python_version()}; {args.starts} starts per cell", flush=True)
    from fleet.simulation.families import FAMILIES as F
    from fleet.simulation.omniscient import omniscient_bound  # compile outside the timing

    m, _ = F["volatile"].load(DATA, 1)[0]
    omniscient_bound(m, F["volatile"].spec(1.5, 0.0), 2100)
    wall0, cpu0 = time.perf_counter(), time.process_time()
    md: list[str] = []
    all_cells = []
    sim_hours = 0.0
    for fname in names:
        fam = FAMILIES[fname]
        cells = run_family(fam, DATA, pols, args.starts, ratios, NOTICES,
                           progress=lambda line: print(line, flush=True))
        all_cells += cells
        sim_hours += sum(c.sim_hours for c in cells)
        for notice in NOTICES:
            md += [f"#### {fam.title}: mean cost / omniscient, notice {notice:g} s", "",
                   family_table(cells, notice), ""]
    if goals:
        md += ["#### spotfleet against the best baseline of each cell", "", goal_table(all_cells), ""]
    for name in cand:
        if goals:
            md += [f"#### {name} (a spotfleet variant, not a baseline) against the best baseline "
                   "of each cell", "", goal_table(all_cells, name), ""]
        md += [f"#### {name} against spotfleet, start by start", "", candidate_table(all_cells, name), ""]
    if args.halves and goals:
        for second in (False, True):
            md += [f"#### spotfleet against the best baseline, {'second' if second else 'first'} "
                   "half of the starts", "", goal_table(half_cells(all_cells, second)), ""]
    coarse = sum(c.coarsened for c in all_cells if c.notice == NOTICES[0])
    bounds = sum(c.omniscient.size for c in all_cells if c.notice == NOTICES[0])
    wall = time.perf_counter() - wall0
    cpu = time.process_time() - cpu0
    print()
    print("\n".join(md))
    print("\n" + speed_report(sim_hours, cpu, wall))
    print(f"omniscient bounds: {bounds}, coarsened (not exact): {coarse}")
    if args.markdown:
        Path(args.markdown).write_text("\n".join(md) + "\n", encoding="utf-8")
        print(f"tables written to {args.markdown}")
    if args.plot:
        from fleet.simulation.plot import plot_families

        print(f"plot saved to {plot_families(all_cells, args.plot)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
