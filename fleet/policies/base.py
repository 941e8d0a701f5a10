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


NO_DEADLINE_FACTOR = 50.0
"""A job without a deadline of its own gets this many times its work as a far horizon
(``JobSpec.deadline_hours`` with ``deadline_given=False``): the live driver's
``PolicyDriver.no_deadline_factor`` and the simulator's ``fleet.simulation.no_deadline``."""


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
        on_demand_price: $/h of one on-demand instance (fallback when the market has
            no per-zone on-demand prices).
        spot_price: $/h of a spot instance (fallback when the market has no per-tick
            spot prices).
        checkpoint_gb: size of one checkpoint (GB); moving the job to another region
            moves it: ``checkpoint_gb x egress $/GB`` plus the transfer time.
        egress_usd_per_gb: inter-region egress price ($/GB); ``None`` = the cloud's
            default (:data:`fleet.market.regions.EGRESS_USD_PER_GB`).
        transfer_seconds: time to copy the checkpoint to another region (s), added to
            the launch there (billed); ``None`` = size at the default bandwidth,
            rounded up to whole minutes (:func:`fleet.market.regions.migration_for`).
        probe_seconds: time one failed launch attempt costs before the next one (s).
        deadline_given: False when the job has no deadline of its own and
            ``deadline_hours`` is only a far horizon (the live driver's
            ``no_deadline_factor`` x the work, so that the safety net stays away): the
            slack is then not a budget worth spending on waiting, and a policy that idles
            must bound the wait itself (spotfleet: :meth:`SpotfleetPolicy.waiting_pays`).
        on_demand_allowed: False when the operator ruled on-demand out (a pipeline's
            ``on_demand_fallback: false``): the simulator and the live driver never launch
            an on-demand instance for the job (a policy's ``ON_DEMAND`` target or fallback
            is skipped, the job idles instead), so nothing guarantees a deadline; spotfleet
            then compares spot zones only with each other.
    """

    work_hours: float
    deadline_hours: float
    restart_hours: float = 0.1
    checkpoint_hours: float = 1.0 / 60.0
    notice_seconds: float = 0.0
    on_demand_price: float = 3.06
    spot_price: float = 0.918
    checkpoint_gb: float = 0.0
    egress_usd_per_gb: float | None = None
    transfer_seconds: float | None = None
    probe_seconds: float = 60.0
    deadline_given: bool = True
    on_demand_allowed: bool = True

    def __post_init__(self) -> None:
        checks = {
            "work_hours": self.work_hours > 0,
            "deadline_hours": self.deadline_hours >= self.work_hours,
            "restart_hours": self.restart_hours >= 0,
            "checkpoint_hours": self.checkpoint_hours >= 0,
            "notice_seconds": self.notice_seconds >= 0,
            "on_demand_price": self.on_demand_price > 0,
            "spot_price": self.spot_price > 0,
            "checkpoint_gb": self.checkpoint_gb >= 0,
            "egress_usd_per_gb": self.egress_usd_per_gb is None or self.egress_usd_per_gb >= 0,
            "transfer_seconds": self.transfer_seconds is None or self.transfer_seconds >= 0,
            "probe_seconds": self.probe_seconds >= 0,
        }
        for name, ok in checks.items():
            value = getattr(self, name)
            if not (ok and (value is None or math.isfinite(value))):
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
    migrations: int = 0
    failed_probes: int = 0

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
    """What the job's controller knows at the current tick; nothing after it.

    Two modes (``probed``):

    * ``probed=True`` (the simulator's default, and what a live controller has): a zone's
      availability is known only where the job holds an instance, or where it tried a
      launch. ``history`` is the availability matrix (zones x ticks) up to now: the
      market's past **before the job started** (the statistics a live system has), then,
      from the job's start on, the last *observed* state of each zone carried forward
      (a zone never observed since the start keeps its state at the start).
      ``available = history[:, -1]`` is therefore a belief: picking a zone it marks up
      may fail (a failed probe: ``JobSpec.probe_seconds`` lost, no money), and a zone
      it marks down may have come back. ``last_seen_tick[z]`` is the tick of the last
      observation of ``z`` by this job (-1: none since the start).
    * ``probed=False`` (oracle, for offline checks only): ``available`` and ``history``
      are the true market.

    Prices are public (a price API / catalog), so ``spot_price[z]`` ($/h now) and
    ``on_demand_price[z]`` ($/h, on-demand in ``z``'s region) are known everywhere;
    ``None`` means the job's flat ``JobSpec`` prices. ``regions[z]`` is zone ``z``'s
    region; ``checkpoint_region`` the region a launch elsewhere would copy the job's saved
    work from, i.e. the region of the last launch once some work is committed there, or
    once a move would first save the held instance's uncommitted work (``None``: nothing
    to copy -- never launched, or nothing saved yet; such a move is free, as the simulator
    bills it); moving it to another region costs ``migration_usd`` and
    ``migration_hours`` (added to that launch). ``on_demand_region``: where ``ON_DEMAND``
    would run now (the checkpoint's region once something is saved; with nothing saved the
    cheapest on-demand region, the last launch's on a tie; ``None``: not known, use the
    cheapest on-demand price).
    """

    tick: int
    gap_hours: float
    zones: tuple[str, ...]
    available: np.ndarray  # bool, shape (Z,)
    history: np.ndarray  # bool, shape (Z, tick + 1)
    regions: tuple[str, ...] = ()
    spot_price: np.ndarray | None = None  # $/h per zone now
    on_demand_price: np.ndarray | None = None  # $/h per zone
    probed: bool = False
    last_seen_tick: np.ndarray | None = None  # int, shape (Z,)
    checkpoint_region: str | None = None
    on_demand_region: str | None = None
    migration_usd: float = 0.0
    migration_hours: float = 0.0

    @property
    def n_zones(self) -> int:
        return len(self.zones)

    def spot_prices(self, spec: JobSpec) -> np.ndarray:
        """Spot $/h per zone now (the spec's flat price when the market has none)."""
        if self.spot_price is None:
            return np.full(self.n_zones, spec.spot_price)
        return np.asarray(self.spot_price, dtype=float)

    def on_demand_prices(self, spec: JobSpec) -> np.ndarray:
        """On-demand $/h per zone (the spec's flat price when the market has none)."""
        if self.on_demand_price is None:
            return np.full(self.n_zones, spec.on_demand_price)
        return np.asarray(self.on_demand_price, dtype=float)

    def region_of(self, z: int) -> str:
        return self.regions[z] if self.regions else ""

    def moves_region(self, z: int) -> bool:
        """True when launching in zone ``z`` moves the checkpoint to another region (a
        billed move: some work is saved, see ``checkpoint_region``)."""
        return (self.checkpoint_region is not None and bool(self.regions)
                and self.regions[z] != self.checkpoint_region)


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
            (With probed observations only the held zone's changes can be seen.)
        fallbacks: where to go, in order, when launching spot in ``target`` fails (no
            capacity there now): further zones to try, and optionally ``ON_DEMAND`` or
            ``IDLE`` last (default: idle). Each failed try costs ``probe_seconds``.
    """

    target: int
    checkpoint_interval_hours: float | None = None
    recheck_tick: int | None = None
    watch: tuple[int, ...] | None = field(default=None)
    fallbacks: tuple[int, ...] = ()


class Policy:
    """Base class of fleet policies. Subclasses implement :meth:`decide`.

    A policy is online: it may use only ``state`` and ``obs`` (the past and present).
    :meth:`reset` is called once per job before the first decision.
    """

    name: str = "policy"

    def describe(self) -> str:
        """What runs, for logs and run metadata: the policy's name, and its version where it
        has one (``"spotfleet v11"``)."""
        return self.name

    def reset(self, spec: JobSpec, obs: Observation) -> None:  # noqa: B027 - optional hook
        """Prepare for a new job starting at ``obs.tick``."""

    def decide(self, state: JobState, obs: Observation) -> Action:
        raise NotImplementedError
