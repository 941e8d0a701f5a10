"""Figures of preemption statistics (matplotlib, Agg backend)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from fleet.stats.preemption import ZoneStats


def plot_zone_stats(stats: Sequence[ZoneStats], path: str | Path, title: str = "") -> Path:
    """Three panels: availability, MTTP with its CI, and the hour-of-day preemption rate."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
    ax.bar(x, mttp, color="C1")
    ax.errorbar(x, mttp, yerr=[np.maximum(mttp - lo, 0), np.maximum(hi - mttp, 0)], fmt="none",
                ecolor="k", capsize=3)
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
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out
