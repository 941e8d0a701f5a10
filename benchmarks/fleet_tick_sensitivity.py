"""How much a fleet-policy result depends on the trace's tick length
(docs/fleet-policies.md, *Tick length*).

The public collection ticks every 32 s (April 2023 V100), 195 s (February 2023 V100),
300 s (our synthetic families) or 600 s (GCP H100). This runs every registered policy on a
family's market and on the same market at a ``--factor`` x finer tick
(:meth:`fleet.simulation.market.Market.refined`: the same hours of capacity at the same
prices; policies decide ``factor`` x as often and see launch tries at that cadence), from
the same start hours, and prints per cell:

* the exact omniscient bound, fine / coarse (<= 1: the fine grid holds every coarse plan);
* each policy's mean cost, fine / coarse (spotfleet with a paired 95 % bootstrap interval);
* spotfleet / the best baseline at each tick length.

A ratio near 1 says the result would stand on a trace with that finer tick.

    PYTHONPATH=$PWD nice -n 10 .venv/bin/python benchmarks/fleet_tick_sensitivity.py \\
        [--families v100,volatile,shift_holdout70] [--factor 3] [--starts 40] [--markdown out.md]
        [--ratios 1.2,2] [--notices 0,120] [--markets 1]
        [--candidate NAME:field=value[,field=value...] ...]

``--ratios`` / ``--notices`` run only those cells; ``--markets N`` pools the family's first
``N`` markets (default 1: the first only, e.g. seed 70 of ``shift_holdout70``), ``--starts``
each; ``--candidate`` (repeatable) adds a spotfleet variant with those ``SpotfleetParams``
(never a baseline) and a column with its fine / coarse [95 % CI] and its standing against
the best baseline, coarse -> fine. Without these options the output is unchanged.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fleet.policies.registry import policy_factories  # noqa: E402
from fleet.simulation.engine import simulate  # noqa: E402
from fleet.simulation.families import (  # noqa: E402
    FAMILIES,
    OURS,
    bootstrap_ratio,
    candidate_factories,
    is_candidate,
)
from fleet.simulation.omniscient import omniscient_bound  # noqa: E402

DATA = Path(os.environ.get("SPOTFLEET_SHARED_DATA", ROOT.parent / "shared" / "data"))
RATIOS = (1.2, 2.0)
NOTICES = (0.0, 120.0)


def run_family(fname: str, factor: int, starts: int, progress, ratios=RATIOS, notices=NOTICES,
               candidates: dict | None = None, markets: int = 1) -> list[str]:
    """Markdown rows of one family: every D/W of ``ratios`` x notice of ``notices``, on the
    family's first ``markets`` markets (``starts`` each, pooled)."""
    fam = FAMILIES[fname]
    loaded = [m for m, _ in fam.load(DATA, starts)[:markets]]
    pairs = [(m, m.refined(factor)) for m in loaded]
    market, fine = pairs[0]
    factories = {k: f for k, f in policy_factories().items() if k != "on_demand"}
    factories.update(candidates or {})
    rows = []
    for ratio in ratios:
        base = fam.spec(ratio, 0.0)
        jobs = [(m, f, s) for m, f in pairs for s in fam.starts(m, base, starts)]
        b_c = np.array([omniscient_bound(m, base, s).cost for m, _, s in jobs])
        b_f = np.array([omniscient_bound(f, base, s * factor).cost for _, f, s in jobs])
        for notice in notices:
            spec = fam.spec(ratio, notice)
            coarse_cost, fine_cost = {}, {}
            for name, make in factories.items():
                coarse_cost[name] = np.array([simulate(make(), m, spec, s).cost for m, _, s in jobs])
                fine_cost[name] = np.array([simulate(make(), f, spec, s * factor).cost
                                            for _, f, s in jobs])
            r, lo, hi = bootstrap_ratio(fine_cost[OURS], coarse_cost[OURS])
            others = [n for n in factories if n != OURS and not is_candidate(n)]
            best_c = min(others, key=lambda n: coarse_cost[n].mean())
            best_f = min(others, key=lambda n: fine_cost[n].mean())
            per = ", ".join(f"{n} {fine_cost[n].mean() / coarse_cost[n].mean():.3f}" for n in others)
            cand = ""
            if candidates:
                parts = []
                for n in candidates:
                    cr, clo, chi = bootstrap_ratio(fine_cost[n], coarse_cost[n])
                    parts.append(f"{n} {cr:.3f} [{clo:.3f}, {chi:.3f}], "
                                 f"{coarse_cost[n].mean() / coarse_cost[best_c].mean():.3f} -> "
                                 f"{fine_cost[n].mean() / fine_cost[best_f].mean():.3f}")
                cand = " " + "; ".join(parts) + " |"
            rows.append(
                f"| {fname} | {market.gap_seconds:g} -> {fine.gap_seconds:g} | {ratio:g} | {notice:g} | "
                f"{b_f.mean() / b_c.mean():.4f} | {r:.3f} [{lo:.3f}, {hi:.3f}] | {per} | "
                f"{coarse_cost[OURS].mean() / coarse_cost[best_c].mean():.3f} ({best_c}) | "
                f"{fine_cost[OURS].mean() / fine_cost[best_f].mean():.3f} ({best_f}) |{cand}")
            progress(rows[-1])
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--families", default="v100,volatile,shift_holdout70")
    ap.add_argument("--factor", type=int, default=3, help="ticks per original tick (>= 2)")
    ap.add_argument("--starts", type=int, default=40)
    ap.add_argument("--markdown", default=None, help="write the table to this file")
    ap.add_argument("--ratios", default=",".join(f"{r:g}" for r in RATIOS), help="D/W values")
    ap.add_argument("--notices", default=",".join(f"{n:g}" for n in NOTICES), help="notices (s)")
    ap.add_argument("--markets", type=int, default=1,
                    help="pool the family's first N markets (default 1: the first only)")
    ap.add_argument("--candidate", action="append", default=[],
                    metavar="NAME:field=value[,field=value...]",
                    help="add a spotfleet column with these SpotfleetParams (repeatable; not a baseline)")
    args = ap.parse_args(argv)
    unknown = [f for f in args.families.split(",") if f not in FAMILIES]
    if unknown or args.factor < 2:
        ap.error(f"--families: unknown {unknown} (known: {', '.join(FAMILIES)})" if unknown
                 else "--factor must be >= 2")
    wall0, cpu0, load0 = time.perf_counter(), time.process_time(), os.getloadavg()

    def progress(msg: str) -> None:
        print(f"[{time.perf_counter() - wall0:6.1f} s] {msg}", flush=True)

    head = ["| family | tick s | D/W | notice s | bound fine / coarse | spotfleet fine / coarse "
            "[95 % CI] | baselines fine / coarse | spotfleet / best, coarse | spotfleet / best, fine |",
            "|---|---|---|---|---|---|---|---|---|"]
    cands = candidate_factories(args.candidate)
    ratios = tuple(float(x) for x in args.ratios.split(","))
    notices = tuple(float(x) for x in args.notices.split(","))
    if args.markets < 1:
        ap.error("--markets must be >= 1")
    if cands:
        head[0] += " candidates: fine / coarse [95 % CI], / best coarse -> fine |"
        head[1] += "---|"
    rows = [row for f in args.families.split(",")
            for row in run_family(f, args.factor, args.starts, progress, ratios, notices, cands,
                                  args.markets)]
    table = "\n".join(head + rows)
    print()
    print(table)
    print(f"wall {time.perf_counter() - wall0:.1f} s, CPU {time.process_time() - cpu0:.1f} s; "
          f"load average at start {load0[0]:.1f}, at end {os.getloadavg()[0]:.1f}")
    if args.markdown:
        Path(args.markdown).write_text(table + "\n", encoding="utf-8")
        print(f"table written to {args.markdown}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
