"""Spot Quota Allocator (GFS §3.3): GPU inventory estimation and the eta feedback rule.

Units: GPUs for demand, capacity and quota; seconds for queueing times.

Two literal readings of the paper are corrected here (both documented in docs/gfs.md):

* Eq. 9 prints ``f = C - max(C, sum)``, which is never positive; the text says the
  inventory is ``C - sum`` and 0 once the aggregated demand exceeds ``C``, i.e.
  ``f = C - min(C, sum)``.
* Eq. 11 compares the eviction rate ``e`` against ``p`` (the *guarantee* rate, 0.9 in
  Table 4). ``e > 1.5 * 0.9`` can never hold, so the rule is applied with the eviction
  target ``1 - p`` (0.1 for p = 0.9), the reading the text's "eviction rate does not
  exceed 0.05 for p = 0.95" implies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import norm


@dataclass(frozen=True)
class SQAParams:
    """Table 4 of the paper."""

    p: float = 0.9  # target guarantee rate (Eq. 9)
    theta_s: float = 3600.0  # max JQT threshold theta, seconds (Eq. 11)
    horizon_h: int = 1  # guarantee hours H (Eq. 9), one of 1, 2, 4
    update_interval_s: float = 300.0  # spot quota update interval
    eta_init: float = 1.0
    eta_min: float = 0.05  # clamps (not in the paper) so eta cannot collapse or explode
    eta_max: float = 4.0


def org_upper_bound(mu: np.ndarray, sigma: np.ndarray, p: float) -> np.ndarray:
    """ICDF(p, mu, sigma) elementwise: the p-quantile of N(mu, sigma), GPUs."""
    mu = np.asarray(mu, dtype=float)
    sigma = np.maximum(np.asarray(sigma, dtype=float), 0.0)
    return mu + norm.ppf(p) * sigma


def gpu_inventory(
    capacity: float,
    mu: Sequence[np.ndarray] | np.ndarray,
    sigma: Sequence[np.ndarray] | np.ndarray,
    p: float,
    horizon_h: int,
) -> float:
    """Eq. 9: GPUs left for spot over the next ``horizon_h`` hours.

    ``mu`` and ``sigma`` are per-organization forecast sequences (shape ``[N, >=H]``);
    each organization contributes the max of its p-quantile over hours 1..H, the
    maxima are summed and subtracted from ``capacity`` (floored at 0).
    """
    mu = np.atleast_2d(np.asarray(mu, dtype=float))
    sigma = np.atleast_2d(np.asarray(sigma, dtype=float))
    if mu.shape != sigma.shape:
        raise ValueError(f"mu shape {mu.shape} != sigma shape {sigma.shape}")
    if horizon_h < 1 or horizon_h > mu.shape[1]:
        raise ValueError(f"horizon_h={horizon_h} must be in 1..{mu.shape[1]} (forecast length)")
    upper = org_upper_bound(mu[:, :horizon_h], sigma[:, :horizon_h], p)
    demand = float(np.sum(np.max(upper, axis=1)))
    return capacity - min(capacity, demand)


def spot_quota(inventory: float, eta: float, idle_gpus: float, guaranteed_spot_gpus: float) -> float:
    """Eq. 10: Q_H = min(f(p,H) * eta, S0 + Sa), GPUs."""
    return min(inventory * eta, idle_gpus + guaranteed_spot_gpus)


def window_eviction_rate(evictions: int, ended_runs: int) -> float:
    """Eviction rate e of Eq. 11 over the past H hours: spot evictions in the window
    divided by the spot runs that ended in it (finished, evicted or suspended) -- the
    share of runs ending by eviction, §4.2's evictions / runs -- in [0, 1]."""
    if evictions < 0 or ended_runs < 0:
        raise ValueError(f"counts must be >= 0, got evictions={evictions}, ended_runs={ended_runs}")
    if evictions > ended_runs:
        raise ValueError(f"{evictions} evictions but only {ended_runs} ended runs: each eviction ends one run")
    return evictions / ended_runs if ended_runs else 0.0


def update_eta(eta: float, eviction_rate: float, max_queue_s: float, params: SQAParams) -> float:
    """Eq. 11 with the eviction target ``1 - p`` (see module docstring), clamped."""
    target = 1.0 - params.p
    if eviction_rate > 1.5 * target:
        new = eta * target / eviction_rate
    elif eviction_rate < 0.5 * target and max_queue_s > params.theta_s:
        new = eta * (1.5 - eviction_rate / target)
    else:
        new = eta
    return float(min(params.eta_max, max(params.eta_min, new)))
