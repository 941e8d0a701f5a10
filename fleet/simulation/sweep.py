"""Run fleet policies over many start times and summarise them against the bounds."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from fleet.policies.base import JobSpec, Policy
from fleet.simulation.engine import RunResult, horizon_ticks, simulate
from fleet.simulation.market import Market
from fleet.simulation.omniscient import omniscient_bound

OMNISCIENT = "omniscient"


def policy_registry() -> dict[str, Callable[[], Policy]]:
    """Name -> factory of every online policy, in table order (fleet/policies/registry.py:
    the same registry the pipeline YAML and the live providers resolve names through)."""
    from fleet.policies.registry import policy_factories

    return policy_factories()


def make_policies(names: Sequence[str] | None = None) -> list[Policy]:
    """Instantiate policies by name (``None`` = all); unknown names raise a clear error."""
    reg = policy_registry()
    names = list(reg) if not names else list(names)
    unknown = [n for n in names if n not in reg]
    if unknown:
        raise ValueError(f"unknown policies {unknown}; choose from {list(reg)}")
    from fleet.policies.registry import get_policy

    return [get_policy(n) for n in names]


def start_ticks(market: Market, spec: JobSpec, n: int, warmup_hours: float = 168.0,
                offset: float = 0.0) -> list[int]:
    """``n`` start ticks evenly spaced after ``warmup_hours`` of history.

    ``offset`` in [0, 1) shifts every start by that fraction of the spacing (0.5 gives a
    disjoint set, used for tuning). Raises when the traces are too short.
    """
    g = market.gap_hours
    first = int(math.ceil(warmup_hours / g))
    last = market.n_ticks - horizon_ticks(spec, g) - 1
    if n <= 0:
        raise ValueError(f"starts must be >= 1, got {n}")
    if last <= first:
        need = horizon_ticks(spec, g) * g
        fits = math.floor((market.n_ticks - horizon_ticks(spec, g) - 2) * g)
        fix = (f"at most {fits:g} h of history fits (--warmup-hours {fits:g} or less; less "
               "leaves room for more distinct starts)" if fits > 0
               else "shorten the deadline or the work")
        raise ValueError(
            f"traces too short: {_hours(market.duration_hours)} h cannot hold "
            f"{_hours(warmup_hours)} h of history plus a {_hours(spec.deadline_hours)} h job "
            f"(each start needs {_hours(need)} h of trace: deadline + work + 1 h); {fix}")
    span = last - first
    step = span / n
    return [int(first + (k + offset) * step) for k in range(n)]


def _hours(h: float) -> str:
    """Hours for a message: whole hours as they are, else one decimal (``5.6``, not the
    ``6`` that made "6 h cannot hold ... (each start needs 6 h ...)" read as a contradiction
    on a 5.6 h folder)."""
    return f"{h:.0f}" if abs(h - round(h)) < 0.05 else f"{h:.1f}"


@dataclass
class SweepResult:
    """Every run of every policy, plus the omniscient bound per start."""

    spec: JobSpec
    starts: list[int]
    runs: dict[str, list[RunResult]] = field(default_factory=dict)
    omniscient: list[float] = field(default_factory=list)
    wall_seconds: float = 0.0
    on_demand_cost: float = 0.0  # $ of the job on the cheapest on-demand region (0: spec's)


@dataclass(frozen=True)
class PolicySummary:
    """Means over the starts ($, hours)."""

    policy: str
    mean_cost: float
    cost_vs_on_demand: float
    cost_vs_omniscient: float
    deadline_met_rate: float
    mean_completion_hours: float
    mean_preemptions: float
    mean_wasted_hours: float
    p90_cost: float


def run_sweep(market: Market, spec: JobSpec, policies: Sequence[Policy], starts: Sequence[int],
              with_omniscient: bool = True,
              progress: Callable[[str], None] | None = None,
              observe: str = "probe") -> SweepResult:
    """Simulate every policy at every start; ``progress`` receives one line per policy.
    ``observe``: ``"probe"`` (zones known only when held or tried) or ``"oracle"``."""
    t0 = time.perf_counter()
    res = SweepResult(spec=spec, starts=list(starts))
    if market.on_demand_price is not None or market.nodes != 1:
        od = market.prices_for(spec.spot_price, spec.on_demand_price)[1]  # the job's $/h
        res.on_demand_cost = float(od.min()) * (spec.work_hours + spec.restart_hours)
    n_starts = f"{len(starts)} start{'' if len(starts) == 1 else 's'}"  # not "1 starts"
    if with_omniscient:
        tp = time.perf_counter()
        res.omniscient = _each(lambda s: omniscient_bound(market, spec, s).cost, starts,
                               OMNISCIENT, progress)
        if progress:
            progress(f"  {OMNISCIENT:<24} {n_starts}  mean ${np.mean(res.omniscient):8.2f}"
                     f"  ({time.perf_counter() - tp:.1f} s)")
    for pol in policies:
        tp = time.perf_counter()
        runs = _each(lambda s, pol=pol: simulate(pol, market, spec, s, observe=observe), starts,
                     pol.name, progress)
        res.runs[pol.name] = runs
        if progress:
            met = np.mean([r.deadline_met for r in runs])
            progress(f"  {pol.name:<24} {n_starts}  mean ${np.mean([r.cost for r in runs]):8.2f}"
                     f"  deadlines met {met:6.1%}  ({time.perf_counter() - tp:.1f} s)")
    res.wall_seconds = time.perf_counter() - t0
    return res


def _each(fn: Callable[[int], object], starts: Sequence[int], name: str,
          progress: Callable[[str], None] | None, every_s: float = 10.0) -> list:
    """``[fn(s) for s in starts]``, telling ``progress`` how far it got every ``every_s``
    seconds of wall time (long phases: the omniscient DP on 100 starts takes minutes)."""
    out = []
    t0 = last = time.perf_counter()
    for k, s in enumerate(starts, 1):
        out.append(fn(s))
        now = time.perf_counter()
        if progress and now - last >= every_s and k < len(starts):
            progress(f"  {name:<24} {k}/{len(starts)} starts ...  ({now - t0:.0f} s)")
            last = now
    return out


def summarize(res: SweepResult) -> list[PolicySummary]:
    """One row per policy (and the omniscient bound, when computed). ``cost_vs_omniscient``
    is the mean cost over the starts / the mean bound (the ratio of means, as every table of
    docs/fleet-policies.md and SkyNomad's figures; a mean of per-start ratios weighs cheap
    starts as much as dear ones and gives other numbers)."""
    od = res.on_demand_cost or res.spec.on_demand_cost
    omni = np.asarray(res.omniscient, dtype=float)
    rows = []
    for name, runs in res.runs.items():
        cost = np.array([r.cost for r in runs])
        comp = np.array([r.completion_hours for r in runs])
        rows.append(PolicySummary(
            policy=name, mean_cost=float(cost.mean()), cost_vs_on_demand=float(cost.mean() / od),
            cost_vs_omniscient=float(cost.mean() / omni.mean()) if omni.size else math.nan,
            deadline_met_rate=float(np.mean([r.deadline_met for r in runs])),
            mean_completion_hours=float(comp.mean()),
            mean_preemptions=float(np.mean([r.preemptions for r in runs])),
            mean_wasted_hours=float(np.mean([r.lost_work_hours for r in runs])),
            p90_cost=float(np.quantile(cost, 0.9))))
    if omni.size:
        rows.append(PolicySummary(
            policy=OMNISCIENT, mean_cost=float(omni.mean()), cost_vs_on_demand=float(omni.mean() / od),
            cost_vs_omniscient=1.0, deadline_met_rate=1.0, mean_completion_hours=math.nan,
            mean_preemptions=math.nan, mean_wasted_hours=0.0,
            p90_cost=float(np.quantile(omni, 0.9))))
    return rows


def format_table(rows: Sequence[PolicySummary], markdown: bool = True) -> str:
    """The summary as a Markdown (or plain) table."""
    head = ["policy", "mean $", "p90 $", "$/on-demand", "$/omniscient", "deadlines met",
            "completion h", "preemptions", "wasted work h"]
    lines = []
    for r in rows:
        lines.append([r.policy, f"{r.mean_cost:.2f}", f"{r.p90_cost:.2f}", f"{r.cost_vs_on_demand:.3f}",
                      "-" if math.isnan(r.cost_vs_omniscient) else f"{r.cost_vs_omniscient:.3f}",
                      f"{r.deadline_met_rate:.0%}",
                      "-" if math.isnan(r.mean_completion_hours) else f"{r.mean_completion_hours:.1f}",
                      "-" if math.isnan(r.mean_preemptions) else f"{r.mean_preemptions:.2f}",
                      f"{r.mean_wasted_hours:.2f}"])
    if markdown:
        out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        out += ["| " + " | ".join(row) + " |" for row in lines]
        return "\n".join(out)
    widths = [max(len(h), *(len(row[i]) for row in lines)) for i, h in enumerate(head)]
    fmt = "  ".join(f"{{:>{w}}}" if i else f"{{:<{w}}}" for i, w in enumerate(widths))
    return "\n".join([fmt.format(*head)] + [fmt.format(*row) for row in lines])


def speed_report(sim_hours: float, cpu_seconds: float, wall_seconds: float, note: str = "") -> str:
    """The benchmarks' speed lines: simulated job-hours per CPU second, and the same as a
    ratio against the physical clock (simulated job-seconds per CPU second, per core);
    ``note`` is added inside the first line's parentheses."""
    cpu = max(cpu_seconds, 1e-9)
    extra = f"; {note}" if note else ""
    return (f"simulated job-hours: {sim_hours:,.0f} in {cpu_seconds:.1f} s CPU = {sim_hours / cpu:,.0f} "
            f"job-hours/s (wall {wall_seconds:.1f} s{extra})\n"
            f"speed-up over real time: {sim_hours * 3600 / cpu:,.0f}x per CPU core "
            "(simulated job-seconds per CPU second)")
