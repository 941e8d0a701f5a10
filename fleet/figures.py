"""Small matplotlib helpers shared by the fleet's figures (Agg backend, no display)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend (files only; works without a display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: str | Path, dpi: int = 90) -> Path:
    """Lay out ``fig``, write it to ``path`` (parent folders created), close it; the path."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=dpi)
    plt.close(fig)
    return out


def bars_with_interval(ax: Any, x, value, lo, hi, *, interval_label: str | None = None,
                       **bar_kw: Any) -> None:
    """Bars of ``value`` with black error bars from ``lo`` to ``hi`` (never below zero length)."""
    value, lo, hi = (np.asarray(a, dtype=float) for a in (value, lo, hi))
    ax.bar(x, value, **bar_kw)
    ax.errorbar(x, value, yerr=[np.maximum(value - lo, 0), np.maximum(hi - value, 0)], fmt="none",
                ecolor="k", capsize=3, label=interval_label)
