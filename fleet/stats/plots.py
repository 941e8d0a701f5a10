"""Figures of preemption statistics (matplotlib, Agg backend)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from fleet.figures import bars_with_interval, pyplot, save_figure
from fleet.stats.preemption import ZoneStats


def plot_zone_stats(stats: Sequence[ZoneStats], path: str | Path, title: str = "") -> Path:
    """Three panels: availability, MTTP with its CI, and the hour-of-day preemption rate."""
    plt = pyplot()

    if not stats:
        raise ValueError("no statistics to plot")
    zones = [s.zone for s in stats]
    x = np.arange(len(zones))
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2), gridspec_kw={"width_ratios": [1, 1, 1.6]})
    ax = axes[0]
    ax.bar(x, [s.availability for s in stats], color="C0")
    ax.set_xticks(x, zones, rotation=45, ha="right")
    ax.set_ylim(0, 1)
    ax.set_ylabel("availability (fraction of time)")
    ax = axes[1]
    mttp = np.array([s.mttp_hours if math.isfinite(s.mttp_hours) else np.nan for s in stats])
    lo = np.array([s.mttp_ci[0] for s in stats])
    hi = np.array([s.mttp_ci[1] if math.isfinite(s.mttp_ci[1]) else np.nan for s in stats])
    bars_with_interval(ax, x, mttp, lo, hi, color="C1")
    ax.set_xticks(x, zones, rotation=45, ha="right")
    level = int(100 * stats[0].ci_level)
    ax.set_ylabel(f"MTTP, hours ({level}% CI, exponential)")
    ax = axes[2]
    grid = np.array([s.hour_rate if len(s.hour_rate) == 24 else [0.0] * 24 for s in stats])
    im = ax.imshow(grid, aspect="auto", cmap="magma_r")
    ax.set_yticks(x, zones)
    ax.set_xticks(range(0, 24, 3))
    ax.set_xlabel("hour of day (UTC, tick 0 = 00:00)")
    fig.colorbar(im, ax=ax, label="preemptions per held hour")
    if title:
        fig.suptitle(title)
    return save_figure(fig, path)


def plot_forecasts(forecasts: Sequence, path: str | Path, title: str = "") -> Path:
    """Two panels: P(capacity) for each hour ahead, and the available fraction (p10-p90)."""
    plt = pyplot()

    if not forecasts:
        raise ValueError("no forecasts to plot")
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    ax = axes[0]
    for k, f in enumerate(forecasts):
        hours = np.arange(1, len(f.p_up_hourly) + 1)
        ax.plot(hours, f.p_up_hourly, marker="o", ms=3, color=f"C{k % 10}",
                label=f"{f.zone} ({'up' if f.state_up else 'down'} {f.age_hours:.1f} h)")
    ax.set_ylim(0, 1)
    ax.set_xlabel("hours ahead")
    ax.set_ylabel("P(capacity available)")
    ax.legend(fontsize=8)
    ax = axes[1]
    x = np.arange(len(forecasts))
    mean = np.array([f.availability_mean for f in forecasts])
    lo = np.array([f.availability_p10 for f in forecasts])
    hi = np.array([f.availability_p90 for f in forecasts])
    bars_with_interval(ax, x, mean, lo, hi, interval_label="p10-p90", color="C0", alpha=0.7,
                       label="mean")
    ax.set_xticks(x, [f.zone for f in forecasts], rotation=45, ha="right")
    ax.set_ylim(0, 1)
    ax.set_ylabel(f"available fraction of the next {forecasts[0].horizon_hours:g} h")
    ax.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    return save_figure(fig, path)
