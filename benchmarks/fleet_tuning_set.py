"""Fleet policies on the tuning set only: the default spotfleet against a candidate, and per-start diagnosis.

The default is spotfleet v11 since session 20 (``launch_guard="restart_cost"``); v10 is
``launch_guard="restart"``, v9 that and ``od_exit="reserve"``, v8 that and ``launch_guard="off"``, v7
that and ``model_check="holds_law"``, v6 that and ``model_check="off"``, v5 ``zone_model="history"``
(baseline names ``v10`` ... ``v5`` in ``--diagnose``, ``default`` for the default).

The tuning set of docs/fleet-policies.md (*Tuning discipline*; every candidate's figures in
docs/fleet-policies-tuning-log.md): the first half of each
real window at start times interleaved with the report starts
(``spread_starts(..., 80, offset=0.5)[:40]``), synthetic seeds 0-4 (8 starts each) and, since
session 6, the regime shift on seeds 80-84 (``--families`` picks a subset). SkyNomad's 6 H100
zones at D/W 1.05-1.2 are part of the tuning set too and are run by
``fleet_skynomad_settings.py --settings h100_6 --candidate NAME:...``.

    # every cell: the default vs a candidate (SpotfleetParams fields), both vs the best baseline
    nice -n 10 python benchmarks/fleet_tuning_set.py --params own_runs=switch_emp
    # paired per-start diagnosis of cells against a baseline (what differs, the worst starts)
    nice -n 10 python benchmarks/fleet_tuning_set.py --diagnose v100:1.5:120:failover_sky
    # the candidate (--params) start by start against v5 (baseline name "v5"; "default"
    # for the default policy), no sweep
    nice -n 10 python benchmarks/fleet_tuning_set.py --params own_runs=switch_emp \
        --diagnose v100:1.5:120:v5 --no-compare
    # the same diagnosis on the sweep's own starts of any family (held-out data, after
    # the one-shot sweep: nothing may be tuned on what this prints)
    nice -n 10 python benchmarks/fleet_tuning_set.py --report-starts 100 \
        --diagnose v100_apr:1.2:0:failover_sky
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

from fleet.policies.baselines import builtin_policy_factories  # noqa: E402
from fleet.policies.spotfleet import (  # noqa: E402
    DEFAULT_VERSION,
    VERSIONS,
    SpotfleetParams,
    SpotfleetPolicy,
)
from fleet.simulation.engine import simulate  # noqa: E402
from fleet.simulation.families import (  # noqa: E402
    FAMILIES,
    NOTICES,
    RATIOS,
    block_ci,
    bootstrap_ratio,
    spread_starts,
    start_blocks,
)
from fleet.simulation.omniscient import omniscient_bound  # noqa: E402

DATA = Path(os.environ.get("SPOTFLEET_SHARED_DATA", ROOT.parent / "shared" / "data"))


VERSION_PARAMS: dict[str, SpotfleetParams] = {k: v for k, v in VERSIONS.items() if k != DEFAULT_VERSION}
"""The earlier versions ``--diagnose`` can name as the baseline (the default is ``default``)."""

TUNING_FAMILIES = ("v100", "h100", "volatile", "shift")
"""The tuning set's families; ``shift`` (added in session 6, seventh round): the regime
shift of ``shift_holdout70`` on its own seeds 80-84, 8 starts each in the same window."""


ALL_BREAK_TUNING_SEEDS = range(400, 405)
"""``all_break`` (opt-in, ``--families``; added in session 14 after ``all_break_holdout410``
was run once): the shift that breaks every zone (``regimes.all_break_config``) on its own
seeds 400-404, 8 starts each, the shift families' window. Not in ``TUNING_FAMILIES``: the
verdict rule's 44 cells are unchanged; a round that uses it says so."""


def family_of(fname: str):
    """The :class:`Family` whose job spec a tuning family uses."""
    return FAMILIES["shift_holdout70" if fname in ("shift", "all_break") else fname]


def tuning_plan(fname: str, ratio: float) -> list[tuple]:
    """(market, start tick, seed) of the tuning set of one family and D/W."""
    fam = family_of(fname)
    base = fam.spec(ratio, 0.0)
    if fname in ("shift", "all_break"):
        from fleet.market.regimes import all_break_config, shift_config, shift_market
        from fleet.simulation.families import SHIFT_HOURS

        before, after = shift_config() if fname == "shift" else all_break_config()
        out = []
        for seed in (range(80, 85) if fname == "shift" else ALL_BREAK_TUNING_SEEDS):
            m = shift_market(before, after, seed, SHIFT_HOURS)
            out += [(m, s, seed) for s in spread_starts(m, base, 8, fam.warmup_hours,
                                                         last_start_hours=fam.last_start_hours)]
        return out
    if fname == "volatile":
        from fleet.market.regimes import regime_market, volatile_config

        cfg = volatile_config(hours=24.0 * 12)
        out = []
        for seed in range(5):
            m = regime_market(cfg, seed)
            out += [(m, s, seed) for s in spread_starts(m, base, 8, fam.warmup_hours)]
        return out
    (m, _), = fam.load(DATA, 40)
    return [(m, s, 0) for s in spread_starts(m, base, 80, fam.warmup_hours, offset=0.5)[:40]]


def report_plan(fname: str, ratio: float, starts: int) -> list[tuple]:
    """(market, start tick, market index) of the sweep's starts (``run_family``) of any
    family and D/W: ``starts`` split evenly over the family's markets."""
    fam = FAMILIES[fname]
    base = fam.spec(ratio, 0.0)
    markets = fam.load(DATA, starts)
    per = max(1, -(-starts // len(markets)))
    return [(m, s, k) for k, (m, _) in enumerate(markets)
            for s in fam.starts(m, base, per)]


def plan_blocks(plan: list[tuple], span_hours: float) -> np.ndarray:
    """Blocks of overlapping runs (:func:`start_blocks`) of a plan of (market, start,
    seed) rows, one market per seed, starts in time order within each."""
    seeds: list = []
    for m, s, seed in plan:
        if not seeds or seeds[-1][0] != seed:
            seeds.append((seed, m.gap_hours, []))
        seeds[-1][2].append(s)
    return start_blocks([ss for _, _, ss in seeds], [g for _, g, _ in seeds], span_hours)


def compare(params: SpotfleetParams, families: tuple[str, ...] = TUNING_FAMILIES) -> None:
    pols = {k: v for k, v in builtin_policy_factories().items() if k != "on_demand"}
    print("| family | D/W | notice s | default / omniscient | candidate / omniscient | candidate / default [95 % CI] "
          "| same, blocks of overlapping runs (blocks) | best baseline | default / best [CI] | candidate / best [CI] "
          "| deadlines met |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for fname in families:
        for ratio in RATIOS:
            plan = tuning_plan(fname, ratio)
            base = family_of(fname).spec(ratio, 0.0)
            om = np.array([omniscient_bound(m, base, s).cost for m, s, _ in plan]).mean()
            blocks = plan_blocks(plan, base.deadline_hours)
            for notice in NOTICES:
                spec = family_of(fname).spec(ratio, notice)
                costs = {n: np.array([simulate(f(), m, spec, s).cost for m, s, _ in plan])
                         for n, f in pols.items()}
                runs = [simulate(SpotfleetPolicy(params), m, spec, s) for m, s, _ in plan]
                cand = np.array([r.cost for r in runs])
                v5 = costs.pop("spotfleet")
                best = min(costs, key=lambda n: costs[n].mean())
                r = bootstrap_ratio(cand, v5)
                b5, b6 = bootstrap_ratio(v5, costs[best]), bootstrap_ratio(cand, costs[best])
                met = np.mean([x.deadline_met for x in runs]) * 100
                print(f"| {fname} | {ratio:g} | {notice:g} | {v5.mean() / om:.3f} | {cand.mean() / om:.3f} | "
                      f"{r[0]:.4f} [{r[1]:.4f}, {r[2]:.4f}] | {block_ci(blocks, cand, v5)} | {best} | {b5[0]:.3f} [{b5[1]:.3f}, {b5[2]:.3f}] | "
                      f"{b6[0]:.3f} [{b6[1]:.3f}, {b6[2]:.3f}] | {met:.0f}% |", flush=True)


def _rle(timeline, m) -> str:
    out: list[list] = []
    for t, loc in timeline:
        name = {-1: "OD", -2: "idle"}.get(loc, m.zones[loc] if loc >= 0 else str(loc))
        if out and out[-1][0] == name:
            out[-1][2] = t
        else:
            out.append([name, t, t])
    return " ".join(f"{n}[{b}-{e}]" for n, b, e in out)


def diagnose(cell: str, worst: int = 5, params: SpotfleetParams | None = None,
             report_starts: int = 0) -> None:
    """Paired per-start comparison of one cell ``family:D/W:notice:baseline``: spotfleet
    (the candidate ``params`` when given, else the default) against the baseline, or
    against v5 (``zone_model="history"``), v6 (``model_check="off"``), v7
    (``model_check="holds_law"``), v8 (each with ``launch_guard="off"``), v9 (``od_exit="reserve"``
    like v5-v8, ``launch_guard="restart"``) or v10 (``launch_guard="restart"``) when the baseline
    is named ``v5`` ... ``v10``, or the
    default when it is named ``default``; on the tuning set, or, with ``report_starts``, on
    the sweep's starts (``seed`` then prints the market index within the family)."""
    fname, ratio, notice, bname = cell.split(":")
    ratio, notice = float(ratio), float(notice)
    pols = dict(builtin_policy_factories())
    for name, p in VERSION_PARAMS.items():
        pols[name] = lambda p=p: SpotfleetPolicy(p)
    pols["default"] = SpotfleetPolicy
    if params is not None:
        pols["spotfleet"] = lambda: SpotfleetPolicy(params)
    spec = family_of(fname).spec(ratio, notice)
    plan = report_plan(fname, ratio, report_starts) if report_starts else tuning_plan(fname, ratio)
    which = f"sweep starts of {fname}" if report_starts else "tuning set"
    om = np.array([omniscient_bound(m, family_of(fname).spec(ratio, 0.0), s).cost for m, s, _ in plan])
    a = [simulate(pols["spotfleet"](), m, spec, s) for m, s, _ in plan]
    b = [simulate(pols[bname](), m, spec, s) for m, s, _ in plan]
    ca, cb = np.array([x.cost for x in a]), np.array([x.cost for x in b])
    r = bootstrap_ratio(ca, cb)
    print(f"\n{fname} D/W {ratio:g} notice {notice:g} s, {which} ({len(plan)} starts): spotfleet / {bname} "
          f"{r[0]:.3f} [{r[1]:.3f}, {r[2]:.3f}]; / omniscient {ca.mean() / om.mean():.3f} vs {cb.mean() / om.mean():.3f}")
    fields = [("cost $", "cost"), ("spot $", "spot_cost"), ("on-demand $", "on_demand_cost"),
              ("on-demand h", "on_demand_hours"), ("spot h", "spot_hours"), ("preemptions", "preemptions"),
              ("lost work h", "lost_work_hours"), ("saves h", "checkpoint_hours"), ("restarts h", "restart_hours"),
              ("migrations", "migrations"), ("failed probes", "failed_probes"), ("completion h", "completion_hours")]
    for label, f in fields:
        x, y = np.mean([getattr(v, f) for v in a]), np.mean([getattr(v, f) for v in b])
        print(f"  {label:14s} spotfleet {x:9.3f}  {bname} {y:9.3f}  diff {x - y:+9.3f}")
    d = ca - cb
    print(f"  paired $: dearer in {int((d > 1e-9).sum())} starts (+{d[d > 0].sum():.2f} $), cheaper in "
          f"{int((d < -1e-9).sum())} ({d[d < 0].sum():.2f} $)")
    for i in np.argsort(-d)[:worst]:
        m, s, seed = plan[i]
        tla: list = []
        tlb: list = []
        simulate(pols["spotfleet"](), m, spec, s, timeline=tla)
        simulate(pols[bname](), m, spec, s, timeline=tlb)
        x, y = a[i], b[i]
        print(f"  start {s} (seed {seed}): {d[i]:+.2f} $; spotfleet {x.cost:.2f} $ (on-demand {x.on_demand_hours:.2f} h, "
              f"{x.preemptions} preemptions, lost {x.lost_work_hours:.2f} h, {x.migrations} moves) vs {y.cost:.2f} $ "
              f"({y.on_demand_hours:.2f} h, {y.preemptions}, {y.lost_work_hours:.2f} h, {y.migrations})")
        print(f"     spotfleet: {_rle(tla, m)}\n     {bname}: {_rle(tlb, m)}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", nargs="*", default=[], help="candidate SpotfleetParams: field=value ...")
    ap.add_argument("--diagnose", nargs="*", default=[],
                    help="cells family:D/W:notice:baseline (baseline v5: against v5; default: against the default)")
    ap.add_argument("--no-compare", action="store_true", help="only the --diagnose cells")
    ap.add_argument("--families", default=",".join(TUNING_FAMILIES),
                    help=f"tuning families to compare (default: {','.join(TUNING_FAMILIES)})")
    ap.add_argument("--report-starts", type=int, default=0,
                    help="diagnose on the sweep's N starts per cell (any family) instead of "
                         "the tuning set")
    args = ap.parse_args()
    if not DATA.is_dir():
        print(f"skip: {DATA} not found (set SPOTFLEET_SHARED_DATA)")
        return 0
    print(f"load average at start: {os.getloadavg()}", flush=True)
    t0 = time.perf_counter()
    params = SpotfleetParams.from_assignments(args.params) if args.params else None
    for cell in args.diagnose:
        diagnose(cell, params=params, report_starts=args.report_starts)
    if (args.params or not args.diagnose) and not args.no_compare:
        compare(SpotfleetParams.from_assignments(args.params),
                tuple(f for f in args.families.split(",") if f))
    print(f"\n{time.perf_counter() - t0:.1f} s wall; load average at end: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
