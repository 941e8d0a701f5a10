"""The run contract: one definition, one unit (SECONDS of market time), one home for the
numbers that travel statistics DB -> plan -> fleet policy -> training process.

* **MTTP** (mean time to preemption, s): per zone, held time / preemptions.
* **R** (restart cost, s): one relaunch, allocation + preparation + restore, i.e. the
  time from a node's launch to its training process reporting ``start``.
* **checkpoint time** (s): what one save blocks training (``stall_seconds`` measured by
  the saver).
* **interval** (s): the planned insurance checkpoint interval.
* **session cost** ($): ``price_per_hour x (ended_at - launched_at) / 3600``.

"Market seconds" are real seconds on SkyPilot and emulated seconds on the local fleet;
only the local provider converts them to and from its compressed wall clock
(``fleet/providers/local``), so everything recorded and planned is in market seconds.

:class:`RunPriors` is what ``FleetPlan.apply(StageSpec)`` puts into the stage spec and
what both providers export to the training process (``SPOTFLEET_*`` variables of
``checkpointing/runtime_env.py``) and refresh during the attempt with
:func:`posterior_mttp_seconds` / :func:`posterior_restart_seconds`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from checkpointing import runtime_env as rt
from checkpointing.intervals import prior_weighted_mean_seconds
from checkpointing.policy import CKPT_PRIOR_WEIGHT

#: R when nothing was measured yet: 6 minutes (the planner's, fleet-sim's, SkyPilot's and
#: the training process's prior; its home is the lowest layer, checkpointing/runtime_env.py).
DEFAULT_RESTART_SECONDS = rt.DEFAULT_RESTART_SECONDS
#: checkpoint time when nothing was measured yet: 1 minute.
DEFAULT_CHECKPOINT_SECONDS = 60.0
#: weight of the prior in the in-attempt estimates, in pseudo-observations.
PRIOR_WEIGHT = 1.0


def _finite_pos(v: float | None) -> float | None:
    return float(v) if v is not None and math.isfinite(v) and v > 0 else None


@dataclass(frozen=True)
class RunPriors:
    """What the plan knows before the attempt starts (market seconds, $/h).

    ``mttp_seconds``: per zone; a zone never seen preempted is left out (no estimate).
    ``work_seconds``: failure-free compute of the stage, when planned.
    ``notice_seconds``: the cloud's notice window.
    ``checkpoint_seconds``: the checkpoint time MEASURED in the statistics DB, or None
    when nothing was measured: the fleet policy then assumes ``DEFAULT_CHECKPOINT_SECONDS``
    (``checkpoint_seconds_or_default``) and the training process gets no checkpoint-time
    prior (it measures its own with a bootstrap save) -- a made-up 60 s weighted as 10
    saves would hold its insurance interval far off for a long time.
    """

    mttp_seconds: Mapping[str, float] = field(default_factory=dict)
    restart_seconds: float = DEFAULT_RESTART_SECONDS
    checkpoint_seconds: float | None = None
    interval_seconds: float | None = None
    work_seconds: float | None = None
    notice_seconds: float = 0.0
    spot_price_per_hour: Mapping[str, float] = field(default_factory=dict)
    on_demand_price_per_hour: float | None = None
    availability: Mapping[str, float] = field(default_factory=dict)  # share of time up, per zone

    def __post_init__(self) -> None:
        for name in ("restart_seconds", "checkpoint_seconds", "notice_seconds"):
            v = getattr(self, name)
            if v is None and name == "checkpoint_seconds":
                continue
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise ValueError(f"RunPriors.{name} = {v!r} must be a finite number of seconds >= 0")
        for z, v in self.mttp_seconds.items():
            if not (isinstance(v, (int, float)) and v > 0):
                raise ValueError(f"RunPriors.mttp_seconds[{z!r}] = {v!r} must be > 0 seconds "
                                 "(leave a never-preempted zone out)")

    @property
    def checkpoint_seconds_or_default(self) -> float:
        """The measured checkpoint time (s), else ``DEFAULT_CHECKPOINT_SECONDS``."""
        return DEFAULT_CHECKPOINT_SECONDS if self.checkpoint_seconds is None else self.checkpoint_seconds

    def mttp_for(self, zone: str | None) -> float | None:
        """MTTP of ``zone`` (s); the mean over known zones when the zone has none."""
        if zone is not None and zone in self.mttp_seconds:
            return float(self.mttp_seconds[zone])
        vals = [float(v) for v in self.mttp_seconds.values()]
        return sum(vals) / len(vals) if vals else None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["mttp_seconds"] = dict(self.mttp_seconds)
        d["spot_price_per_hour"] = dict(self.spot_price_per_hour)
        d["availability"] = dict(self.availability)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> RunPriors:
        if not d:
            return cls()
        names = {f for f in cls.__dataclass_fields__}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"run priors: unknown field(s) {unknown}; known: {sorted(names)}")
        return cls(**dict(d))


def prior_history(priors: RunPriors, zones: list[str], gap_seconds: float,
                  hours: float = 24.0 * 7) -> np.ndarray | None:
    """A zones x ticks availability history shaped by the priors' statistics, for a
    controller that has no market trace of its own (SkyPilot): per zone, up runs of the
    zone's MTTP alternating with down runs that give its availability. None when the
    priors know no zone. (The local fleet uses the market's real past instead.)"""
    if not priors.mttp_seconds:
        return None
    n = max(2, int(hours * 3600.0 / gap_seconds))
    out = np.ones((len(zones), n), dtype=bool)
    for i, z in enumerate(zones):
        m = priors.mttp_seconds.get(z)  # a zone without its own statistics stays "up"
        a = float(priors.availability.get(z, 0.0)) or None
        if m is None:
            continue
        up = max(1, int(round(m / gap_seconds)))
        down = max(1, int(round(up * (1.0 - a) / a))) if a and 0 < a < 1 else 1
        cycle = np.r_[np.ones(up, dtype=bool), np.zeros(down, dtype=bool)]
        out[i] = np.resize(cycle, n)[::-1]  # the latest tick ends an up run
    return out


def _process_seconds(mttp_seconds: float | None, restart_seconds: float | None,
                     interval_seconds: float | None, checkpoint_seconds: float | None,
                     k: float) -> dict[str, float]:
    """The known statistics in the training process's seconds (``k`` per market second)."""
    out: dict[str, float] = {}
    if (m := _finite_pos(mttp_seconds)) is not None:
        out["mttp_seconds"] = m * k
    if restart_seconds is not None and math.isfinite(restart_seconds):
        out["restart_seconds"] = max(0.0, restart_seconds) * k
    if (t := _finite_pos(interval_seconds)) is not None:
        out["interval_seconds"] = t * k
    if (c := _finite_pos(checkpoint_seconds)) is not None:
        out["checkpoint_seconds"] = c * k
    return out


_ENV_OF = {"mttp_seconds": rt.ENV_MTTP_SECONDS, "restart_seconds": rt.ENV_RESTART_SECONDS,
           "interval_seconds": rt.ENV_INTERVAL_SECONDS, "checkpoint_seconds": rt.ENV_CHECKPOINT_SECONDS}


def training_env(mttp_seconds: float | None, restart_seconds: float | None,
                 interval_seconds: float | None = None, checkpoint_seconds: float | None = None,
                 seconds_per_market_second: float = 1.0) -> dict[str, str]:
    """``SPOTFLEET_*`` statistics for the training process, in ITS clock's seconds.

    ``seconds_per_market_second`` is 1 on real clouds; the local fleet passes its
    compression (wall seconds per emulated second).
    """
    vals = _process_seconds(mttp_seconds, restart_seconds, interval_seconds, checkpoint_seconds,
                            seconds_per_market_second)
    return {_ENV_OF[name]: f"{v:.6g}" for name, v in vals.items()}


def training_stats(mttp_seconds: float | None, restart_seconds: float | None,
                   interval_seconds: float | None = None,
                   seconds_per_market_second: float = 1.0) -> dict[str, float]:
    """The same values as the JSON of ``SPOTFLEET_STATS_FILE`` (re-read on change; the
    checkpoint time is not refreshed there: the process measures its own)."""
    vals = _process_seconds(mttp_seconds, restart_seconds, interval_seconds, None,
                            seconds_per_market_second)
    return {name: round(v, 6) for name, v in vals.items()}


def posterior_mttp_seconds(prior: float | None, held_seconds: float, preemptions: int,
                           prior_weight: float = PRIOR_WEIGHT) -> float | None:
    """MTTP after an attempt held spot ``held_seconds`` and saw ``preemptions`` (s).

    The prior counts as ``prior_weight`` pseudo-preemptions over ``prior_weight x prior``
    held seconds (a gamma prior on the rate): ``(w M0 + held) / (w + preemptions)``.
    Without a prior: ``held / preemptions`` once something was preempted, else None.
    Only what was observed up to now enters: never the market's future.
    """
    m0 = _finite_pos(prior)
    if m0 is None:
        return held_seconds / preemptions if preemptions > 0 else None
    return (prior_weight * m0 + max(0.0, held_seconds)) / (prior_weight + preemptions)


def posterior_restart_seconds(prior: float | None, measured: list[float],
                              prior_weight: float = PRIOR_WEIGHT) -> float:
    """R after measuring relaunches (s): the prior as ``prior_weight`` samples plus the
    measured launch -> ready times."""
    p = prior if prior is not None and math.isfinite(prior) and prior >= 0 else None
    if p is None:
        return sum(measured) / len(measured) if measured else DEFAULT_RESTART_SECONDS
    return (prior_weight * p + sum(measured)) / (prior_weight + len(measured))


def posterior_checkpoint_seconds(prior: float | None, measured: list[float],
                                 prior_weight: float = CKPT_PRIOR_WEIGHT) -> float | None:
    """Checkpoint time C after the attempt's own saves (s): the plan's measured C as
    ``prior_weight`` saves plus the stalls of the periodic / insurance saves committed so
    far (the training process's own rule, ``checkpointing.policy``); the mean of the
    stalls without a prior; None when neither exists (then nothing is exported and the
    process bootstraps)."""
    stalls = [float(x) for x in measured if x is not None and math.isfinite(x) and x > 0]
    return prior_weighted_mean_seconds(_finite_pos(prior), prior_weight, sum(stalls), len(stalls))


def restart_seconds_of(launched_at: float, ready_at: float | None) -> float | None:
    """R of one node session: launch to the training process's ``start`` (s)."""
    return None if ready_at is None else max(0.0, ready_at - launched_at)


def mean_restart_seconds(sessions: Iterable[tuple[float, float | None]]) -> float | None:
    """Measured R (s): the mean of :func:`restart_seconds_of` over ``(launched_at,
    ready_at)`` pairs of node sessions, first launches included (a first launch pays the
    same allocation + preparation; restore is what it skips). None when no session
    became ready. The statistics (``fleet.stats.preemption.session_stats``), the
    break-even report (``assets.cost_tables.observed_rates``) and the benchmarks use it."""
    vals = [r for a, b in sessions if (r := restart_seconds_of(float(a), _ready(b))) is not None]
    return sum(vals) / len(vals) if vals else None


def measured_checkpoint_seconds(saves: Iterable[tuple[str | None, float | None]]) -> float | None:
    """Measured checkpoint time C (s) from ``(kind, stall_seconds)`` of committed saves:
    the mean stall of the periodic and insurance saves -- an emergency save blocks until
    it is persisted, which is not what an insurance save costs. None when nothing was
    measured (then the plan scores with ``DEFAULT_CHECKPOINT_SECONDS`` and exports no
    checkpoint-time prior)."""
    vals = [float(s) for k, s in saves
            if k != "emergency" and s is not None and math.isfinite(float(s)) and float(s) > 0]
    return sum(vals) / len(vals) if vals else None


def _ready(v: float | None) -> float | None:
    return None if v is None or not math.isfinite(float(v)) else float(v)


def billed_usd(price_per_hour: float, market_seconds: float) -> float:
    """$ for ``market_seconds`` of one node at ``price_per_hour`` ($/h): the one place that
    turns billed seconds into money (sessions, their cost split, elastic pauses)."""
    return price_per_hour * max(0.0, market_seconds) / 3600.0


def session_cost_usd(price_per_hour: float, launched_at: float, ended_at: float | None) -> float:
    """What one node session cost ($): price x held market hours (0 while it runs)."""
    if ended_at is None:
        return 0.0
    return billed_usd(price_per_hour, ended_at - launched_at)
