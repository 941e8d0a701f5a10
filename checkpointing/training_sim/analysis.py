"""Closed-form expected work lost per preemption for a static every-N-steps policy
(seconds), used to check the simulator and to explain how it differs from the thesis.

Setting: segments of ``N`` steps of ``T`` s compute followed by a dump of ``delta`` s;
a checkpoint becomes restorable ``beta`` s after its dump ends (background backup).

* ``uniform_phase_loss_seconds`` is the thesis's analytical assumption (phi = 1/2 of a
  segment, Eq. 4.1) plus the backup window: the kill lands uniformly in a segment and
  the previous checkpoint is lost if the kill comes less than beta after it:
  ``L = (N T)^2 / (2 P) + (delta + beta) N T / P``, ``P = N T + delta``.
* ``renewal_loss_seconds`` is what the simulator's timeline implies. Lifetimes are
  exponential from allocation, so a kill after preparation lands at an exponential time
  x after training restarts. The restored checkpoint is already durable, so the first
  segment has no backup window. Kills during preparation lose no compute. Summing
  over segments j with weights ``q^j``, ``q = exp(-P/M)``::

      E = [A + N T (1 - exp(-beta/M)) q] / (1 - q) * exp(-prep/M)
      A = M - (N T + M) exp(-N T/M) + N T (exp(-N T/M) - exp(-P/M))
"""

from __future__ import annotations

import math

__all__ = ["renewal_loss_seconds", "uniform_phase_loss_seconds"]


def uniform_phase_loss_seconds(
    every: int, step_seconds: float, ckpt_seconds: float, backup_seconds: float
) -> float:
    """Mean compute lost per preemption under the thesis's uniform-phase model (s)."""
    nt = every * step_seconds
    seg = nt + ckpt_seconds
    return nt * nt / (2.0 * seg) + (ckpt_seconds + backup_seconds) * nt / seg


def renewal_loss_seconds(
    every: int,
    step_seconds: float,
    ckpt_seconds: float,
    backup_seconds: float,
    mttp_seconds: float,
    prep_seconds: float = 0.0,
) -> float:
    """Mean compute lost per preemption on the simulator's timeline (s).

    Ignores the job's end (the job is long compared with MTTP). Needs
    ``backup_seconds <= N T + delta``, so that backups never queue.
    """
    nt = every * step_seconds
    seg = nt + ckpt_seconds
    m = mttp_seconds
    if backup_seconds > seg:
        raise ValueError(
            f"backup_seconds ({backup_seconds}) longer than a segment ({seg}): backups queue "
            "and this closed form does not apply"
        )
    q = math.exp(-seg / m)
    a = m - (nt + m) * math.exp(-nt / m) + nt * (math.exp(-nt / m) - q)
    window = nt * (1.0 - math.exp(-backup_seconds / m)) * q
    return (a + window) / (1.0 - q) * math.exp(-prep_seconds / m)
