"""Weighted node eviction rate (GFS Eq. 15) and the eviction-awareness score (Eq. 16)."""

from __future__ import annotations

import numpy as np


def weighted_eviction_rate(
    e_short: float | np.ndarray,
    e_long: float | np.ndarray,
    gamma: float = 0.8,
    t_long: float = 24.0,
) -> float | np.ndarray:
    """Eq. 15: e_bar = gamma * e_short + (1 - gamma) * e_long / T_long.

    ``e_short``: evictions in the short window (1 hour); ``e_long``: evictions in the long
    window; ``t_long``: long window length in hours (24), so the second term is per hour.
    """
    return gamma * np.asarray(e_short, dtype=float) + (1.0 - gamma) * np.asarray(e_long, dtype=float) / t_long


def eviction_score(e_bar: float | np.ndarray, is_hp: bool, m: float = 3.0) -> np.ndarray:
    """Eq. 16 with Norm = clip to [0, 1].

    HP tasks prefer nodes with many past evictions: min(0.01 m^e, 1); spot tasks avoid
    them: max(1 - 0.01 m^e, 0). A spot score of 0 trips the circuit breaker
    (e_bar >= log_m 100, about 4.19 for m = 3).
    """
    penalty = 0.01 * np.power(m, np.asarray(e_bar, dtype=float))
    if is_hp:
        return np.minimum(penalty, 1.0)
    return np.maximum(1.0 - penalty, 0.0)
