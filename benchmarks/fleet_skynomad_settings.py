"""Our policies at SkyNomad's simulator settings (docs/fleet-policies.md, *Comparing with
SkyNomad's published figures*).

SkyNomad's published ratios (H100 1.04-1.07x its optimum, V100 1.117x, UP with eager
failover 1.258x) come from its own simulator. This runs spotfleet and every baseline of
the registry in **our** simulator with **their** job and cost settings
(:mod:`fleet.simulation.skynomad_settings`: fixed deadline, work = deadline / ratio,
restart 0.2 h, 50 GB checkpoint at 0.02 $/GB and no transfer time, no work lost at a
preemption, free failed launches) on their zones, and prints mean cost / exact
omniscient with paired bootstrap intervals, spotfleet against the best baseline, and the
published ratios beside ours.

Settings (``SETTINGS``):

* ``h100_6``  — the 6 Global Diverse GCP H100 zones of their deadline-sensitivity figure,
  deadline 51.83 h, D/W 1.05-2 (their seven ratios), 100 starts after 12 h of history;
* ``h100_6_windows`` — the same zones at their two windows that lie in our data (0 and 1,
  starting at 0 h and 51.83 h), D/W 1.05 and 1.5, where their per-window $ are published;
* ``h100_13`` — all 13 zones (their region-scaling figure goes up to 13), same job;
* ``v100_3``  — their 3 V100 zones (one per region), deadline 59.91 h, D/W 1.5, 100 starts
  over the 45 days after 168 h of history; ``v100_3_windows``: their five windows exactly;
* ``v100_9``  — all 9 V100 zones (our v100 family's market), same job.

Our data holds the first 116 h of their 352 h H100 trace: their windows 2-5 are not in
it, so the H100 starts are spread over the 116 h (overlapping); the market is padded
with unavailable ticks after its end so that our engine's run horizon
(deadline + work + 1 h) fits; every start's deadline lies inside the real ticks.

    PYTHONPATH=$PWD nice -n 10 .venv/bin/python benchmarks/fleet_skynomad_settings.py \
        [--starts 100] [--settings h100_6,h100_6_windows,h100_13,v100_3,v100_3_windows,v100_9] [--markdown out.md]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fleet.policies.base import JobSpec  # noqa: E402
from fleet.policies.registry import policy_factories  # noqa: E402
from fleet.simulation import skynomad_settings as sn  # noqa: E402
from fleet.simulation.engine import horizon_ticks, simulate  # noqa: E402
from fleet.simulation.families import (  # noqa: E402
    OURS,
    Cell,
    best_baseline,
    bootstrap_ratio,
    candidate_factories,
    candidate_table,
    family_table,
    goal_table,
    start_blocks,
)
from fleet.simulation.market import Market  # noqa: E402
from fleet.simulation.omniscient import omniscient_bound  # noqa: E402

DATA = Path(os.environ.get("SPOTFLEET_SHARED_DATA", ROOT.parent / "shared" / "data"))
NOTICE = 120.0  # with no checkpoint time, a preemption loses nothing (their model)


@dataclass(frozen=True)
class Setting:
    """One market at SkyNomad's job settings: zones, fixed deadline, D/W values, starts."""

    name: str
    title: str
    load: Callable[[Path], Market]
    deadline_ticks: int
    ratios: tuple[float, ...]
    warmup_hours: float
    windows: tuple[int, ...] = ()  # their tiled windows instead of spread starts


def _h100(zones: tuple[str, ...] | None) -> Callable[[Path], Market]:
    def load(data: Path) -> Market:
        m = Market.from_dir(data / "gcp-h100-2025")
        return m.subset(list(zones)) if zones else m

    return load


def _v100(zones: tuple[str, ...] | None) -> Callable[[Path], Market]:
    def load(data: Path) -> Market:
        m = Market.from_dir(data / "spot-traces/availability/1-node/aws-02-15-2023",
                           prices=data / "spot-prices/aws-v100-02-15-2023.json")
        m = m.with_on_demand_prices(3.06)
        return m.subset(list(zones)) if zones else m

    return load


SETTINGS: dict[str, Setting] = {s.name: s for s in (
    Setting("h100_6", "GCP H100, their 6 Global Diverse zones", _h100(sn.H100_GLOBAL_DIVERSE),
            sn.H100_DEADLINE_TICKS, sn.H100_RATIOS, 12.0),
    Setting("h100_6_windows", "GCP H100, their 6 zones, their windows 0-1",
            _h100(sn.H100_GLOBAL_DIVERSE), sn.H100_DEADLINE_TICKS, (1.05, 1.5), 12.0,
            sn.H100_WINDOWS_IN_OUR_DATA),
    Setting("h100_13", "GCP H100, all 13 zones", _h100(None), sn.H100_DEADLINE_TICKS,
            sn.H100_RATIOS, 12.0),
    Setting("v100_3", "AWS V100, their 3 zones", _v100(sn.V100_CROSS_AREA),
            sn.V100_DEADLINE_TICKS, (1.5,), 168.0),
    Setting("v100_3_windows", "AWS V100, their 3 zones, their 5 windows",
            _v100(sn.V100_CROSS_AREA), sn.V100_DEADLINE_TICKS, (1.5,), 168.0, sn.V100_WINDOWS),
    Setting("v100_9", "AWS V100, all 9 zones", _v100(None), sn.V100_DEADLINE_TICKS, (1.5,),
            168.0),
)}


def plan_starts(market: Market, spec: JobSpec, setting: Setting, n: int) -> tuple[Market, list[int]]:
    """The market (padded when the run horizon needs it) and the start ticks: ``n``
    evenly spread with ``start + deadline`` inside the real ticks, or their windows."""
    g = market.gap_hours
    if setting.windows:
        starts = sn.tiled_window_starts(spec.deadline_hours, market.gap_seconds, setting.windows)
    else:
        first = int(math.ceil(setting.warmup_hours / g))
        last = market.n_ticks - setting.deadline_ticks
        step = (last - first) / n
        starts = [int(first + k * step) for k in range(n)]
    need = max(starts) + horizon_ticks(spec, g) - market.n_ticks
    return sn.pad_unavailable(market, max(0, need)), starts


def run_setting(setting: Setting, data: Path, starts: int,
                progress: Callable[[str], None], candidates: dict[str, Callable] | None = None,
                ratios: tuple[float, ...] | None = None) -> list[Cell]:
    """Every D/W cell of ``setting`` (or only ``ratios``) for every registered policy and
    the ``--candidate`` spotfleet variants (notice: see NOTICE)."""
    base = setting.load(data)
    deadline = sn.deadline_hours_of(setting.deadline_ticks, base.gap_seconds)
    cells = []
    factories = {**policy_factories(), **(candidates or {})}
    for ratio in setting.ratios:
        if ratios and not any(abs(ratio - r) < 1e-9 for r in ratios):
            continue
        spec = sn.skynomad_job(deadline, ratio, notice_seconds=NOTICE)
        market, ss = plan_starts(base, spec, setting, starts)
        t0 = time.perf_counter()
        omni = np.array([omniscient_bound(market, spec, s).cost for s in ss])
        progress(f"{setting.name} D/W={ratio:g} (W={spec.work_hours:.2f} h, D={deadline:.2f} h): "
                 f"omniscient x{len(ss)} ({time.perf_counter() - t0:.1f} s)")
        cell = Cell(setting.name, ratio, NOTICE, omni,
                    blocks=start_blocks([ss], [market.gap_hours], spec.deadline_hours))
        t1 = time.perf_counter()
        for name, factory in factories.items():
            runs = [simulate(factory(), market, spec, s) for s in ss]
            late = [r for r in runs if not r.completion_hours <= deadline + 1e-9]
            if late:
                progress(f"  WARNING {name}: {len(late)} runs past the deadline")
            cell.costs[name] = np.array([r.cost for r in runs])
            cell.met[name] = np.array([r.deadline_met for r in runs])
            cell.migrations[name] = float(np.mean([r.migrations for r in runs]))
        cells.append(cell)
        ours = cell.costs[OURS].mean() / omni.mean()
        b = best_baseline(cell)
        progress(f"  {len(factories)} policies x {len(ss)} starts: spotfleet {ours:.3f}x, best baseline "
                 f"{b} {cell.costs[b].mean() / omni.mean():.3f}x ({time.perf_counter() - t1:.1f} s)")
    return cells


def published_table(cells: list[Cell]) -> str:
    """Markdown: their published ratios beside ours, per setting and D/W."""
    lines = ["| setting | D/W | SkyNomad (published) | UP(S) (published) | spotfleet (ours) "
             "[95 % CI] | up_eager_failover (ours) | best baseline (ours) |",
             "|---|---|---|---|---|---|---|"]
    for c in cells:
        if c.family == "h100_6_windows":
            vals = [sn.PUBLISHED_H100_WINDOW_USD[(c.ratio, w)] for w in sn.H100_WINDOWS_IN_OUR_DATA]
            opt, sky, ups = (sum(v[i] for v in vals) / len(vals) for i in range(3))
        elif c.family.startswith("h100"):
            opt, sky, ups = sn.PUBLISHED_H100_USD[c.ratio]
        else:
            p = sn.PUBLISHED_V100_USD
            opt, sky, ups = p["optimal"], p["skynomad"], p["up_s"]
        r, lo, hi = bootstrap_ratio(c.costs[OURS], c.omniscient)
        b = best_baseline(c)
        ue = c.costs["up_eager_failover"].mean() / c.omniscient.mean()
        lines.append(f"| {c.family} | {c.ratio:g} | {sn.published_ratio(opt, sky):.3f} | "
                     f"{sn.published_ratio(opt, ups):.3f} | {r:.3f} [{lo:.3f}, {hi:.3f}] | "
                     f"{ue:.3f} | {b} {c.costs[b].mean() / c.omniscient.mean():.3f} |")
    return "\n".join(lines)


def dollars_table(cells: list[Cell]) -> str:
    """Markdown: mean $ per start of the bound and of each policy (for the windows that
    are theirs exactly, comparable in $ with their figure)."""
    names = list(cells[0].costs)
    lines = ["| setting | D/W | starts | omniscient $ | " + " | ".join(names) + " |",
             "|---|---|---|---|" + "---|" * len(names)]
    for c in cells:
        lines.append(f"| {c.family} | {c.ratio:g} | {c.omniscient.size} | {c.omniscient.mean():.2f} | "
                     + " | ".join(f"{c.costs[n].mean():.2f}" for n in names) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--starts", type=int, default=100)
    ap.add_argument("--settings", default=",".join(SETTINGS))
    ap.add_argument("--markdown", default=None, help="write the tables to this file")
    ap.add_argument("--ratios", default=None,
                    help="only these D/W values of each setting, comma-separated (default: all)")
    ap.add_argument("--candidate", action="append", default=[],
                    help="NAME:field=value[,field=value...]: a spotfleet variant with those "
                         "SpotfleetParams as an extra column (never counted as a baseline)")
    args = ap.parse_args(argv)
    cand = candidate_factories(args.candidate)
    ratios = tuple(float(r) for r in args.ratios.split(",")) if args.ratios else None
    wall0, cpu0 = time.perf_counter(), time.process_time()
    load0 = os.getloadavg()

    def progress(msg: str) -> None:
        print(f"[{time.perf_counter() - wall0:6.1f} s] {msg}", flush=True)

    all_cells: list[Cell] = []
    md: list[str] = []
    for name in args.settings.split(","):
        setting = SETTINGS[name]
        cells = run_setting(setting, DATA, args.starts, progress, cand, ratios)
        if not cells:
            continue
        all_cells += cells
        md += [f"#### {setting.title} (`{name}`): mean cost / omniscient", "",
               family_table(cells, NOTICE), ""]
    if not all_cells:
        print(f"no cell: D/W {args.ratios} is in none of {args.settings}")
        return 2
    for name in cand:
        md += [f"#### {name} (a spotfleet variant, not a baseline) against the best baseline",
               "", goal_table(all_cells, name), "",
               f"#### {name} against spotfleet, start by start", "",
               candidate_table(all_cells, name), ""]
    md += ["#### spotfleet against the best baseline", "", goal_table(all_cells), "",
           "#### Published ratios beside ours", "", published_table(all_cells), "",
           "#### Mean $ per start", "", dollars_table(all_cells), ""]
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    print()
    print("\n".join(md))
    print(f"wall {wall:.1f} s, CPU {cpu:.1f} s; load average at start "
          f"{load0[0]:.1f}, at end {os.getloadavg()[0]:.1f}")
    if args.markdown:
        Path(args.markdown).write_text("\n".join(md) + "\n", encoding="utf-8")
        print(f"tables written to {args.markdown}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
