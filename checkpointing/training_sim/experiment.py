"""Average simulated runs over seeds and lay them out like the thesis's Tables 6.2/6.3."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from checkpointing.training_sim.config import PolicySpec, SimConfig
from checkpointing.training_sim.engine import RunBreakdown, simulate_run

__all__ = ["PolicyResult", "format_duration", "format_table", "run_policies"]

_FIELDS = (
    "compute_seconds",
    "recompute_seconds",
    "save_seconds",
    "alloc_seconds",
    "prep_seconds",
    "total_seconds",
    "cost_dollars",
    "preemptions",
    "saves",
    "emergency_saves",
    "failed_emergency_saves",
)


@dataclass(frozen=True)
class PolicyResult:
    """Mean over seeds of one policy's runs (seconds, $, counts)."""

    policy: PolicySpec
    compute_seconds: float
    recompute_seconds: float
    save_seconds: float
    alloc_seconds: float
    prep_seconds: float
    total_seconds: float
    cost_dollars: float
    preemptions: float
    saves: float
    emergency_saves: float
    failed_emergency_saves: float
    total_stdev_seconds: float
    runs: int
    overhead_vs_on_demand: float | None = None
    """total / on-demand total - 1 (a fraction), when an on-demand row is in the table."""

    @property
    def name(self) -> str:
        return self.policy.name

    def share(self, field: str) -> float:
        """A breakdown row as a fraction of this policy's total latency."""
        return getattr(self, field) / self.total_seconds


def _mean(runs: Sequence[RunBreakdown], policy: PolicySpec) -> PolicyResult:
    values = {f: statistics.fmean(getattr(r, f) for r in runs) for f in _FIELDS}
    sd = statistics.stdev([r.total_seconds for r in runs]) if len(runs) > 1 else 0.0
    return PolicyResult(policy=policy, total_stdev_seconds=sd, runs=len(runs), **values)


def run_policies(
    config: SimConfig,
    policies: Sequence[PolicySpec],
    *,
    mttp_seconds: float | None,
    seeds: Sequence[int],
    progress: Callable[[str], None] | None = None,
) -> list[PolicyResult]:
    """Simulate each policy over the same seeds (common random numbers) and average.

    ``overhead_vs_on_demand`` is filled in when one of the policies is ``on-demand``.
    """
    if not seeds:
        raise ValueError("seeds is empty; give at least one seed")
    results = []
    for i, policy in enumerate(policies, 1):
        runs = [simulate_run(config, policy, mttp_seconds=mttp_seconds, seed=s) for s in seeds]
        results.append(_mean(runs, policy))
        if progress:
            progress(f"[{i}/{len(policies)}] {policy.name}: {len(seeds)} runs")
    base = next((r for r in results if r.policy.kind == "on-demand"), None)
    if base is None:
        return results
    out = []
    for r in results:
        ovh = r.total_seconds / base.total_seconds - 1.0
        out.append(PolicyResult(**{**r.__dict__, "overhead_vs_on_demand": ovh}))
    return out


def format_duration(seconds: float) -> str:
    """``5d, 7:46:48`` like the thesis tables (rounded to the second)."""
    s = int(round(seconds))
    days, s = divmod(s, 86_400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    hms = f"{h}:{m:02d}:{s:02d}"
    return f"{days}d, {hms}" if days else hms


def format_table(results: Sequence[PolicyResult], title: str = "") -> str:
    """Thesis-style table: rows = breakdown, columns = policies."""
    rows = [
        ("Comp.", "compute_seconds"),
        ("Recomp.", "recompute_seconds"),
        ("Save", "save_seconds"),
        ("Alloc.", "alloc_seconds"),
        ("Prep.", "prep_seconds"),
    ]
    width = max(24, *(len(r.name) + 2 for r in results))
    lines = []
    if title:
        lines.append(title)
    lines.append(f"{'':<10}" + "".join(f"{r.name:>{width}}" for r in results))
    for label, field in rows:
        cells = "".join(
            f"{format_duration(getattr(r, field)) + f' ({r.share(field) * 100:.2f}%)':>{width}}"
            for r in results
        )
        lines.append(f"{label:<10}{cells}")
    lines.append(
        f"{'Total':<10}" + "".join(f"{format_duration(r.total_seconds):>{width}}" for r in results)
    )
    lines.append(f"{'Cost ($)':<10}" + "".join(f"{r.cost_dollars:>{width}.1f}" for r in results))
    if any(r.overhead_vs_on_demand is not None for r in results):
        lines.append(
            f"{'Overhead':<10}"
            + "".join(
                f"{'' if r.overhead_vs_on_demand is None else f'{r.overhead_vs_on_demand * 100:+.2f}%':>{width}}"
                for r in results
            )
        )
    lines.append(f"{'Preempt.':<10}" + "".join(f"{r.preemptions:>{width}.1f}" for r in results))
    if any(r.emergency_saves for r in results):
        lines.append(
            f"{'Emerg.':<10}"
            + "".join(
                f"{f'{r.emergency_saves:.1f} ({r.failed_emergency_saves:.1f} failed)':>{width}}"
                for r in results
            )
        )
    return "\n".join(lines)
