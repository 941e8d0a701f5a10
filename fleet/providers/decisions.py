"""Live fleet decisions: the policy ``fleet-sim`` evaluates, driven by a provider.

Both providers (local emulated fleet, SkyPilot) place and move a stage's node group
through :class:`PolicyDriver`, which wraps ONE registered fleet policy
(:mod:`fleet.policies.registry`) and feeds it the same ``JobState`` / ``Observation``
interface the simulator (:mod:`fleet.simulation.engine`) feeds it — built only from
what a live controller knows at decision time:

* the clock (market seconds since the attempt started) and the deadline;
* the job's progress the training process reported (committed / uncommitted steps);
* per-zone availability as the provider OBSERVED it (:class:`ObservedMarket`, the
  simulator's ``observe="probe"`` semantics, ``Observation.probed``): a prior history
  (the market's past up to the attempt start: what the statistics DB holds), then only
  what the provider saw since -- the zone it holds a node in, the launches it tried
  (a launch is a probe: ``Action.target`` then ``Action.fallbacks`` in order), the
  zone it was preempted in. Unobserved ticks carry the last observed state forward;
  nothing after "now" exists in it;
* the priors of the run contract (:class:`fleet.contract.RunPriors`: R, checkpoint
  time, notice window, prices); R refined by the starts the provider measured
  (``PolicyDriver.restart_seconds``), so that a relaunch costs the policy what it costs
  the fleet.

All durations here are MARKET seconds (real on SkyPilot, emulated on the local fleet,
which converts its compressed wall clock before calling in).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fleet.contract import RunPriors
from fleet.market.config import DEFAULT_ON_DEMAND_PRICE, DEFAULT_SPOT_PRICE
from fleet.policies.base import (
    IDLE,
    NO_DEADLINE_FACTOR,
    ON_DEMAND,
    Action,
    JobSpec,
    JobState,
    Observation,
    Policy,
)
from fleet.policies.registry import get_policy

#: assumed spot / on-demand $/h when the priors carry no prices: the market section's
#: defaults (p3.2xlarge, V100; fleet/market/config.py) -- only for a V100 stage (or a driver
#: that does not say its accelerator); any other accelerator without prices is an error,
#: never silently priced as a V100
FALLBACK_SPOT_PRICE = DEFAULT_SPOT_PRICE
FALLBACK_ON_DEMAND_PRICE = DEFAULT_ON_DEMAND_PRICE
FALLBACK_PRICE_ACCELERATOR = "V100"


def missing_price_error(accelerator: str, what: str) -> ValueError:
    return ValueError(
        f"no {what} price for accelerator {accelerator}: the plan carried none (the SkyPilot "
        f"catalog in use has no entry for it) and the built-in fallback prices are for "
        f"{FALLBACK_PRICE_ACCELERATOR} (p3.2xlarge) only; add a catalog with {accelerator} "
        f"($SPOTFLEET_CATALOG_DIR) or set resources.instance_type and prices for it in the "
        "pipeline YAML")


@dataclass(frozen=True)
class Launch:
    """A decision: run the node group in ``zone``, spot or on-demand, and why."""

    zone: str
    spot: bool
    reason: str
    policy: str = ""


@dataclass(frozen=True)
class Decision:
    """What the policy wants now, in provider terms (market seconds since attempt start).

    ``tries``: where to launch, in order (the policy's target, then its fallbacks); a
    spot zone without capacity is a failed probe and the next entry is tried; ``None``
    (idle) ends the list. ``recheck_at``: when the policy next wants to be asked unless
    its node group is preempted. ``interval_seconds``: the policy's checkpoint interval
    at the target (None: none).
    """

    tries: tuple[Launch | None, ...]
    recheck_at: float
    interval_seconds: float | None
    tick: int
    target: int  # the policy's location int (IDLE, ON_DEMAND or a zone index)

    @property
    def launch(self) -> Launch | None:
        """The first choice (None: idle)."""
        return self.tries[0] if self.tries else None


class ObservedMarket:
    """Per-zone availability as a live controller knows it, on a tick grid.

    ``prior`` (zones x ticks, bool) is the market's past before the attempt (may be
    empty: then every zone is assumed up); tick ``prior.shape[1]`` starts at market
    second 0 of the attempt. ``observe`` records what the provider saw at a time;
    unobserved ticks carry the last known state forward (``Observation.probed``).
    """

    def __init__(self, zones: Sequence[str], gap_seconds: float, prior: np.ndarray | None = None):
        if not gap_seconds > 0:
            raise ValueError(f"ObservedMarket gap_seconds={gap_seconds!r} must be > 0")
        self.zones = tuple(zones)
        self.gap_seconds = float(gap_seconds)
        z = len(self.zones)
        if prior is None or np.asarray(prior).size == 0:
            prior = np.ones((z, 1), dtype=bool)  # nothing known: every zone assumed up
        prior = np.asarray(prior, dtype=bool)
        if prior.shape[0] != z:
            raise ValueError(f"prior history has {prior.shape[0]} zones, expected {z}")
        self.start_tick = prior.shape[1]
        self._hist = [prior[:, i].copy() for i in range(prior.shape[1])]
        self._state = prior[:, -1].copy()
        self.last_seen = np.full(z, -1, dtype=np.int64)

    def tick_at(self, t: float) -> int:
        """Absolute tick of market second ``t`` of the attempt."""
        return self.start_tick + int(max(0.0, t) // self.gap_seconds)

    def _extend_to(self, tick: int) -> None:
        while len(self._hist) <= tick:
            self._hist.append(self._state.copy())

    def observe(self, t: float, up: Mapping[str, bool]) -> None:
        """The provider saw ``up[zone]`` at market second ``t`` (only the zones given)."""
        tick = self.tick_at(t)
        self._extend_to(tick)
        for zn, ok in up.items():
            if zn in self.zones:
                i = self.zones.index(zn)
                self._state[i] = bool(ok)
                self._hist[tick][i] = bool(ok)
                self.last_seen[i] = tick

    def history(self, t: float) -> np.ndarray:
        """The belief matrix (zones x ticks) up to and including market second ``t``."""
        tick = self.tick_at(t)
        self._extend_to(tick)
        return np.stack(self._hist[: tick + 1], axis=1)


@dataclass
class Progress:
    """The job's progress as the training process reported it (steps; market seconds
    per step when measured)."""

    total_steps: int | None = None
    step: int = 0
    committed_step: int = 0
    step_seconds: float | None = None

    def fractions(self) -> tuple[float, float]:
        """(committed, uncommitted) shares of the job's work."""
        if not self.total_steps:
            return 0.0, 0.0
        c = min(1.0, self.committed_step / self.total_steps)
        u = min(1.0 - c, max(0, self.step - self.committed_step) / self.total_steps)
        return c, u


def progress_from_checkpoints(checkpoints: Sequence[Any],
                              seconds_per_market_second: float = 1.0) -> Progress:
    """The job's progress as a controller that sees only the checkpoint store knows it.

    ``checkpoints``: committed checkpoints of the job's prefix (``CheckpointInfo`` of
    ``checkpointing.manifest.list_checkpoints``). The newest one's step is the committed
    (and the only known) step; its manifest's ``meta["progress"]`` (written by
    ``TrainingSession``) carries the loop's ``total_steps`` and ``mean_step_seconds``
    (the training process's clock; divided by ``seconds_per_market_second``). Work done
    since that checkpoint is invisible from the store: ``step`` = ``committed_step``.
    """
    if not checkpoints:
        return Progress()
    last = max(checkpoints, key=lambda c: (c.step, c.created))
    prog = (last.meta or {}).get("progress") or {}
    total = prog.get("total_steps")
    step_s = prog.get("mean_step_seconds")
    total = int(total) if isinstance(total, int | float) and total > 0 else None
    step_s = (float(step_s) / seconds_per_market_second
              if isinstance(step_s, int | float) and math.isfinite(step_s) and step_s > 0 else None)
    return Progress(total_steps=total, step=int(last.step), committed_step=int(last.step),
                    step_seconds=step_s)


def region_of_zone(zone: str) -> str:
    """AWS/GCP-style region of a zone name (``us-east-1a`` -> ``us-east-1``,
    ``us-central1-b`` -> ``us-central1``)."""
    if "-" in zone and len(zone.rsplit("-", 1)[1]) == 1:
        return zone.rsplit("-", 1)[0]  # GCP: region-x
    return zone[:-1] if zone and zone[-1].isalpha() else zone


@dataclass
class PolicyDriver:
    """One registered policy deciding one stage attempt live (see the module docstring).

    ``policy`` is a registry name or a policy object. ``deadline_seconds`` None: no
    deadline; the job spec then gets ``no_deadline_factor`` x the work (the safety net
    stays out of the way: without a deadline nothing forces on-demand) and
    ``deadline_given=False``, so that the policy does not treat that horizon as slack to
    wait out (a policy idles only while the wait pays for itself). Locations: a zone name (spot there), ``"on-demand"``, or None
    (idle / nothing running).
    """

    policy: Policy | str | None
    zones: Sequence[str]
    priors: RunPriors = field(default_factory=RunPriors)
    deadline_seconds: float | None = None
    gap_seconds: float = 300.0
    prior_history: np.ndarray | None = None
    #: where ON_DEMAND launches when the operator chose (always used); None: the
    #: simulator's rule, see :meth:`on_demand_zone_now`
    on_demand_zone: str | None = None
    regions: Sequence[str] | None = None
    #: on-demand $/h per zone (a region name as key covers its zones); a zone not listed
    #: (or None) costs the priors' one flat on-demand price, so that all regions tie
    on_demand_prices: Mapping[str, float] | None = None
    no_deadline_factor: float = NO_DEADLINE_FACTOR
    #: the stage's accelerator; None = not said (the V100 fallback prices may apply)
    accelerator: str | None = None
    #: R (market s) the provider measured so far (its launch -> ready times, refined from
    #: the priors: ``AttemptRecord.restart_estimate``), set before each ``decide``; None:
    #: ``priors.restart_seconds``. What the policy plans a relaunch with (``JobSpec.restart_hours``)
    restart_seconds: float | None = None
    #: False (a pipeline's ``on_demand_fallback: false``): no on-demand launch is made,
    #: whatever the policy wants (``JobSpec.on_demand_allowed``): the job idles instead
    on_demand_allowed: bool = True
    market: ObservedMarket = field(init=False)

    def __post_init__(self) -> None:
        if not isinstance(self.policy, Policy):
            self.policy = get_policy(self.policy)
        self.zones = list(self.zones)
        if not self.zones:
            raise ValueError("PolicyDriver needs at least one candidate zone")
        self.regions = tuple(self.regions or [region_of_zone(z) for z in self.zones])
        self.market = ObservedMarket(self.zones, self.gap_seconds, self.prior_history)
        self._reset = False
        self._last_preempted = -1
        self._preemptions = 0
        self._launches = 0
        self._failed_probes = 0
        self._just_preempted = False
        self._checkpoint_region: str | None = None  # region of the last launch (None: none)
        self._last_launch_zone: str | None = None

    @property
    def name(self) -> str:
        p = self.policy
        return getattr(p, "registry_name", None) or getattr(p, "name", type(p).__name__)

    # -- the job as the policy sees it -----------------------------------------------------
    def job_spec(self, progress: Progress) -> JobSpec:
        """Work, deadline, R, checkpoint time, notice and prices in hours / $/h."""
        pr = self.priors
        restart_s = self.restart_now()
        work = pr.work_seconds
        if progress.total_steps and progress.step_seconds:
            work = progress.total_steps * progress.step_seconds  # measured beats planned
        work_h = max((work or 3600.0) / 3600.0, 1e-6)
        if self.deadline_seconds is not None:
            deadline_h = max(self.deadline_seconds / 3600.0, work_h)
        else:
            deadline_h = self.no_deadline_factor * work_h + restart_s / 3600.0
        spot = [v for v in pr.spot_price_per_hour.values() if v > 0]
        foreign = self.accelerator is not None and self.accelerator.upper() != FALLBACK_PRICE_ACCELERATOR
        if foreign and not spot:
            raise missing_price_error(self.accelerator, "spot")
        if foreign and not pr.on_demand_price_per_hour:
            raise missing_price_error(self.accelerator, "on-demand")
        return JobSpec(work_hours=work_h, deadline_hours=deadline_h,
                       restart_hours=restart_s / 3600.0,
                       checkpoint_hours=pr.checkpoint_seconds_or_default / 3600.0,
                       notice_seconds=pr.notice_seconds,
                       on_demand_price=pr.on_demand_price_per_hour or FALLBACK_ON_DEMAND_PRICE,
                       spot_price=min(spot) if spot else FALLBACK_SPOT_PRICE,
                       deadline_given=self.deadline_seconds is not None,
                       on_demand_allowed=self.on_demand_allowed)

    def restart_now(self) -> float:
        """R (market s) the policy is told now: :attr:`restart_seconds` when the provider
        set it (finite, >= 0), else the priors'."""
        r = self.restart_seconds
        if r is not None and math.isfinite(r) and r >= 0:
            return float(r)
        return self.priors.restart_seconds

    def observation(self, t: float, spec: JobSpec, saved: bool = True) -> Observation:
        """What the policy sees at market second ``t``: the past and the observed now.

        ``saved``: the job has work a move would carry (a committed checkpoint, or
        uncommitted progress on the held node group, which a move saves first). Without
        it ``checkpoint_region`` is None, as in the simulator: a launch elsewhere copies
        nothing. The live stage moves nothing itself (every node reads and writes the one
        store of ``spec.checkpoint_uri``, and no egress is priced here: ``migration_usd``
        and ``migration_hours`` stay 0), so the region only keeps the policy's view the
        simulator's. ``on_demand_region``: the region of the zone an ``ON_DEMAND`` launch
        would use now (:meth:`on_demand_zone_now`)."""
        hist = self.market.history(t)
        pr = self.priors
        spot = (np.array([pr.spot_price_per_hour.get(z, spec.spot_price) for z in self.zones])
                if pr.spot_price_per_hour else None)
        od_reg = self._od_region_prices()
        od = np.array([od_reg[r] for r in self.regions]) if self.on_demand_prices else None
        return Observation(tick=hist.shape[1] - 1, gap_hours=self.gap_seconds / 3600.0,
                           zones=tuple(self.zones), available=hist[:, -1].copy(), history=hist,
                           regions=tuple(self.regions), spot_price=spot, on_demand_price=od,
                           probed=True,
                           last_seen_tick=self.market.last_seen.copy(),
                           checkpoint_region=self._checkpoint_region if saved else None,
                           on_demand_region=self._region(self.on_demand_zone_now(saved)))

    def region(self, zone: str) -> str:
        """The region of ``zone`` (a candidate zone's as given in ``regions``)."""
        return self._region(zone)

    def _region(self, zone: str) -> str:
        return self.regions[self.zones.index(zone)] if zone in self.zones else region_of_zone(zone)

    def _od_region_prices(self) -> dict[str, float]:
        """On-demand $/h per region of the candidate zones: the lowest of its zones' (as
        the simulator's ``region_on_demand_prices``)."""
        flat = self.priors.on_demand_price_per_hour or FALLBACK_ON_DEMAND_PRICE
        given = self.on_demand_prices or {}
        out: dict[str, float] = {}
        for z, r in zip(self.zones, self.regions, strict=True):
            p = float(given.get(z, given.get(r, flat)))
            out[r] = min(out.get(r, p), p)
        return out

    def on_demand_zone_now(self, saved: bool) -> str:
        """The zone an ``ON_DEMAND`` launch uses now (``saved``: as in :meth:`observation`).

        A configured ``on_demand_zone`` always. Otherwise the simulator's rule
        (fleet/simulation/engine.py): once work is saved, the checkpoint's region (the
        last launch's); while nothing is saved, the cheapest on-demand region, the last
        launch's when it is one of the cheapest (no move back later), else the first
        cheapest in zone order. With one flat on-demand price (no ``on_demand_prices``)
        every region ties: the last launch's region, else the first zone's. Within the
        region: the last launch's zone when it lies there, else its first candidate zone.
        """
        if self.on_demand_zone:
            return self.on_demand_zone
        od = self._od_region_prices()
        best = min(od.values())
        ck = self._checkpoint_region
        if ck is not None and (saved or od.get(ck, math.inf) <= best):
            region = ck
        else:
            region = next(r for r in self.regions if od[r] <= best)
        last = self._last_launch_zone
        if last is not None and self._region(last) == region:
            return last
        return self._first_zone_of(region)

    def _loc(self, location: str | None) -> int:
        if location is None:
            return IDLE
        if location == "on-demand":
            return ON_DEMAND
        return self.zones.index(location) if location in self.zones else IDLE

    # -- what the provider saw ---------------------------------------------------------------
    def observe(self, t: float, up: Mapping[str, bool]) -> None:
        self.market.observe(t, up)

    def preempted(self, t: float, zone: str) -> None:
        """The node group in ``zone`` was preempted at ``t``: the zone is down now."""
        self.market.observe(t, {zone: False})
        self._preemptions += 1
        self._last_preempted = self._loc(zone)
        self._just_preempted = True

    # -- the decision ----------------------------------------------------------------------
    def decide(self, t: float, progress: Progress, location: str | None = None) -> Decision:
        """Ask the policy at market second ``t`` of the attempt."""
        spec = self.job_spec(progress)
        if location is not None and location != "on-demand":
            self.market.observe(t, {location: True})  # the held zone is seen up
        c, u = progress.fractions()
        saved = c > 0.0 or (location is not None and u > 0.0)
        obs = self.observation(t, spec, saved=saved)
        if not self._reset:
            self.policy.reset(spec, obs)
            self._reset = True
        state = JobState(
            tick=obs.tick, start_tick=self.market.start_tick, elapsed_hours=t / 3600.0, spec=spec,
            location=self._loc(location), committed_hours=c * spec.work_hours,
            uncommitted_hours=u * spec.work_hours, preemptions=self._preemptions,
            last_preempted_zone=self._last_preempted, just_preempted=self._just_preempted,
            launches=self._launches, failed_probes=self._failed_probes)
        self._just_preempted = False
        act: Action = self.policy.decide(state, obs)
        gap = self.market.gap_seconds
        recheck = act.recheck_tick if act.recheck_tick is not None else obs.tick + 1
        recheck_at = (recheck - self.market.start_tick) * gap
        interval = (act.checkpoint_interval_hours * 3600.0
                    if act.checkpoint_interval_hours and math.isfinite(act.checkpoint_interval_hours)
                    else None)
        tries: list[Launch | None] = []
        for c_ in (act.target, *act.fallbacks):
            if c_ == ON_DEMAND and not self.on_demand_allowed:
                continue  # ruled out by the operator: the simulator skips it too
            lau = self._as_launch(c_, state, saved)
            tries.append(lau)
            if lau is None:
                break
        d = Decision(tries=tuple(tries), recheck_at=max(recheck_at, t), interval_seconds=interval,
                     tick=obs.tick, target=act.target)
        return d

    def _as_launch(self, target: int, state: JobState, saved: bool) -> Launch | None:
        name = self.name
        if target == ON_DEMAND:  # where the observation's on_demand_region said
            return Launch(self.on_demand_zone_now(saved), spot=False, policy=name,
                          reason=f"policy {name}: on-demand (slack {state.slack_hours:.2f} h, "
                                 f"deadline {state.spec.deadline_hours:.2f} h)")
        if not 0 <= target < len(self.zones):
            return None
        zone = self.zones[target]
        return Launch(zone, spot=True, policy=name, reason=f"policy {name}: spot in {zone}")

    def try_launch(self, t: float, decision: Decision, has_capacity: Callable[[str], bool],
                   location: str | None = None) -> tuple[Launch | None, int]:
        """Try ``decision.tries`` in order, as the simulator does: a spot zone is a probe
        (``has_capacity(zone)``, recorded as an observation); the first that works, or
        on-demand, is the launch; idle (None) ends it. The held location counts as
        working. Returns (launch or None, failed probes)."""
        failed = 0
        for lau in decision.tries:
            if lau is None:
                break
            here = (lau.zone if lau.spot else "on-demand") == (location or "")
            if here:
                return lau, failed
            if lau.spot:
                ok = bool(has_capacity(lau.zone))
                self.market.observe(t, {lau.zone: ok})
                if not ok:
                    failed += 1
                    self._failed_probes += 1
                    continue
            self._record_launch(lau.zone)
            return lau, failed
        return None, failed

    def _record_launch(self, zone: str) -> None:
        self._launches += 1
        # the region of the last launch: the checkpoint's once the job saved (the
        # observation hides it before, see :meth:`observation`)
        self._checkpoint_region = self._region(zone)
        self._last_launch_zone = zone

    def launched(self, t: float, zone: str, spot: bool) -> bool:
        """The node group was launched in ``zone`` at market second ``t`` by someone else
        than :meth:`try_launch` (SkyPilot places a managed job itself among the zones it was
        given; the provider reports the zone once the job runs there). Records what
        ``try_launch`` records for a launch -- the launch count, the last launch's zone and
        region (the checkpoint's once work is saved: where :meth:`on_demand_zone_now` puts
        on-demand) and, for spot, the zone seen up -- so that the policy's view stays the
        simulator's. A zone outside the candidate zones' regions is not recorded (the rule
        has no zone to run on-demand in there); returns whether it was."""
        region = self._region(zone)
        if region not in self.regions:
            return False
        if spot and zone in self.zones:
            self.market.observe(t, {zone: True})
        self._record_launch(zone)
        return True

    def _first_zone_of(self, region: str) -> str:
        return next(z for z, r in zip(self.zones, self.regions, strict=True) if r == region)
