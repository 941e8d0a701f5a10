"""How much two billing quirks of the fleet simulator matter on the report families.

docs/fleet-policies.md (*The model the simulator runs*, "On-demand and migrations") names
two questionable billing points of the engine and the omniscient DP, both fixed since
(2026-11-26, "The fix"); this counter measured them before and checks the fix now (the
figures: docs/fleet-policies-tuning-log.md, *The billing fix, measured*):

(a) a cross-region move was billed (egress $ + transfer time) even when the job had no
    checkpoint yet (nothing to copy); now it is not, and (a) counts 0. Measured per cell
    and policy with a pass-through policy wrapper (:class:`MoveProbe`) that sees the engine's ``JobState`` at every
    decision: a decision followed by a billed migration while no work was committed (and
    no voluntary save of uncommitted work happens on the way out) is a move of nothing.
    Its direct $ = egress + the transfer time at the new zone's spot $/h of that tick
    (second-order effects of the delay on later decisions are not counted).
(b) the DP could start on-demand in any region, the simulator only in the cheapest
    on-demand region (first in name order on a tie); the DP's default is now the
    simulator's region. Measured per start as the bound with the first on-demand launch
    restricted to the simulator's region (``omniscient_bound(..., first_on_demand_region=)``,
    the default) minus the bound with any region (``first_on_demand_region=-1``, the
    bound published before the fix); a start counts when the difference is above 1e-9 $.

Both are reported as % of the cell's mean free bound (``omniscient_mean`` in the rows).
Nothing here changes billing.

    nice -n 10 python benchmarks/fleet_billing_quirks.py --families v100 h100 volatile \
        --starts 100 --out /tmp/quirks.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fleet.market.regions import spec_migration  # noqa: E402
from fleet.policies.base import IDLE, Action, JobSpec, JobState, Observation, Policy  # noqa: E402
from fleet.policies.baselines import builtin_policy_factories  # noqa: E402
from fleet.simulation.engine import region_on_demand_prices, simulate  # noqa: E402
from fleet.simulation.families import FAMILIES, NOTICES, RATIOS  # noqa: E402
from fleet.simulation.market import Market  # noqa: E402
from fleet.simulation.omniscient import omniscient_bound  # noqa: E402

DATA = Path(os.environ.get("SPOTFLEET_SHARED_DATA", ROOT.parent / "shared" / "data"))


class MoveProbe(Policy):
    """Pass-through wrapper: forwards every call to ``inner`` and records, per decision,
    the migration counter and whether a checkpoint existed before the move."""

    def __init__(self, inner: Policy) -> None:
        self.inner = inner
        self.name = inner.name
        self.decisions: list[tuple[int, int, bool]] = []  # (tick, migrations so far, has ckpt)

    def reset(self, spec: JobSpec, obs: Observation) -> None:
        self.decisions = []
        self.inner.reset(spec, obs)

    def decide(self, state: JobState, obs: Observation) -> Action:
        # the engine saves uncommitted work on a voluntary move from a running instance
        saves_on_leave = (state.location != IDLE and state.uncommitted_hours > 0.0
                          and state.overhead_left_hours <= 0.0)
        has_ckpt = state.committed_hours > 0.0 or saves_on_leave
        self.decisions.append((state.tick, state.migrations, has_ckpt))
        return self.inner.decide(state, obs)


def empty_moves(probe: MoveProbe, timeline: list[tuple[int, int]], total_migrations: int,
                sp: np.ndarray, mig_usd: float, mig_h: float) -> tuple[int, float]:
    """(moves billed with no checkpoint, their direct $) of one run.

    ``timeline``: the engine's (tick, location) per decision, in decision order;
    ``sp``: spot $/h per zone and tick; ``mig_usd`` ($) and ``mig_h`` (hours) per move.
    A migration happens only at a spot launch, at the decision that chose it.
    """
    n = 0
    usd = 0.0
    after = [m for _, m, _ in probe.decisions[1:]] + [total_migrations]
    for (tick, before, has_ckpt), nxt, (_, loc) in zip(probe.decisions, after, timeline, strict=True):
        if nxt > before and not has_ckpt:
            n += nxt - before
            usd += (nxt - before) * (mig_usd + mig_h * float(sp[loc, tick]))
    return n, usd


@dataclass
class CellQuirks:
    """Per (family, D/W, notice): the published bound and both quirks ($)."""

    family: str
    ratio: float
    notice: float
    omniscient: np.ndarray
    restricted: np.ndarray  # bound with the first on-demand launch in the simulator's region
    policy_cost: dict[str, float] = field(default_factory=dict)  # mean $ per run
    empty_runs: dict[str, int] = field(default_factory=dict)  # runs with >= 1 empty move
    empty_moves: dict[str, int] = field(default_factory=dict)
    empty_usd: dict[str, float] = field(default_factory=dict)  # total direct $ over runs

    def row(self) -> dict:
        om = float(self.omniscient.mean())
        diff = self.restricted - self.omniscient
        n = self.omniscient.size
        return {
            "family": self.family, "ratio": self.ratio, "notice": self.notice, "starts": n,
            "omniscient_mean": om,
            "b_starts_other_region": int((diff > 1e-9).sum()),
            "b_mean_usd": float(diff.mean()), "b_max_usd": float(diff.max()),
            "b_pct": 100.0 * float(diff.mean()) / om,
            "a": {p: {"runs": self.empty_runs[p], "moves": self.empty_moves[p],
                      "usd_total": self.empty_usd[p],
                      "pct": 100.0 * self.empty_usd[p] / n / om,
                      "policy_mean_cost": self.policy_cost[p]} for p in self.empty_runs},
        }


def _market_info(m: Market, spec: JobSpec) -> tuple[np.ndarray, int, float, float]:
    sp, od_reg = region_on_demand_prices(m, spec)
    mig = spec_migration(spec, m.clouds[0] if m.clouds else "aws")
    multi = len(m.region_names) > 1
    return sp, int(np.argmin(od_reg)), (mig.usd if multi else 0.0), (mig.hours if multi else 0.0)


def run_family(fname: str, starts: int, policies: list[str],
               ratios: tuple[float, ...] = RATIOS) -> list[CellQuirks]:
    """Every (D/W, notice) cell of one family: both quirks for ``policies``."""
    fam = FAMILIES[fname]
    markets = [m for m, _ in fam.load(DATA, starts)]
    per_market = max(1, -(-starts // len(markets)))
    factories = builtin_policy_factories()
    out = []
    for ratio in ratios:
        base = fam.spec(ratio, 0.0)
        plan = [(m, fam.starts(m, base, per_market)) for m in markets]
        t0 = time.perf_counter()
        om, rs = [], []
        for m, ss in plan:
            first_od = _market_info(m, base)[1]
            for s in ss:
                om.append(omniscient_bound(m, base, s, first_on_demand_region=-1).cost)
                rs.append(omniscient_bound(m, base, s, first_on_demand_region=first_od).cost)
        om_a, rs_a = np.array(om), np.array(rs)
        print(f"{fname} D/W={ratio:g}: bounds x{om_a.size} x2 ({time.perf_counter() - t0:.0f} s); "
              f"(b) {int((rs_a - om_a > 1e-9).sum())} starts, "
              f"{100 * (rs_a - om_a).mean() / om_a.mean():.3f} % of cost", flush=True)
        for notice in NOTICES:
            spec = fam.spec(ratio, notice)
            cell = CellQuirks(fname, ratio, notice, om_a, rs_a)
            for pname in policies:
                runs = moves = 0
                usd = cost = 0.0
                for m, ss in plan:
                    sp, _, mig_usd, mig_h = _market_info(m, spec)
                    for s in ss:
                        probe = MoveProbe(factories[pname]())
                        tl: list[tuple[int, int]] = []
                        r = simulate(probe, m, spec, s, timeline=tl)
                        k, d = empty_moves(probe, tl, r.migrations, sp, mig_usd, mig_h)
                        runs += k > 0
                        moves += k
                        usd += d
                        cost += r.cost
                cell.empty_runs[pname] = runs
                cell.empty_moves[pname] = moves
                cell.empty_usd[pname] = usd
                cell.policy_cost[pname] = cost / om_a.size
            row = cell.row()
            worst = max(row["a"].items(), key=lambda kv: kv[1]["pct"])
            print(f"  notice {notice:g} s: (a) worst {worst[0]}: {worst[1]['runs']} runs, "
                  f"{worst[1]['pct']:.3f} % of cost", flush=True)
            out.append(cell)
    return out


def table(rows: list[dict], policies: list[str]) -> str:
    """Markdown: one row per cell; (a) per policy as runs / % of mean bound; (b)."""
    head = ("| family | D/W | notice s | bound $ | (b) starts | (b) % | "
            + " | ".join(f"(a) {p} runs / %" for p in policies) + " |")
    lines = [head, "|" + "---|" * (6 + len(policies))]
    for r in rows:
        a = " | ".join(f"{r['a'][p]['runs']} / {r['a'][p]['pct']:.3f}" for p in policies)
        lines.append(f"| {r['family']} | {r['ratio']:g} | {r['notice']:g} | "
                     f"{r['omniscient_mean']:.2f} | {r['b_starts_other_region']} | "
                     f"{r['b_pct']:.3f} | {a} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--families", nargs="+", default=["v100", "h100", "volatile"])
    ap.add_argument("--starts", type=int, default=100)
    ap.add_argument("--policies", nargs="*", default=None, help="default: every built-in policy")
    ap.add_argument("--ratios", nargs="*", type=float, default=list(RATIOS))
    ap.add_argument("--out", type=Path, default=None, help="write the rows as JSON here")
    args = ap.parse_args()
    policies = args.policies or list(builtin_policy_factories())
    rows = []
    for f in args.families:
        rows += [c.row() for c in run_family(f, args.starts, policies, tuple(args.ratios))]
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    print(table(rows, policies))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
