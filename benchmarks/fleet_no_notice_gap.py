"""Where spotfleet's no-notice excess over the omniscient bound goes, and what no online
policy can avoid (docs/fleet-policies-tuning-log.md, *The no-notice gap, measured*).

1. Decomposition: spotfleet on v100 / h100 at D/W 1.2-3, 100 starts (the sweep's), with
   and without a 120 s notice, probed and oracle; every billed $ is put in one bucket
   (useful compute on spot / on-demand, periodic saves, work lost at preemptions or
   emergency saves, restarts, transfer + egress, voluntary-move saves). The accounting is
   a copy of ``fleet.simulation.engine.simulate`` patched at run time to add the
   buckets; it asserts that the buckets sum to ``RunResult.cost`` for every run and that
   the copy's costs equal ``simulate``'s.
2. Floor: per zone the excess of the Bayes-optimal no-notice checkpoint schedule over the
   notice's (:mod:`fleet.simulation.no_notice_floor`, the zone's run lengths over the
   whole window), then the exact omniscient DP with every zone's spot price raised by
   that excess: a "no-notice oracle" (knows availability and prices, pays per useful
   spot hour at least the waste an optimal no-notice schedule has in that zone).
3. ``--bayes-experiment``: what pre-job knowledge buys. spotfleet v5 with its no-notice
   interval replaced, at every tick, by the Bayes-optimal schedule for each zone's run
   lengths in the history **before** the job (the floor's method with the future
   removed), on the v4 tuning set (first halves, interleaved starts, 40 per cell). An
   experiment, not a policy candidate (a DP per zone and job, a decision every tick).

    PYTHONPATH=$PWD nice -n 10 python benchmarks/fleet_no_notice_gap.py [--starts 100] [--bayes-experiment]
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
import time
import types
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fleet.policies.base import IDLE  # noqa: E402
from fleet.policies.baselines import builtin_policy_factories  # noqa: E402
from fleet.policies.spotfleet import SpotfleetPolicy  # noqa: E402
from fleet.simulation import engine  # noqa: E402
from fleet.simulation.families import FAMILIES, bootstrap_ratio, spread_starts  # noqa: E402
from fleet.simulation.no_notice_floor import schedule, zone_excess  # noqa: E402
from fleet.simulation.omniscient import omniscient_bound  # noqa: E402

DATA = Path(os.environ.get("SPOTFLEET_SHARED_DATA", ROOT.parent / "shared" / "data"))
BUCKETS = ("useful_spot", "useful_od", "ckpt", "move_save", "lost", "restart", "transfer", "egress")

_PATCHES = [
    ("    spot_cost = od_cost = mig_cost = 0.0\n",
     "    spot_cost = od_cost = mig_cost = 0.0\n"
     "    acct = dict.fromkeys(BUCKETS, 0.0)\n    ucost = 0.0\n    ov_m = 0.0\n"
     "    def price(l, i):\n        return od_reg[cur_reg] if l == ON_DEMAND else sp[l, i]\n"
     "    def commit_u():\n        nonlocal ucost\n"
     "        acct['useful_od' if loc == ON_DEMAND else 'useful_spot'] += ucost\n        ucost = 0.0\n"),
    ("                committed += saved\n                lost += u - saved\n",
     "                committed += saved\n                lost += u - saved\n"
     "                acct['lost'] += ucost * (u - saved) / u\n"
     "                acct['useful_spot'] += ucost * saved / u\n                ucost = 0.0\n"),
    ("            else:\n                lost += u\n",
     "            else:\n                lost += u\n                acct['lost'] += ucost\n                ucost = 0.0\n"),
    ("                    ckpt_h += C\n                    committed += u\n                    u = 0.0\n",
     "                    ckpt_h += C\n                    acct['move_save'] += C * price(loc, i)\n"
     "                    commit_u()\n                    committed += u\n                    u = 0.0\n"),
    ("                        mig_cost += mig_usd\n                        ov += mig_h\n",
     "                        mig_cost += mig_usd\n                        acct['egress'] += mig_usd\n"
     "                        ov += mig_h\n                        ov_m = mig_h\n"),
    ("                    ov = r\n", "                    ov = r\n                    ov_m = 0.0\n"),
    ("            restart_h += a\n",
     "            restart_h += a\n            mm = min(a, ov_m)\n            ov_m -= mm\n"
     "            acct['transfer'] += mm * price(loc, i)\n"
     "            acct['restart'] += (a - mm) * price(loc, i)\n"),
    ("                ckpt_h += s\n                if ck_left <= _EPS:\n                    ck_left = 0.0\n",
     "                ckpt_h += s\n                acct['ckpt'] += s * price(loc, i)\n"
     "                if ck_left <= _EPS:\n                    ck_left = 0.0\n                    commit_u()\n"),
    ("            u += s\n            t -= s\n",
     "            u += s\n            ucost += s * price(loc, i)\n            t -= s\n"),
    ("            elif u >= T - _EPS:\n                committed += u\n",
     "            elif u >= T - _EPS:\n                commit_u()\n                committed += u\n"),
    ("    cost = spot_cost + od_cost + mig_cost\n",
     "    if completion < math.inf:\n        commit_u()\n"
     "    cost = spot_cost + od_cost + mig_cost\n    ACCT.append(acct)\n"),
]


def accounting_engine() -> types.ModuleType:
    """``engine`` with per-bucket $ accounting (``mod.ACCT``: one dict per run)."""
    src = Path(engine.__file__).read_text(encoding="utf-8")
    for old, new in _PATCHES:
        if src.count(old) != 1:
            raise RuntimeError(f"engine changed; accounting patch does not apply: {old!r}")
        src = src.replace(old, new)
    mod = types.ModuleType("engine_accounting")
    mod.__dict__.update(BUCKETS=BUCKETS, ACCT=[], __name__="engine_accounting")
    sys.modules["engine_accounting"] = mod
    exec(compile(src, "engine_accounting", "exec"), mod.__dict__)  # noqa: S102
    return mod


def decomposition(starts: int, ratios: list[float]) -> list[str]:
    acc_engine = accounting_engine()
    pol = builtin_policy_factories()["spotfleet"]
    lines = ["| family | D/W | notice s | spotfleet / omniscient | periodic saves | lost work (no notice) / "
             "emergency saves | restarts | migration (egress + transfer) | on-demand premium | "
             "probing (probed - oracle) | preemptions / job | saves / job |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for fname in ("v100", "h100"):
        fam = FAMILIES[fname]
        (m, _), = fam.load(DATA, starts)
        for ratio in ratios:
            base = fam.spec(ratio, 0.0)
            ss = fam.starts(m, base, starts)
            om = np.array([omniscient_bound(m, base, s).cost for s in ss]).mean()
            for notice in (0.0, 120.0):
                spec = fam.spec(ratio, notice)
                tot = {}
                for obs in ("oracle", "probe"):
                    acc_engine.ACCT.clear()
                    runs = [acc_engine.simulate(pol(), m, spec, s, observe=obs) for s in ss]
                    ref = [engine.simulate(pol(), m, spec, s, observe=obs).cost for s in ss[:5]]
                    assert np.allclose(ref, [r.cost for r in runs[:5]]), "accounting copy diverges"
                    a = {k: np.array([x[k] for x in acc_engine.ACCT]) for k in BUCKETS}
                    cost = np.array([r.cost for r in runs])
                    assert np.allclose(sum(a.values()), cost, atol=1e-6), "buckets do not sum to cost"
                    tot[obs] = cost.mean()
                prem = []
                for i, r in enumerate(runs):
                    od_p = r.on_demand_cost / r.on_demand_hours if r.on_demand_hours > 0 else 0.0
                    sp_useful_h = r.spot_hours - r.checkpoint_hours - r.lost_work_hours - r.restart_hours
                    sp_p = a["useful_spot"][i] / sp_useful_h if sp_useful_h > 0.01 else 0.0
                    prem.append(a["useful_od"][i] - (a["useful_od"][i] / od_p if od_p else 0.0) * sp_p)

                def pct(x, om=om):
                    return f"{100 * np.mean(x) / om:.1f} %"

                lines.append(
                    f"| {fname} | {ratio:g} | {notice:g} | {tot['probe'] / om:.3f} | {pct(a['ckpt'])} | "
                    f"{pct(a['lost'])} | {pct(a['restart'])} | {pct(a['egress'] + a['transfer'])} | "
                    f"{pct(prem)} | {100 * (tot['probe'] - tot['oracle']) / om:.1f} % | "
                    f"{np.mean([r.preemptions for r in runs]):.2f} | "
                    f"{np.mean([r.checkpoint_hours for r in runs]) / spec.checkpoint_hours:.1f} |")
                print(lines[-1], flush=True)
    return lines


def floor(starts: int, ratios: list[float]) -> list[str]:
    zl = ["| family | zone | availability | MTTP h (window) | Young/Daly sqrt(2C/M) | excess, launch at run start | excess, launch at a random up tick |",
          "|---|---|---|---|---|---|---|"]
    fl = ["| family | D/W | no-notice oracle / omniscient, best of fresh and random-tick launches | the same, random-tick launches only |",
          "|---|---|---|---|"]
    for fname in ("v100", "h100"):
        fam = FAMILIES[fname]
        (m, _), = fam.load(DATA, starts)
        spec = fam.spec(1.5, 0.0)
        ex = {res: zone_excess(m.available, m.gap_seconds, fam.work_hours, spec.checkpoint_hours,
                               spec.restart_hours, residual=res) for res in (False, True)}
        for z in range(m.n_zones):
            av = m.available[z]
            mttp = av.sum() * m.gap_hours / max(1, int(np.count_nonzero(av[:-1] & ~av[1:])))
            zl.append(f"| {fname} | {m.zones[z]} | {av.mean():.2f} | {mttp:.1f} | "
                      f"{np.sqrt(2 * spec.checkpoint_hours / mttp):.3f} | {ex[False][z]:.3f} | {ex[True][z]:.3f} |")
        sp, od = m.prices_for(fam.spot_price, fam.on_demand_price)
        markets = {k: dataclasses.replace(m, spot_price=sp * (1.0 + f)[:, None], on_demand_price=od)
                   for k, f in (("min", np.minimum(ex[False], ex[True])), ("residual", ex[True]))}
        for ratio in ratios:
            base = fam.spec(ratio, 0.0)
            ss = fam.starts(m, base, starts)
            om = np.array([omniscient_bound(m, base, s).cost for s in ss]).mean()
            r = {k: np.array([omniscient_bound(mk, base, s).cost for s in ss]).mean() / om
                 for k, mk in markets.items()}
            fl.append(f"| {fname} | {ratio:g} | {r['min']:.3f} | {r['residual']:.3f} |")
            print(fl[-1], flush=True)
    return zl + [""] + fl


class BayesScheduleSpotfleet(SpotfleetPolicy):
    """spotfleet v5 whose no-notice interval follows the Bayes-optimal schedule for the
    target zone's run lengths before the job (launches at random up ticks; a run still
    going when the history ends counts as ended there)."""

    name = "spotfleet"

    def reset(self, spec, obs):
        super().reset(spec, obs)
        n = max(2, int(self.p.lookback_hours / obs.gap_hours))
        self._hist = np.asarray(obs.history[:, : obs.tick][:, -n:], dtype=bool)
        self._tab: dict[int, np.ndarray | None] = {}
        self._launch = None
        self._loc = IDLE

    def _table(self, z, spec):
        if z not in self._tab:
            g = self._gap * 60.0
            zz = np.concatenate([[False], self._hist[z], [False]])
            st, en = np.flatnonzero(~zz[:-1] & zz[1:]), np.flatnonzero(zz[:-1] & ~zz[1:])
            xs = [int(math.floor(j * g - spec.restart_hours * 60)) for s, e in zip(st, en, strict=True)
                  for j in range(1, int(e - s) + 1)]
            xs = np.array([x for x in xs if x >= 1], dtype=np.int64)
            self._tab[z] = (schedule(xs, int(round(spec.work_hours * 60)), 1,
                                     int(round(spec.restart_hours * 60))) if xs.size >= 3 else None)
        return self._tab[z]

    def decide(self, state, obs):
        act = super().decide(state, obs)
        spec = state.spec
        if spec.notice_saves:
            return act
        if state.location != self._loc:
            self._loc = state.location
            self._launch = state.elapsed_hours if state.location >= 0 else None
        if act.target < 0 or act.checkpoint_interval_hours is None:
            return act
        tab = self._table(act.target, spec)
        if tab is None:
            return act
        work = tab.shape[0] - 1
        w = min(int(round(state.committed_hours * 60)), work - 1)
        a = 0
        if act.target == state.location and self._launch is not None:
            age = (state.elapsed_hours - self._launch - spec.restart_hours) * 60
            a = min(int(max(0, round(age - state.uncommitted_hours * 60))), tab.shape[1] - 1)
        t = int(tab[w, a])
        interval = 1e6 if w + t >= work else max(t / 60.0, 2 * spec.checkpoint_hours)
        return dataclasses.replace(act, checkpoint_interval_hours=interval, recheck_tick=obs.tick + 1)


def bayes_experiment(ratios: list[float]) -> list[str]:
    lines = ["| family | D/W | v5 / omniscient | Bayes schedule from the history / omniscient | "
             "ratio [95 % CI] | saves per job v5 -> Bayes | lost work min per job | on-demand h per job |",
             "|---|---|---|---|---|---|---|---|"]
    for fname in ("h100", "v100"):
        fam = FAMILIES[fname]
        (m, _), = fam.load(DATA, 40)
        for ratio in ratios:
            base = fam.spec(ratio, 0.0)
            ss = spread_starts(m, base, 80, fam.warmup_hours, offset=0.5)[:40]
            om = np.array([omniscient_bound(m, base, s).cost for s in ss]).mean()
            r5 = [engine.simulate(SpotfleetPolicy(), m, base, s) for s in ss]
            rb = [engine.simulate(BayesScheduleSpotfleet(), m, base, s) for s in ss]
            c5, cb = np.array([r.cost for r in r5]), np.array([r.cost for r in rb])
            r, lo, hi = bootstrap_ratio(cb, c5)

            def per_job(runs, attr, scale):
                return np.mean([getattr(x, attr) for x in runs]) * scale

            lines.append(
                f"| {fname} | {ratio:g} | {c5.mean() / om:.3f} | {cb.mean() / om:.3f} | {r:.3f} [{lo:.3f}, {hi:.3f}] | "
                f"{per_job(r5, 'checkpoint_hours', 60):.1f} -> {per_job(rb, 'checkpoint_hours', 60):.1f} | "
                f"{per_job(r5, 'lost_work_hours', 60):.1f} -> {per_job(rb, 'lost_work_hours', 60):.1f} | "
                f"{per_job(r5, 'on_demand_hours', 1):.2f} -> {per_job(rb, 'on_demand_hours', 1):.2f} |")
            assert all(x.deadline_met for x in rb), "a deadline was missed"
            print(lines[-1], flush=True)
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--starts", type=int, default=100)
    ap.add_argument("--ratios", default="1.2,1.5,2,3")
    ap.add_argument("--bayes-experiment", action="store_true",
                    help="only the pre-job Bayes-schedule experiment (tuning set, no notice)")
    args = ap.parse_args()
    if not DATA.is_dir():
        print(f"skip: {DATA} not found (set SPOTFLEET_SHARED_DATA)")
        return 0
    ratios = [float(x) for x in args.ratios.split(",")]
    print(f"load average at start: {os.getloadavg()}", flush=True)
    t0 = time.perf_counter()
    if args.bayes_experiment:
        out = bayes_experiment(ratios)
    else:
        out = decomposition(args.starts, ratios) + [""] + floor(args.starts, ratios)
    print("\n".join(out))
    print(f"\n{time.perf_counter() - t0:.1f} s wall; load average at end: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
