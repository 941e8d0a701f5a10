"""Compare two markets (real traces vs a synthetic market): statistics and a figure."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from fleet.figures import pyplot, save_figure
from fleet.market.traces import Trace
from fleet.stats.preemption import zone_correlation, zone_stats


def compare_markets(real: Sequence[Trace], synthetic: Sequence[Trace]):
    """One row per zone present in both: availability, MTTP, time to regain (hours).

    Returns a ``pandas.DataFrame`` with ``<metric>_real`` / ``<metric>_synth`` columns.
    """
    import pandas as pd

    r = {s.zone: s for s in zone_stats(real)}
    s = {x.zone: x for x in zone_stats(synthetic)}
    rows = []
    for zone in sorted(set(r) & set(s)):
        row = {"zone": zone}
        for name, attr in (("availability", "availability"), ("mttp_h", "mttp_hours"),
                           ("rate_per_h", "rate_per_hour"), ("regain_mean_h", "regain_mean_hours"),
                           ("regain_p50_h", "regain_p50_hours"), ("regain_p90_h", "regain_p90_hours")):
            row[f"{name}_real"] = getattr(r[zone], attr)
            row[f"{name}_synth"] = getattr(s[zone], attr)
        rows.append(row)
    if not rows:
        raise ValueError("the two markets share no zone name; compare markets of the same zones")
    return pd.DataFrame(rows).set_index("zone")


def correlation_summary(traces: Sequence[Trace]) -> dict[str, float]:
    """Mean pairwise correlation of unavailability within and across regions."""
    c = zone_correlation(traces)
    zones = list(c.columns)
    region = {t.zone: t.region for t in traces}
    same, cross = [], []
    for i, a in enumerate(zones):
        for b in zones[i + 1:]:
            v = float(c.loc[a, b])
            if np.isfinite(v):
                (same if region.get(a) == region.get(b) else cross).append(v)
    return {"same_region": float(np.mean(same)) if same else float("nan"),
            "cross_region": float(np.mean(cross)) if cross else float("nan")}


def plot_comparison(real: Sequence[Trace], synthetic: Sequence[Trace], path: str | Path,
                    days: float = 7.0) -> Path:
    """Figure: availability timelines (first ``days``) and per-zone statistics, real vs synthetic."""
    plt = pyplot()

    df = compare_markets(real, synthetic)
    zones = list(df.index)
    fig = plt.figure(figsize=(12, 7.5))
    gs = fig.add_gridspec(2, 2, height_ratios=[1.3, 1])
    for col, (title, traces) in enumerate((("real", real), ("synthetic", synthetic))):
        ax = fig.add_subplot(gs[0, col])
        by_zone = {t.zone: t for t in traces}
        for k, z in enumerate(zones):
            t = by_zone[z]
            n = min(t.n_ticks, int(days * 24 * 3600 / t.gap_seconds))
            hours = np.arange(n) * t.gap_seconds / 3600
            ax.fill_between(hours, k, k + 0.8 * t.up()[:n], step="post", color=f"C{k % 10}", lw=0)
        ax.set_yticks(np.arange(len(zones)) + 0.4, zones)
        ax.set_xlabel("hours")
        ax.set_title(f"{title}: capacity available (first {days:g} days)")
    ax = fig.add_subplot(gs[1, 0])
    x = np.arange(len(zones))
    ax.bar(x - 0.2, df["availability_real"], 0.4, label="real")
    ax.bar(x + 0.2, df["availability_synth"], 0.4, label="synthetic")
    ax.set_xticks(x, zones, rotation=45, ha="right")
    ax.set_ylabel("availability")
    ax.legend()
    ax = fig.add_subplot(gs[1, 1])
    ax.bar(x - 0.2, df["mttp_h_real"], 0.4, label="real")
    ax.bar(x + 0.2, df["mttp_h_synth"], 0.4, label="synthetic")
    ax.set_xticks(x, zones, rotation=45, ha="right")
    ax.set_ylabel("MTTP (hours)")
    ax.legend()
    return save_figure(fig, path)
