"""The fleet-policy interface: what a policy sees, what it decides.

A policy drives ONE job that needs ``work_hours`` of compute before ``deadline_hours``.
At each decision tick the simulator (or a live provider) hands it the job's
:class:`JobState` and an :class:`Observation` of the spot market *up to and including
the current tick*, and the policy answers with an :class:`Action`: where the job should
run during this tick (idle, on-demand, or spot in one zone) and, optionally, the
checkpoint interval to use and when it next wants to be asked.

Locations are small ints: ``IDLE`` (-2), ``ON_DEMAND`` (-1), or a zone index ``z >= 0``
meaning "spot in zone z". Durations are in hours unless a name says otherwise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

IDLE = -2
ON_DEMAND = -1


def location_name(loc: int, zones: tuple[str, ...] = ()) -> str:
    """Human name of a location int: ``idle``, ``on-demand`` or ``spot:<zone>``."""
    if loc == IDLE:
        return "idle"
    if loc == ON_DEMAND:
        return "on-demand"
    return f"spot:{zones[loc]}" if 0 <= loc < len(zones) else f"spot:{loc}"


@dataclass(frozen=True)
class JobSpec:
    """A deadline job and the cost model it runs under.

    Attributes:
        work_hours: compute the job needs (h).
        deadline_hours: wall-clock budget from the start (h).
        restart_hours: changeover delay ``d`` paid, and billed, on every (re)launch (h).
        checkpoint_hours: time one checkpoint save blocks training (h).
        notice_seconds: preemption notice window (s); when >= the checkpoint time an
            emergency save runs inside it and only the save time is lost.
        on_demand_price: $/h of the on-demand instance.
        spot_price: $/h of a spot instance (every zone).
    """

    work_hours: float
    deadline_hours: float
    restart_hours: float = 0.1
    checkpoint_hours: float = 1.0 / 60.0
    notice_seconds: float = 0.0
    on_demand_price: float = 3.06
    spot_price: float = 0.918

    def __post_init__(self) -> None:
        checks = {
            "work_hours": self.work_hours > 0,
            "deadline_hours": self.deadline_hours >= self.work_hours,
            "restart_hours": self.restart_hours >= 0,
            "checkpoint_hours": self.checkpoint_hours >= 0,
            "notice_seconds": self.notice_seconds >= 0,
            "on_demand_price": self.on_demand_price > 0,
            "spot_price": self.spot_price > 0,
        }
        for name, ok in checks.items():
            value = getattr(self, name)
            if not (ok and math.isfinite(value)):
                hint = (" (must be >= work_hours: the job cannot finish otherwise)"
                        if name == "deadline_hours" else " (must be a finite, valid number)")
                raise ValueError(f"JobSpec.{name} = {value!r} is invalid{hint}")

    @property
    def notice_saves(self) -> bool:
        """True when the notice window fits an emergency checkpoint."""
        return self.notice_seconds > 0 and self.notice_seconds / 3600.0 >= self.checkpoint_hours

    @property
    def on_demand_cost(self) -> float:
        """Cost ($) of running the whole job on one on-demand instance."""
        return self.on_demand_price * (self.work_hours + self.restart_hours)


@dataclass
class JobState:
    """The job as the policy sees it at the start of a tick (hours unless noted).

    ``committed_hours`` is work safe in the latest checkpoint; ``uncommitted_hours`` is
    work done since then (lost on a preemption without usable notice).
    """

    tick: int  # absolute trace tick
    start_tick: int
    elapsed_hours: float
    spec: JobSpec
    location: int = IDLE
    committed_hours: float = 0.0
    uncommitted_hours: float = 0.0
    overhead_left_hours: float = 0.0  # restart overhead still to pay at ``location``
    preemptions: int = 0
    last_preempted_zone: int = -1
    just_preempted: bool = False
    launches: int = 0

    @property
    def done_hours(self) -> float:
        return self.committed_hours + self.uncommitted_hours

    @property
    def remaining_work_hours(self) -> float:
        """Work still to do counting only checkpointed progress (h)."""
        return max(0.0, self.spec.work_hours - self.committed_hours)

    @property
    def remaining_time_hours(self) -> float:
        return self.spec.deadline_hours - self.elapsed_hours

    @property
    def slack_hours(self) -> float:
        """Time to spare if the job ran uninterrupted from its checkpoint from now (h)."""
        return self.remaining_time_hours - self.remaining_work_hours


@dataclass(frozen=True)
class Observation:
    """The market up to and including the current tick.

    ``available[z]`` is whether spot capacity exists in zone ``z`` now; ``history`` is
    the availability matrix (zones x ticks) from the trace start to now inclusive (the
    last column equals ``available``). Nothing after the current tick is visible.
    """

    tick: int
    gap_hours: float
    zones: tuple[str, ...]
    available: np.ndarray  # bool, shape (Z,)
    history: np.ndarray  # bool, shape (Z, tick + 1)

    @property
    def n_zones(self) -> int:
        return len(self.zones)


@dataclass(frozen=True)
class Action:
    """A policy's decision for the current tick.

    Attributes:
        target: ``IDLE``, ``ON_DEMAND`` or a zone index (spot there; must be available).
        checkpoint_interval_hours: compute between periodic checkpoints while at the
            target; ``None`` = never checkpoint periodically (a save still happens on
            a voluntary move, and in the notice window when one is given).
        recheck_tick: the policy will not change its mind before this absolute tick
            unless an event happens (its instance is preempted, or availability changes
            in a watched zone); ``None`` = ask again next tick.
        watch: zones whose availability changes wake the policy early; ``None`` = all.
    """

    target: int
    checkpoint_interval_hours: float | None = None
    recheck_tick: int | None = None
    watch: tuple[int, ...] | None = field(default=None)


class Policy:
    """Base class of fleet policies. Subclasses implement :meth:`decide`.

    A policy is online: it may use only ``state`` and ``obs`` (the past and present).
    :meth:`reset` is called once per job before the first decision.
    """

    name: str = "policy"

    def reset(self, spec: JobSpec, obs: Observation) -> None:  # noqa: B027 - optional hook
        """Prepare for a new job starting at ``obs.tick``."""

    def decide(self, state: JobState, obs: Observation) -> Action:
        raise NotImplementedError
