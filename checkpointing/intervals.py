"""Optimum checkpoint intervals: Young (1974), Daly (2006) and the thesis objective.

Pure functions, all durations in SECONDS unless a name says ``_hours``. Symbols:

* ``ckpt_seconds`` (delta, C): time to dump one checkpoint (what it costs on the
  training's critical path);
* ``mttp_seconds`` (M): mean time to preemption (the exponential lifetime's mean);
* ``restart_seconds`` (R): one-time restart latency after a preemption (allocation +
  preparation + restore).

The thesis (Koo, "Cost-Efficient ML Training on Preemptible Cloud Clusters", SNU 2022,
chapter 4) models the job latency as

    T(tau) = Tp + (Tp/tau) delta + [phi (tau + delta) + R] p(tau),
    p(tau) ~= (Tp/tau) (tau + delta)/M,     phi = 1/2                (Eq. 4.1-4.4)

and quotes ``tau_opt = sqrt(2 delta (M + R))`` (Eq. 4.5). Differentiating Eq. 4.4
exactly gives ``tau* = sqrt(2 delta (M + R) + delta**2)``; Eq. 4.5 drops the
``delta**2`` term (negligible when delta << M). Both are provided.
"""

from __future__ import annotations

import math

__all__ = [
    "daly_first_order_seconds",
    "equivalent_unit_mttp_seconds",
    "group_loss_mttp_seconds",
    "prior_weighted_mean_seconds",
    "daly_higher_order_seconds",
    "thesis_expected_latency_seconds",
    "thesis_exact_optimum_seconds",
    "thesis_optimum_seconds",
    "young_interval_seconds",
]


def _positive(name: str, value: float) -> float:
    if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive finite number of seconds, got {value!r}")
    return float(value)


def _non_negative(name: str, value: float) -> float:
    if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be >= 0 seconds, got {value!r}")
    return float(value)


def young_interval_seconds(ckpt_seconds: float, mttp_seconds: float) -> float:
    """Young's first-order optimum compute time between checkpoints, ``sqrt(2 C M)``.

    Args:
        ckpt_seconds: checkpoint dump time C (s).
        mttp_seconds: mean time to preemption/failure M (s).
    Returns:
        Interval in seconds.
    """
    c = _positive("ckpt_seconds", ckpt_seconds)
    m = _positive("mttp_seconds", mttp_seconds)
    return math.sqrt(2.0 * c * m)


def daly_first_order_seconds(ckpt_seconds: float, mttp_seconds: float) -> float:
    """Daly's first-order optimum, ``sqrt(2 delta M) - delta`` (s), floored at 0+.

    Daly (2006) measures the interval as compute time between dumps; subtracting delta
    is what his first-order model adds to Young's. Returns M when delta >= 2M (the
    regime where checkpointing every M is the best one can do).
    """
    d = _positive("ckpt_seconds", ckpt_seconds)
    m = _positive("mttp_seconds", mttp_seconds)
    if d >= 2.0 * m:
        return m
    return math.sqrt(2.0 * d * m) - d


def daly_higher_order_seconds(ckpt_seconds: float, mttp_seconds: float) -> float:
    """Daly's higher-order optimum (Future Gener. Comput. Syst. 22, 2006), seconds.

    ``tau = sqrt(2 delta M) [1 + (1/3) sqrt(delta/(2M)) + delta/(9 * 2M)] - delta``
    for delta < 2M, else ``M``.
    """
    d = _positive("ckpt_seconds", ckpt_seconds)
    m = _positive("mttp_seconds", mttp_seconds)
    if d >= 2.0 * m:
        return m
    x = d / (2.0 * m)
    return math.sqrt(2.0 * d * m) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - d


def thesis_expected_latency_seconds(
    tau_seconds: float,
    *,
    process_seconds: float,
    ckpt_seconds: float,
    mttp_seconds: float,
    restart_seconds: float = 0.0,
    phi: float = 0.5,
) -> float:
    """The thesis objective T(tau), Eq. 4.3 (Eq. 4.4 when ``phi = 1/2``), in seconds.

    Args:
        tau_seconds: compute time between checkpoints (s).
        process_seconds: Tp, the failure-free compute time of the whole job (s).
        ckpt_seconds: delta, dump time per checkpoint (s).
        mttp_seconds: M, mean time to preemption (s).
        restart_seconds: R, one-time restart latency per preemption (s).
        phi: fraction of a segment lost per preemption (1/2 in the thesis).
    """
    tau = _positive("tau_seconds", tau_seconds)
    tp = _positive("process_seconds", process_seconds)
    d = _non_negative("ckpt_seconds", ckpt_seconds)
    m = _positive("mttp_seconds", mttp_seconds)
    r = _non_negative("restart_seconds", restart_seconds)
    preemptions = (tp / tau) * (tau + d) / m  # Eq. 4.2
    return tp + (tp / tau) * d + (phi * (tau + d) + r) * preemptions


def thesis_optimum_seconds(
    ckpt_seconds: float, mttp_seconds: float, restart_seconds: float = 0.0
) -> float:
    """Thesis Eq. 4.5: ``tau_opt = sqrt(2 delta (MTTP + R))`` seconds (Algorithm 1 uses it)."""
    d = _positive("ckpt_seconds", ckpt_seconds)
    m = _positive("mttp_seconds", mttp_seconds)
    r = _non_negative("restart_seconds", restart_seconds)
    return math.sqrt(2.0 * d * (m + r))


def thesis_exact_optimum_seconds(
    ckpt_seconds: float, mttp_seconds: float, restart_seconds: float = 0.0
) -> float:
    """Exact minimiser of Eq. 4.4: ``sqrt(2 delta (M + R) + delta^2)`` seconds.

    Derivation: T(tau)/Tp = 1 + delta/tau + tau/(2M) + delta/M + delta^2/(2 tau M)
    + R/M + R delta/(tau M); setting d/dtau = 0 gives tau^2 = 2 delta (M + R) + delta^2.
    """
    d = _positive("ckpt_seconds", ckpt_seconds)
    m = _positive("mttp_seconds", mttp_seconds)
    r = _non_negative("restart_seconds", restart_seconds)
    return math.sqrt(2.0 * d * (m + r) + d * d)


def prior_weighted_mean_seconds(
    prior_seconds: float | None,
    prior_weight: float,
    observed_total_seconds: float,
    observed_count: int,
) -> float | None:
    """Mean of measured durations with a prior counted as ``prior_weight`` observations (s).

    ``(n0 * prior + sum(x_i)) / (n0 + n)``: the posterior mean of a normal mean with a
    conjugate prior worth ``n0`` pseudo-observations. With no measurement yet it is the
    prior itself (so an interval computed from it equals the plan's); each measurement
    moves it by ``(x - mean) / (n0 + n + 1)``; as ``n`` grows the measurements dominate.
    Without a prior it is the plain running mean, None before the first measurement.

    Args:
        prior_seconds: the prior mean (s), or None when there is none.
        prior_weight: n0 > 0, the prior's weight in pseudo-observations.
        observed_total_seconds: sum of the ``observed_count`` measurements (s).
        observed_count: number of measurements n >= 0.
    """
    if not (isinstance(prior_weight, int | float) and math.isfinite(prior_weight) and prior_weight > 0):
        raise ValueError(f"prior_weight must be a positive number of pseudo-observations, got {prior_weight!r}")
    if not isinstance(observed_count, int) or observed_count < 0:
        raise ValueError(f"observed_count must be an integer >= 0, got {observed_count!r}")
    total = _non_negative("observed_total_seconds", observed_total_seconds)
    if prior_seconds is None:
        return total / observed_count if observed_count else None
    prior = _non_negative("prior_seconds", prior_seconds)
    return (prior_weight * prior + total) / (prior_weight + observed_count)


def group_loss_mttp_seconds(unit_mttp_seconds: float, restart_seconds: float, units: int) -> float:
    """Mean time (s) until ALL ``units`` independent failure units are down at once.

    An elastic group survives the loss of some of its nodes (a shrink: the survivors hold
    the state, nothing is restored); only the loss of every node at once needs a restore
    from the last checkpoint. This is that event's mean time, from a full group.

    Model (the classic parallel-redundant system with repair): ``n = units`` units, each
    up unit lost at rate ``lam = 1 / unit_mttp_seconds`` (exponential lifetimes), each
    lost unit replaced after an exponential time of mean ``R = restart_seconds`` (rate
    ``mu = 1 / R``, replacements in parallel). With ``k`` units up, let ``m_k`` be the
    mean time to reach ``k - 1`` up; then ``m_n = 1 / (n lam)`` and
    ``m_k = (1 + (n - k) mu m_{k+1}) / (k lam)`` (leave k at rate ``k lam + (n-k) mu``;
    a repair first costs the return trip ``m_{k+1}``), and the result is
    ``m_n + ... + m_1``. Exact for this process; ``n = 1`` gives ``unit_mttp_seconds``,
    ``n = 2`` gives ``(3 lam + mu) / (2 lam^2)``, and for ``lam << mu`` it tends to the
    textbook ``mu^(n-1) / (n lam^n) = M^n / (n R^(n-1))``.

    A unit is what fails together: nodes in the same zone are reclaimed together, so
    they are ONE unit (the caller counts zones, not nodes). ``R = 0`` (instant
    replacement) with ``n > 1``: the group is never lost, ``math.inf``; ``math.inf`` too
    when the value overflows a float.

    Args:
        unit_mttp_seconds: mean time to preemption of one unit, M (s, > 0).
        restart_seconds: mean time for a replacement to join, R (s, >= 0).
        units: number of independent units n (>= 1).
    Returns:
        Mean time to group loss, seconds.
    """
    m = _positive("unit_mttp_seconds", unit_mttp_seconds)
    r = _non_negative("restart_seconds", restart_seconds)
    if isinstance(units, bool) or not isinstance(units, int) or units < 1:
        raise ValueError(f"units must be an integer >= 1, got {units!r}")
    if units == 1:
        return m
    if r == 0:
        return math.inf
    lam, mu = 1.0 / m, 1.0 / r
    total = 0.0
    m_next = 0.0  # m_{k+1}
    for k in range(units, 0, -1):
        m_k = (1.0 + (units - k) * mu * m_next) / (k * lam)
        total += m_k
        m_next = m_k
        if not math.isfinite(total):
            return math.inf
    return total


def equivalent_unit_mttp_seconds(unit_mttp_seconds: list[float] | tuple[float, ...],
                                 restart_seconds: float) -> float:
    """One MTTP (s) standing for units whose MTTPs differ, for ``group_loss_mttp_seconds``.

    ``n`` identical units with MTTP ``M_eq`` are all down at once, in the long run, as
    often as units with MTTPs ``M_i``: a unit is down a share ``p_i = R / (M_i + R)`` of
    the time (independently), so ``p = (p_1 ... p_n)^(1/n)`` and
    ``M_eq = R (1 - p) / p``. Equal MTTPs give that MTTP back; ``R = 0`` gives the
    geometric mean of the ``M_i`` (the limit). For ``R << M_i`` the group-loss rate
    ``n prod(1/M_i) R^(n-1)`` then matches the heterogeneous process to first order
    (not exactly: docs/elastic.md gives the measured difference).

    Args:
        unit_mttp_seconds: the units' MTTPs M_i (s, each > 0; at least one).
        restart_seconds: mean time for a replacement to join, R (s, >= 0).
    """
    ms = [_positive("unit_mttp_seconds", v) for v in unit_mttp_seconds]
    if not ms:
        raise ValueError("unit_mttp_seconds must name at least one unit")
    r = _non_negative("restart_seconds", restart_seconds)
    if len(set(ms)) == 1:
        return ms[0]
    if r == 0:
        return math.exp(sum(math.log(v) for v in ms) / len(ms))
    log_p = sum(math.log(r / (v + r)) for v in ms) / len(ms)
    p = math.exp(log_p)
    return r * (1.0 - p) / p
