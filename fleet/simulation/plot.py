"""Plots of a policy sweep: cost distribution per policy and cost vs deadline-met rate."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from fleet.figures import pyplot, save_figure
from fleet.simulation.sweep import OMNISCIENT, SweepResult, summarize


def _cost_xlim(data: Sequence[Sequence[float]]) -> tuple[float, float]:
    """x range of a sweep panel: 0.25-1.05 (cost / on-demand) widened to every value, so a
    market far cheaper than on-demand (GCP H100 spot: 0.18) or a policy dearer than it
    stays on the plot."""
    vals = [v for row in data for v in row if math.isfinite(v)]
    lo, hi = min(vals, default=0.25), max(vals, default=1.05)
    return min(0.25, lo - 0.03), max(1.05, hi + 0.03)


def plot_sweeps(sweeps: Sequence[tuple[str, SweepResult]], path: str | Path,
                ncols: int = 2) -> Path:
    """One panel per sweep (title, result): the distribution of cost / on-demand-only cost
    per policy over the start times (box: quartiles, whiskers: p5-p95, triangle: mean),
    each policy labelled with its deadline-met rate."""
    plt = pyplot()

    n = len(sweeps)
    ncols = max(1, min(ncols, n))
    nrows = (n + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.4 * ncols, 3.3 * nrows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    for i, (title, res) in enumerate(sweeps):
        row_i, col = divmod(i, ncols)
        od = getattr(res, "on_demand_cost", 0.0) or res.spec.on_demand_cost
        met = {r.policy: r.deadline_met_rate for r in summarize(res)}
        names = list(res.runs)
        data = [[r.cost / od for r in res.runs[k]] for k in names]
        if res.omniscient:
            names.append(OMNISCIENT)
            data.append([c / od for c in res.omniscient])
        labels = [f"{k} ({met[k]:.0%})" for k in names]
        ax = axes[row_i][col]
        ax.boxplot(data, orientation="horizontal", whis=(5, 95), showmeans=True, flierprops={"markersize": 2})
        ax.set_yticks(range(1, len(names) + 1), labels, fontsize=8)
        ax.set_xlabel("cost / on-demand-only cost (deadlines met)")
        ax.set_title(title, fontsize=10)
        ax.set_xlim(*_cost_xlim(data))
        ax.grid(axis="x", alpha=0.3)
    return save_figure(fig, path, dpi=110)


def _families_ylim_top(curves: dict[str, list[float]]) -> float:
    """Top of a :func:`plot_families` panel: 1.6, raised (up to 4) so that spotfleet's curve
    and, at every D/W, the cheapest other policy's stay in view (a market where every
    policy pays 2-3x the bound showed an empty panel at a fixed 1.6)."""
    keep = list(curves.get("spotfleet", []))
    others = [ys for k, ys in curves.items() if k not in ("spotfleet", "on_demand")]
    if others:
        keep += [min(col) for col in zip(*others, strict=True)]
    return min(4.0, max(1.6, 1.05 * max(keep, default=1.0)))


def plot_families(cells, path: str | Path) -> Path:
    """One panel per (family, notice): mean cost / omniscient against D/W for every policy
    (on-demand dashed grey; the scale follows spotfleet and the cheapest policy, so a far
    dearer one may leave the panel)."""
    plt = pyplot()

    keys = list(dict.fromkeys((c.family, c.notice) for c in cells))
    ncols = 2
    nrows = (len(keys) + 1) // 2
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.6 * ncols, 3.4 * nrows), squeeze=False)
    for ax in axes.flat[len(keys):]:
        ax.set_visible(False)
    for i, (fam, notice) in enumerate(keys):
        ax = axes.flat[i]
        cs = sorted((c for c in cells if c.family == fam and c.notice == notice), key=lambda c: c.ratio)
        curves = {name: [c.costs[name].mean() / c.omniscient.mean() for c in cs] for name in cs[0].costs}
        for name, ys in curves.items():
            if name == "on_demand":
                ax.plot([c.ratio for c in cs], ys, ls="--", lw=0.8, color="0.5", label=name)
                continue
            ax.plot([c.ratio for c in cs], ys, marker="o", ms=3,
                    lw=2.2 if name == "spotfleet" else 1.0, label=name)
        ax.set_xscale("log")
        ax.set_xticks([c.ratio for c in cs], [f"{c.ratio:g}" for c in cs])
        ax.set_ylim(0.98, _families_ylim_top(curves))
        ax.set_xlabel("deadline / work (D/W)")
        ax.set_ylabel("mean cost / omniscient")
        ax.set_title(f"{fam}, notice {notice:g} s", fontsize=10)
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=7, ncol=2)
    return save_figure(fig, path, dpi=110)
