"""Spot Quota Allocator (GFS §3.3): GPU inventory estimation and the eta feedback rule.

Units: GPUs for demand, capacity and quota; seconds for queueing times.

Two literal readings of the paper are corrected here (both documented in docs/gfs.md):

* Eq. 9 prints ``f = C - max(C, sum)``, which is never positive; the text says the
  inventory is ``C - sum`` and 0 once the aggregated demand exceeds ``C``, i.e.
  ``f = C - min(C, sum)``.
* Eq. 11 compares the eviction rate ``e`` against ``p`` (the *guarantee* rate, 0.9 in
  Table 4). ``e > 1.5 * 0.9`` can never hold, so the rule is applied with the eviction
  target ``1 - p`` (0.1 for p = 0.9), the reading the text's "eviction rate does not
  exceed 0.05 for p = 0.95" implies. The authors' public code also carries a branch
  ``eta * (1.5 - (1 - p) / e)``; it is dead there (never reached) and wrong if reached
  (it divides by ``e``, so it *shrinks* eta as evictions fall and is undefined at
  ``e = 0``). Do not "fix" this module toward it: the low-eviction case here is the
  paper's ``eta * (1.5 - e / target)``, in [1, 1.5].

Quota tightness options (:class:`SQAParams`, documented in docs/gfs.md):

* ``aggregate``: ``"sum_of_quantiles"`` (default; the paper's Eq. 9 text: per-organization
  p-quantile, max over H, summed) or ``"quantile_of_sum"`` (the authors' code: the
  p-quantile of the summed Gaussian, organizations independent, max over H).
* ``hp_count``: how a gang job enters the HP demand series: ``"gang"`` (default, g x w
  GPUs, what it holds) or ``"pod"`` (g GPUs, one pod per job, as the authors' code
  counts; it undercounts gangs).
* eta feedback on/off is per policy (``PolicyConfig.eta_feedback``).
* ``eta_evidence``: how Eq. 11's cut branch reads e: ``"wilson"`` (default; the lower
  Wilson bound at confidence p of the evictions among the runs that ended in the window)
  or ``"point"`` (the observed share). With a few runs ending per pool and hour the point
  estimate is 0 or >= 0.5 and one eviction cuts eta to a fifth; at the paper's ~160 spot
  runs an hour the two agree (docs/gfs.md, "eta on few runs").
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
    aggregate: str = "sum_of_quantiles"  # or "quantile_of_sum" (see module docstring)
    hp_count: str = "gang"  # or "pod": GPUs per HP job in the demand series
    # GFS-BF: quantile of the HP bound that caps the best-effort tier (total spot <=
    # C - bound); 0 = no cap, best-effort spot may take any idle GPU
    backfill_p: float = 0.0
    # how Eq. 11's e is read from the few runs that end in one pool in H hours: "point" =
    # the observed share (the paper's wording); "wilson" = the cut uses the lower end of
    # the Wilson interval at confidence p (cut only on evidence, see eta_eviction_rate)
    eta_evidence: str = "wilson"

    def __post_init__(self) -> None:
        if self.aggregate not in AGGREGATES:
            raise ValueError(f"SQAParams.aggregate={self.aggregate!r}; use one of {AGGREGATES}")
        if self.hp_count not in HP_COUNTS:
            raise ValueError(f"SQAParams.hp_count={self.hp_count!r}; use one of {HP_COUNTS}")
        if self.eta_evidence not in ETA_EVIDENCE:
            raise ValueError(f"SQAParams.eta_evidence={self.eta_evidence!r}; use one of {ETA_EVIDENCE}")
        if not 0.0 < self.p < 1.0:
            raise ValueError(f"SQAParams.p={self.p} must be in (0, 1)")
        if not 0.0 <= self.backfill_p < 1.0:
            raise ValueError(f"SQAParams.backfill_p={self.backfill_p} must be in [0, 1)")
        if self.horizon_h < 1:
            raise ValueError(f"SQAParams.horizon_h={self.horizon_h} must be >= 1 hour")


AGGREGATES = ("sum_of_quantiles", "quantile_of_sum")
HP_COUNTS = ("gang", "pod")
ETA_EVIDENCE = ("wilson", "point")


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
    aggregate: str = "sum_of_quantiles",
) -> float:
    """Eq. 9: GPUs left for spot over the next ``horizon_h`` hours.

    ``mu`` and ``sigma`` are per-organization forecast sequences (shape ``[N, >=H]``).
    ``sum_of_quantiles``: each organization contributes the max of its p-quantile over
    hours 1..H, the maxima are summed. ``quantile_of_sum``: the per-hour p-quantile of
    N(sum mu, sqrt(sum sigma^2)), max over hours 1..H. The demand is subtracted from
    ``capacity`` (floored at 0).
    """
    mu = np.atleast_2d(np.asarray(mu, dtype=float))
    sigma = np.atleast_2d(np.asarray(sigma, dtype=float))
    if mu.shape != sigma.shape:
        raise ValueError(f"mu shape {mu.shape} != sigma shape {sigma.shape}")
    if horizon_h < 1 or horizon_h > mu.shape[1]:
        raise ValueError(f"horizon_h={horizon_h} must be in 1..{mu.shape[1]} (forecast length)")
    demand = aggregate_demand(mu[:, :horizon_h], sigma[:, :horizon_h], p, aggregate)
    return capacity - min(capacity, demand)


def aggregate_demand(mu: np.ndarray, sigma: np.ndarray, p: float, aggregate: str = "sum_of_quantiles") -> float:
    """The HP demand bound of Eq. 9 over the hours given (``mu``/``sigma`` ``[N, H]``), GPUs."""
    if aggregate == "sum_of_quantiles":
        return float(np.sum(np.max(org_upper_bound(mu, sigma, p), axis=0 if mu.ndim == 1 else 1)))
    if aggregate == "quantile_of_sum":
        mu = np.atleast_2d(mu)
        sd = np.sqrt(np.sum(np.maximum(np.atleast_2d(sigma), 0.0) ** 2, axis=0))
        return float(np.max(org_upper_bound(mu.sum(axis=0), sd, p)))
    raise ValueError(f"unknown aggregate {aggregate!r}; use one of {AGGREGATES}")


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


def wilson_lower(evictions: int, ended_runs: int, confidence: float) -> float:
    """One-sided lower confidence bound (Wilson score) of an eviction share observed as
    ``evictions`` of ``ended_runs``, at ``confidence``; 0 when no run ended."""
    if ended_runs <= 0:
        return 0.0
    n, phat = float(ended_runs), evictions / ended_runs
    z = float(norm.ppf(confidence))
    centre = phat + z * z / (2 * n)
    half = z * np.sqrt(phat * (1 - phat) / n + z * z / (4 * n * n))
    return float(max(0.0, (centre - half) / (1 + z * z / n)))


def eta_eviction_rate(evictions: int, ended_runs: int, params: SQAParams) -> tuple[float, float]:
    """(e for the cut branch, e for the raise branch) of Eq. 11 from one pool's window.

    ``"point"``: both are the observed share (:func:`window_eviction_rate`). ``"wilson"``
    (default): the cut uses the Wilson lower bound at confidence ``p``, so eta is cut only
    when the window is evidence that the rate exceeds 1.5 x the target, and by the factor
    that evidence supports. With the paper's ~160 spot runs an hour the two agree; with
    2 runs ending in an hour, one eviction (e = 0.5) cuts eta to 0.2 x under "point" and
    to ~0.6 x under "wilson". The raise branch keeps the observed share: raising needs
    long queues (l > theta) too, and no ended run is no evidence of evictions.
    """
    e = window_eviction_rate(evictions, ended_runs)
    if params.eta_evidence == "point":
        return e, e
    return wilson_lower(evictions, ended_runs, params.p), e


def update_eta(eta: float, eviction_rate: float, max_queue_s: float, params: SQAParams,
               cut_rate: float | None = None) -> float:
    """Eq. 11 with the eviction target ``1 - p`` (see module docstring), clamped.
    ``cut_rate`` (default ``eviction_rate``): the e the high-eviction branch tests."""
    target = 1.0 - params.p
    cut = eviction_rate if cut_rate is None else cut_rate
    if cut > 1.5 * target:
        new = eta * target / cut
    elif eviction_rate < 0.5 * target and max_queue_s > params.theta_s:
        new = eta * (1.5 - eviction_rate / target)
    else:
        new = eta
    return float(min(params.eta_max, max(params.eta_min, new)))
