"""Trace-driven, tick-based simulator of one deadline job under a fleet policy.

Model (all times in hours; one tick = the trace's gap):

* The policy picks a location for each tick: idle, on-demand, or spot in an available
  zone. It is asked again at ``Action.recheck_tick``, on its instance's preemption, or
  when availability changes in a zone it watches.
* Every launch pays the restart overhead ``d`` first (billed, no progress).
* While running, every ``checkpoint_interval_hours`` of compute a checkpoint blocks
  training for ``checkpoint_hours`` (billed, no progress); the work is then committed.
* A spot instance is preempted at the first tick its zone is unavailable. Without a
  usable notice the uncommitted work is lost; with a notice window >= the checkpoint
  time an emergency save runs in the notice window: the last ``checkpoint_hours`` of
  compute become the save, nothing else is lost.
* Moving voluntarily (to idle or another location) first saves the uncommitted work on
  the old instance: ``checkpoint_hours`` billed there, overlapping the new launch.
* Billing is per second of holding at the price of the tick: per-tick spot $/h of the
  zone (``Market.spot_price``, else ``JobSpec.spot_price``) and on-demand $/h of the
  region (``Market.on_demand_price``, else ``JobSpec.on_demand_price``), restart and
  checkpoint time included; the last tick is billed up to completion. On-demand
  capacity is always there and never preempted.
* Start inside a tick (``start_offset_hours``): a live attempt starts at any second, the
  market's ticks do not move. The run starts ``start_offset_hours`` into ``start_tick``:
  that first tick is shortened to ``gap - offset``; availability, prices and every later
  tick boundary stay those of the replayed market (the same world). Elapsed and
  completion hours are counted from the run's own start.
* Regions: the checkpoint lives in the region of the job's last launch. Launching spot
  in another region first moves it: egress $ (``checkpoint_gb x $/GB``) and the
  transfer time, added to that launch's overhead (billed), but only when a checkpoint
  exists (some work committed); before that nothing is copied and nothing is billed.
  On-demand runs where the checkpoint is (the region of the last launch) once some work
  is saved; while nothing is saved (never launched, or every launch reclaimed before a
  save) it runs in the cheapest on-demand region, as there is nothing to move: the last
  launch's region when it is one of the cheapest (no later move back), else the first of
  them. Leaving on-demand for spot in another region is a move too once it
  saved work (docs/fleet-policies.md). The policy's ``Observation`` says the same:
  ``checkpoint_region`` is ``None`` while a move would copy nothing, ``on_demand_region``
  is where on-demand would run.
* Observation (``observe="probe"``, default): the policy knows a zone's availability
  only where it holds an instance or tries a launch. A launch in a zone without
  capacity fails: ``probe_seconds`` of wall time pass (no money), the next entry of
  ``Action.fallbacks`` is tried (idle when none is left). ``observe="oracle"`` shows
  the true market (offline checks); there a launch without capacity is a PolicyError
  unless the action lists fallbacks.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from fleet.market.regions import spec_migration
from fleet.policies.base import IDLE, ON_DEMAND, Action, JobSpec, JobState, Observation, Policy
from fleet.simulation.market import Market

_EPS = 1e-9


class PolicyError(RuntimeError):
    """A policy returned an impossible action (e.g. spot in a zone without capacity)."""


@dataclass(frozen=True)
class RunResult:
    """Outcome of one job (hours, $)."""

    policy: str
    start_tick: int
    cost: float
    spot_cost: float
    on_demand_cost: float
    spot_hours: float
    on_demand_hours: float
    completion_hours: float  # inf when the job never finished within the horizon
    deadline_met: bool
    preemptions: int
    launches: int
    lost_work_hours: float  # compute redone (or spent on notice-window saves)
    checkpoint_hours: float  # time spent saving (periodic + voluntary + emergency)
    restart_hours: float  # restart overhead paid
    migrations: int = 0  # cross-region checkpoint moves (work committed), from spot or on-demand
    migration_cost: float = 0.0  # egress $ of those moves (included in ``cost``)
    failed_probes: int = 0  # launch attempts in zones without capacity
    start_offset_hours: float = 0.0  # the run started this far into ``start_tick``

    def as_dict(self) -> dict:
        return asdict(self)


def horizon_ticks(spec: JobSpec, gap_hours: float) -> int:
    """Ticks a run may last: deadline + work + 1 h (room to finish a missed deadline)."""
    return int(math.ceil((spec.deadline_hours + spec.work_hours + 1.0) / gap_hours))


SAVE_EPS_HOURS = 1e-9
"""Work a notice save must keep to count as saved (h): ``u - C`` of a few 1e-17 h is
rounding (e.g. a 0.15 h restart on 0.1 h ticks), and counted as saved it would fix the
on-demand region and bill a move for nothing."""


def region_on_demand_prices(market: Market, spec: JobSpec) -> tuple[np.ndarray, np.ndarray]:
    """(spot $/h per zone and tick, on-demand $/h per region): a region's on-demand price
    is the lowest of its zones' (one list price per region in the data)."""
    sp, od = market.prices_for(spec.spot_price, spec.on_demand_price)
    reg = market.region_index
    od_reg = np.array([od[reg == r].min() for r in range(len(market.region_names))])
    return sp, od_reg


def simulate(policy: Policy, market: Market, spec: JobSpec, start_tick: int,
             timeline: list[tuple[int, int]] | None = None,
             observe: str = "probe", start_offset_hours: float = 0.0,
             horizon_hours: float | None = None) -> RunResult:
    """Run ``policy`` on ``market`` for a job starting at ``start_tick``.

    ``start_offset_hours`` (0 <= offset < one tick): the job starts that far into
    ``start_tick`` (e.g. a live attempt's start between two tick boundaries).

    ``timeline``, when given, receives ``(tick, location)`` for every decision taken.
    ``observe``: ``"probe"`` (what a live controller knows) or ``"oracle"``.
    ``horizon_hours``: stop the run after this many hours from its start even when
    :func:`horizon_ticks` would run longer (None: the full horizon). For jobs without a
    deadline (``JobSpec.deadline_given`` False), whose far horizon (the live driver's 50 x
    the work) outruns every trace: the run stops at the cap, unfinished
    (``completion_hours`` inf), and the cap must fit the market instead of the horizon.
    """
    if observe not in ("probe", "oracle"):
        raise ValueError(f"observe must be 'probe' or 'oracle', got {observe!r}")
    probe = observe == "probe"
    g = market.gap_hours
    off = float(start_offset_hours)
    if not 0.0 <= off < g:
        raise ValueError(
            f"start_offset_hours={start_offset_hours!r} must be in [0, {g:g}) (one tick of the "
            "market); put whole ticks into start_tick")
    avail = market.available
    changed = market.changed
    any_changed = market.any_changed
    zones = market.zones
    n_z = market.n_zones
    end = start_tick + horizon_ticks(spec, g)
    if horizon_hours is not None:
        if not horizon_hours > 0:
            raise ValueError(f"horizon_hours={horizon_hours!r} must be > 0 (or None)")
        end = min(end, start_tick + int(math.ceil(horizon_hours / g)))
    if start_tick < 0 or end > market.n_ticks:
        raise ValueError(
            f"start_tick={start_tick}: the run needs ticks up to {end} but the market has "
            f"{market.n_ticks}; pick an earlier start (latest: {market.n_ticks - end + start_tick})")
    W, D = spec.work_hours, spec.deadline_hours
    r, C = spec.restart_hours, spec.checkpoint_hours
    notice_saves = spec.notice_saves
    sp, od_reg = region_on_demand_prices(market, spec)
    reg = market.region_index
    region_names = market.region_names
    od_zone = od_reg[reg]
    mig = spec_migration(spec, market.clouds[0] if market.clouds else "aws")
    mig_usd, mig_h = (mig.usd, mig.hours) if len(region_names) > 1 else (0.0, 0.0)
    probe_h = spec.probe_seconds / 3600.0
    cheapest_od_region = int(np.argmin(od_reg))
    od_cheapest = od_reg <= od_reg[cheapest_od_region]  # regions tied for the cheapest

    def od_region(saved: bool) -> int:
        """Where on-demand runs: the checkpoint's region once work is saved; with nothing
        saved the cheapest region, the last launch's when it is one of the cheapest."""
        if ck_reg >= 0 and (saved or od_cheapest[ck_reg]):
            return ck_reg
        return cheapest_od_region

    loc = IDLE
    cur_reg = -1  # region of the current location (on-demand included)
    ck_reg = -1  # region of the checkpoint (-1: never launched)
    ov = 0.0  # restart overhead left (billed)
    delay = 0.0  # failed-probe time left (not billed)
    committed = 0.0
    u = 0.0  # uncommitted work
    ck_left = 0.0  # checkpoint in progress: time left
    T = math.inf
    spot_h = od_h = lost = ckpt_h = restart_h = 0.0
    spot_cost = od_cost = mig_cost = 0.0
    preemptions = launches = migrations = failed = 0
    completion = math.inf
    next_decision = start_tick
    watch = None
    watch_one = -1
    state = JobState(tick=start_tick, start_tick=start_tick, elapsed_hours=0.0, spec=spec)

    if probe:
        kh = np.empty((n_z, end), dtype=bool)
        kh[:, :start_tick] = avail[:, :start_tick]
        kstate = avail[:, max(start_tick - 1, 0)].copy() if start_tick > 0 else np.ones(n_z, bool)
        last_seen = np.full(n_z, -1, dtype=np.int64)
        filled = start_tick - 1

    od_zone.flags.writeable = False

    def frozen(a: np.ndarray) -> np.ndarray:
        """A read-only view: a policy cannot change the market or its own record of it."""
        v = a.view()
        v.flags.writeable = False
        return v

    def obs_at(i: int) -> Observation:
        nonlocal filled
        # what a launch elsewhere would copy (and the engine bill): the committed work, or
        # the held instance's uncommitted work, which a move saves first
        saved = committed > 0.0 or (loc != IDLE and u > 0.0 and ov <= 0.0)
        ckr = region_names[ck_reg] if ck_reg >= 0 and saved else None
        odr = region_names[od_region(saved)]
        if probe:
            if loc >= 0:
                last_seen[loc] = i
            if filled < i:
                kh[:, filled + 1:i + 1] = kstate[:, None]
                filled = i
            # prices: a copy of this tick's column (a view's .base would hold every future tick)
            return Observation(tick=i, gap_hours=g, zones=zones, available=kh[:, i].copy(),
                               history=frozen(kh[:, : i + 1]), regions=market.regions,
                               spot_price=frozen(sp[:, i].copy()), on_demand_price=od_zone, probed=True,
                               last_seen_tick=last_seen.copy(), checkpoint_region=ckr,
                               on_demand_region=odr, migration_usd=mig_usd, migration_hours=mig_h)
        # oracle (offline checks only): the true market now; history is a read-only view of it
        return Observation(tick=i, gap_hours=g, zones=zones, available=avail[:, i].copy(),
                           history=frozen(avail[:, : i + 1]), regions=market.regions,
                           spot_price=frozen(sp[:, i].copy()), on_demand_price=od_zone, probed=False,
                           checkpoint_region=ckr, on_demand_region=odr,
                           migration_usd=mig_usd, migration_hours=mig_h)

    def see(z: int, i: int, up: bool) -> None:
        if probe:
            kstate[z] = up
            last_seen[z] = i
            if filled >= i:
                kh[z, i] = up

    policy.reset(spec, obs_at(start_tick))
    for i in range(start_tick, end):
        preempted = False
        if loc >= 0 and not avail[loc, i]:
            if ov <= 0.0 and u > 0.0 and notice_saves:
                saved = u - C if u - C > SAVE_EPS_HOURS else 0.0  # float dust is nothing saved
                committed += saved
                lost += u - saved
                ckpt_h += min(u, C)
            else:
                lost += u
            u = ck_left = ov = 0.0
            preemptions += 1
            state.last_preempted_zone = loc
            if probe and filled < i - 1:
                # the ticks held since the last decision: the job saw its zone up (kstate says
                # so since the launch); recorded before the preemption changes kstate, or the
                # next decision's back-fill would mark them down
                kh[:, filled + 1:i] = kstate[:, None]
                filled = i - 1
            see(loc, i, False)
            loc = IDLE
            preempted = True
        if probe:
            woken = False
        elif watch is None:
            woken = any_changed[i]
        elif watch_one >= 0:
            woken = changed[watch_one, i]
        else:
            woken = bool(watch) and bool(changed[watch, i].any())
        if preempted or i >= next_decision or woken:
            state.tick = i
            state.elapsed_hours = max(0.0, (i - start_tick) * g - off)
            state.location = loc
            state.committed_hours = committed
            state.uncommitted_hours = u
            state.overhead_left_hours = ov
            state.preemptions = preemptions
            state.just_preempted = preempted
            state.launches = launches
            state.migrations = migrations
            state.failed_probes = failed
            act: Action = policy.decide(state, obs_at(i))
            tgt = act.target
            if tgt != loc:
                chosen = IDLE
                delay_before = delay
                delay = 0.0  # a new decision supersedes the tries of the previous one
                for k, c in enumerate((tgt, *act.fallbacks)):
                    if c >= n_z or c < ON_DEMAND and c != IDLE:
                        raise PolicyError(f"{policy.name}: tick {i}: target {c} is not a location")
                    if c == ON_DEMAND and not spec.on_demand_allowed:
                        continue  # ruled out (JobSpec.on_demand_allowed), as the live driver does
                    if c == loc:  # the held instance ran on while the others were tried
                        chosen = c
                        delay = delay_before
                        break
                    if c >= 0 and not avail[c, i]:
                        if not probe and k == 0 and not act.fallbacks:
                            raise PolicyError(
                                f"{policy.name}: tick {i}: chose spot in {zones[c]}, which has no "
                                "capacity now; a policy may only pick zones with obs.available True")
                        if probe:
                            failed += 1
                            delay += probe_h
                            see(c, i, False)
                        continue
                    chosen = c
                    break
                tgt = chosen
            elif tgt >= 0 and not avail[tgt, i]:
                raise PolicyError(f"{policy.name}: tick {i}: spot in {zones[tgt]} is unavailable")
            if tgt != loc:
                if loc != IDLE and u > 0.0 and ov <= 0.0:
                    # save on the old instance before releasing it (overlaps the new launch)
                    if loc == ON_DEMAND:
                        od_h += C
                        od_cost += C * od_reg[cur_reg]
                    else:
                        spot_h += C
                        spot_cost += C * sp[loc, i]
                    ckpt_h += C
                    committed += u
                    u = 0.0
                ck_left = 0.0
                loc = tgt
                if tgt != IDLE:
                    ov = r
                    launches += 1
                    new_reg = int(reg[tgt]) if tgt >= 0 else od_region(committed > 0.0)
                    if ck_reg >= 0 and new_reg != ck_reg and committed > 0.0:  # a checkpoint to copy
                        mig_cost += mig_usd
                        ov += mig_h
                        migrations += 1
                    ck_reg = cur_reg = new_reg
                    if tgt >= 0:
                        see(tgt, i, True)
                else:
                    ov = 0.0
                    delay = 0.0
            T = act.checkpoint_interval_hours if act.checkpoint_interval_hours else math.inf
            if loc == ON_DEMAND:  # never preempted: periodic saves would only cost time
                T = math.inf
            next_decision = act.recheck_tick if act.recheck_tick is not None else i + 1
            watch = list(act.watch) if act.watch is not None else None
            watch_one = watch[0] if watch is not None and len(watch) == 1 else -1
            if timeline is not None:
                timeline.append((i, loc))
        if loc == IDLE:
            continue
        # advance one tick at ``loc``
        t = g - off if i == start_tick else g
        if delay > 0.0:
            a = min(delay, t)
            delay -= a
            t -= a
        t_billed = t
        if ov > 0.0:
            a = min(ov, t)
            ov -= a
            t -= a
            restart_h += a
        while t > _EPS:
            if ck_left > 0.0:
                s = min(ck_left, t)
                ck_left -= s
                t -= s
                ckpt_h += s
                if ck_left <= _EPS:
                    ck_left = 0.0
                    committed += u
                    u = 0.0
                continue
            need = W - committed - u
            s = min(t, need, max(T - u, 0.0))
            u += s
            t -= s
            if committed + u >= W - _EPS:
                completion = (i - start_tick) * g + (g - t) - off
                break
            if u >= T - _EPS and C > 0.0:
                ck_left = C
            elif u >= T - _EPS:
                committed += u
                u = 0.0
        held = t_billed - (t if completion < math.inf else 0.0)
        if loc == ON_DEMAND:
            od_h += held
            od_cost += held * od_reg[cur_reg]
        else:
            spot_h += held
            spot_cost += held * sp[loc, i]
        if completion < math.inf:
            break
    cost = spot_cost + od_cost + mig_cost
    return RunResult(
        policy=policy.name, start_tick=start_tick, cost=cost, spot_cost=spot_cost,
        on_demand_cost=od_cost, spot_hours=spot_h, on_demand_hours=od_h,
        completion_hours=completion, deadline_met=completion <= D + 1e-6,
        preemptions=preemptions, launches=launches, lost_work_hours=lost,
        checkpoint_hours=ckpt_h, restart_hours=restart_h, migrations=migrations,
        migration_cost=mig_cost, failed_probes=failed, start_offset_hours=off)
