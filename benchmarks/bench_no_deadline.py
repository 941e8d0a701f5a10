"""Fleet simulator: jobs without a deadline (``JobSpec.deadline_given=False``), every policy.

The report families (v100, h100, volatile; the markets of ``bench_fleet_sim.py``) at the
start ticks of the sweep's D/W 3 cells, notice 0 and 120 s. Each job has no deadline:
horizon 50 x the work, ``deadline_given=False``, as the live driver builds it
(``PolicyDriver.no_deadline_factor``). The horizon outruns every trace, so every run of a
market is stopped at one window, the longest that all its starts have (v100 57.8 h, h100
33.8 h, volatile 52.6 h at 100 starts): a job not done by then is unfinished.

Policies: spotfleet (default params) and every baseline. Only spotfleet reads
``deadline_given``; the baselines ignore it and run with the same 50 x work horizon as
their deadline: Uniform Progress's expected progress is then ``W t / (50 W)`` = ``t / 50``,
so it is behind (and goes on-demand from idle) only before it has saved any work, and
otherwise waits for spot like failover; greedy and failover never go on-demand (their
safety net is 50 x the work away). Reference columns measured in the same run:
``spotfleet_dw3`` = spotfleet with a loose deadline of its own (D/W 3, ``deadline_given``
True), and the floor = work + one restart at the lowest $/h anywhere in the window
(:func:`fleet.simulation.no_deadline.spot_floor_usd`).

Per family and notice, per policy: jobs finished, mean $, mean $ / mean floor, mean $ /
the best baseline's (the cheapest of greedy / Uniform Progress / failover that finished
every job; paired bootstrap interval over starts, ``families.bootstrap_ratio``), mean $ /
spotfleet_dw3's, mean and max completion (h and x W, finished jobs), mean and max idle h,
mean on-demand h. Progress on stderr; the tables and the speed (simulated job-hours per
CPU second, and as a ratio against real time) on stdout. ``--spot-only`` rules on-demand out
for the jobs without a deadline (``JobSpec.on_demand_allowed``, a pipeline's
``on_demand_fallback: false``).

    nice -n 10 python benchmarks/bench_no_deadline.py [--starts 100] [--families v100,h100,volatile]
        [--spot-only] [--markdown out.md] [--candidate NAME:field=value[,field=value...] ...]

``--candidate`` adds a spotfleet column ``candidate:NAME`` with those ``SpotfleetParams``,
run without a deadline like spotfleet (never a baseline), e.g.
``--candidate set:no_deadline_wait=set``.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fleet.policies.baselines import builtin_policy_factories  # noqa: E402
from fleet.policies.spotfleet import SpotfleetPolicy  # noqa: E402
from fleet.simulation.families import (  # noqa: E402
    FAMILIES,
    NOTICES,
    bootstrap_ratio,
    candidate_factories,
    is_candidate,
)
from fleet.simulation.no_deadline import (  # noqa: E402
    NO_DEADLINE_FACTOR,
    no_deadline_spec,
    run_capped,
    spot_floor_usd,
    window_hours,
)
from fleet.simulation.sweep import speed_report  # noqa: E402

DATA = Path(os.environ.get("SPOTFLEET_SHARED_DATA", ROOT.parent / "shared" / "data"))
START_RATIO = 3.0
"""The sweep cells whose start ticks are used (D/W 3: the loosest deadline, also the peer
reference ``spotfleet_dw3``)."""
PEER = "spotfleet_dw3"
OURS = "spotfleet"
NOT_BASELINES = (OURS, PEER, "on_demand")


def run_cell(fam, notice: float, starts: int, pols: dict, progress, spot_only: bool = False) -> dict:
    """Every policy on every start of ``fam`` at ``notice`` s; per policy arrays over the
    starts (cost $, completion h, idle h, on-demand h, finished) and the floors ($).
    ``spot_only``: on-demand ruled out for the jobs without a deadline
    (``JobSpec.on_demand_allowed`` False, a pipeline's ``on_demand_fallback: false``); the
    D/W 3 reference keeps it."""
    markets = fam.load(DATA, starts)
    per = max(1, math.ceil(starts / len(markets)))
    loose = fam.spec(START_RATIO, notice)
    spec = dataclasses.replace(no_deadline_spec(loose), on_demand_allowed=not spot_only)
    out: dict = {n: {"cost": [], "comp": [], "idle": [], "od": [], "fin": []} for n in (*pols, PEER)}
    floors, windows, sim_h = [], [], 0.0
    for m, _ in markets:
        ss = fam.starts(m, fam.spec(START_RATIO, 0.0), per)
        win = window_hours(m, ss)
        windows.append(win)
        floors += [spot_floor_usd(m, spec, s, win) for s in ss]
        for name, factory in (*pols.items(), (PEER, SpotfleetPolicy)):
            job = loose if name == PEER else spec
            for s in ss:
                run = run_capped(factory(), m, job, s, win)
                r = run.result
                d = out[name]
                d["cost"].append(r.cost)
                d["comp"].append(r.completion_hours)
                d["idle"].append(run.idle_hours)
                d["od"].append(r.on_demand_hours)
                d["fin"].append(run.finished)
                sim_h += r.completion_hours if run.finished else win
        progress(f"  {fam.name} notice {notice:g} s: market {len(windows)}/{len(markets)}, "
                 f"{len(ss)} starts, window {win:.1f} h")
    cell = {n: {k: np.asarray(v, dtype=float) for k, v in d.items()} for n, d in out.items()}
    return {"runs": cell, "floor": np.asarray(floors), "window": min(windows), "sim_hours": sim_h,
            "spot_only": spot_only}


def best_baseline(runs: dict) -> tuple[str, bool]:
    """The cheapest baseline (not spotfleet, its D/W 3 reference, a candidate or
    on-demand) that finished every job, and True; when none did, the cheapest of them all
    and False (its unfinished jobs' $ is what they spent within the window: a lower bound
    on their cost, so the ratio against it favours the baseline)."""
    base = [n for n in runs if n not in NOT_BASELINES and not is_candidate(n)]
    ok = [n for n in base if runs[n]["fin"].all()]
    return min(ok or base, key=lambda n: runs[n]["cost"].mean()), bool(ok)


def cell_table(fam, notice: float, cell: dict) -> str:
    runs, floor = cell["runs"], cell["floor"]
    w = fam.work_hours
    best, complete = best_baseline(runs)
    note = "" if complete else (" (no baseline finished every job: the cheapest, its unfinished "
                                "jobs' $ counted to the window's end)")
    only = ", on-demand ruled out" if cell.get("spot_only") else ""
    lines = [f"#### {fam.title}: no deadline{only} (horizon {NO_DEADLINE_FACTOR:g} x W = "
             f"{NO_DEADLINE_FACTOR * w:g} h), notice {notice:g} s, {floor.size} starts, "
             f"window {cell['window']:.1f} h = {cell['window'] / w:.1f} x W; best baseline: {best}"
             f"{note}", "",
             "| policy | finished | mean $ | / floor | / best baseline [95 % CI] | / spotfleet_dw3 [95 % CI] "
             "| completion h mean (x W) | max (x W) | idle h mean | idle h max | on-demand h mean |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for n, d in runs.items():
        fin = d["fin"].astype(bool)
        comp = d["comp"][fin]
        cost = d["cost"]

        def vs(ref: str | None, n: str = n, cost: np.ndarray = cost) -> str:
            if ref is None or ref == n:
                return "-"
            r, lo, hi = bootstrap_ratio(cost, runs[ref]["cost"])
            return f"{r:.3f} [{lo:.3f}, {hi:.3f}]"

        cm = f"{comp.mean():.1f} ({comp.mean() / w:.2f})" if comp.size else "-"
        cx = f"{comp.max():.1f} ({comp.max() / w:.2f})" if comp.size else "-"
        lines.append(f"| {n} | {fin.mean():.0%} | {cost.mean():.2f} | {cost.mean() / floor.mean():.3f} | "
                     f"{vs(best)} | {vs(PEER)} | {cm} | {cx} | {d['idle'].mean():.2f} | "
                     f"{d['idle'].max():.2f} | {d['od'].mean():.2f} |")
    lines.append(f"| floor (work + 1 restart at the window's lowest $/h) | | {floor.mean():.2f} | 1.000 | | | | | | | |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--starts", type=int, default=100, help="starts per family (and notice)")
    ap.add_argument("--families", default="v100,h100,volatile")
    ap.add_argument("--spot-only", action="store_true",
                    help="rule on-demand out for the jobs without a deadline (a pipeline's "
                         "on_demand_fallback: false)")
    ap.add_argument("--markdown", default="", help="write the tables (Markdown) here")
    ap.add_argument("--candidate", action="append", default=[],
                    metavar="NAME:field=value[,field=value...]",
                    help="add a spotfleet column with these SpotfleetParams, run without a "
                         "deadline too (repeatable; not a baseline)")
    args = ap.parse_args()
    names = [f for f in args.families.split(",") if f]
    if any(f in ("v100", "h100") for f in names) and not DATA.is_dir():
        print(f"skip: {DATA} not found (set SPOTFLEET_SHARED_DATA)")
        return 0
    try:
        pols = {**builtin_policy_factories(), **candidate_factories(args.candidate)}
    except ValueError as e:
        ap.error(str(e))

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    progress(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
             f"python {platform.python_version()}; {args.starts} starts per family and notice")
    wall0, cpu0 = time.perf_counter(), time.process_time()
    md: list[str] = []
    sim_hours = 0.0
    for fname in names:
        fam = FAMILIES[fname]
        for notice in NOTICES:
            t0 = time.perf_counter()
            cell = run_cell(fam, notice, args.starts, pols, progress, spot_only=args.spot_only)
            sim_hours += cell["sim_hours"]
            md += [cell_table(fam, notice, cell), ""]
            sf = cell["runs"][OURS]
            progress(f"{fname} notice {notice:g} s: spotfleet {sf['cost'].mean() / cell['floor'].mean():.3f}x "
                     f"floor, {sf['fin'].mean():.0%} finished ({time.perf_counter() - t0:.1f} s)")
    wall = time.perf_counter() - wall0
    cpu = time.process_time() - cpu0
    print("\n".join(md))
    print(speed_report(sim_hours, cpu, wall, "an unfinished run counts its window"))
    if args.markdown:
        Path(args.markdown).write_text("\n".join(md) + "\n", encoding="utf-8")
        print(f"tables written to {args.markdown}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

