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
* Billing is per second of holding: spot price x spot hours + on-demand price x
  on-demand hours, restart and checkpoint time included; the last tick is billed up
  to completion. On-demand capacity is always there and never preempted.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

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

    def as_dict(self) -> dict:
        return asdict(self)


def horizon_ticks(spec: JobSpec, gap_hours: float) -> int:
    """Ticks a run may last: deadline + work + 1 h (room to finish a missed deadline)."""
    return int(math.ceil((spec.deadline_hours + spec.work_hours + 1.0) / gap_hours))


def simulate(policy: Policy, market: Market, spec: JobSpec, start_tick: int,
             timeline: list[tuple[int, int]] | None = None) -> RunResult:
    """Run ``policy`` on ``market`` for a job starting at ``start_tick``.

    ``timeline``, when given, receives ``(tick, location)`` for every decision taken.
    """
    g = market.gap_hours
    avail = market.available
    changed = market.changed
    any_changed = market.any_changed
    zones = market.zones
    n_z = market.n_zones
    end = start_tick + horizon_ticks(spec, g)
    if start_tick < 0 or end > market.n_ticks:
        raise ValueError(
            f"start_tick={start_tick}: the run needs ticks up to {end} but the market has "
            f"{market.n_ticks}; pick an earlier start (latest: {market.n_ticks - end + start_tick})")
    W, D = spec.work_hours, spec.deadline_hours
    r, C = spec.restart_hours, spec.checkpoint_hours
    notice_saves = spec.notice_saves
    p_od, p_sp = spec.on_demand_price, spec.spot_price

    loc = IDLE
    ov = 0.0  # restart overhead left
    committed = 0.0
    u = 0.0  # uncommitted work
    ck_left = 0.0  # checkpoint in progress: time left
    T = math.inf
    spot_h = od_h = lost = ckpt_h = restart_h = 0.0
    preemptions = launches = 0
    completion = math.inf
    next_decision = start_tick
    watch = None
    watch_one = -1
    state = JobState(tick=start_tick, start_tick=start_tick, elapsed_hours=0.0, spec=spec)

    def obs_at(i: int) -> Observation:
        return Observation(tick=i, gap_hours=g, zones=zones, available=avail[:, i],
                           history=avail[:, : i + 1])

    policy.reset(spec, obs_at(start_tick))
    for i in range(start_tick, end):
        preempted = False
        if loc >= 0 and not avail[loc, i]:
            if ov <= 0.0 and u > 0.0 and notice_saves:
                saved = max(0.0, u - C)
                committed += saved
                lost += u - saved
                ckpt_h += min(u, C)
            else:
                lost += u
            u = ck_left = ov = 0.0
            preemptions += 1
            state.last_preempted_zone = loc
            loc = IDLE
            preempted = True
        if watch is None:
            woken = any_changed[i]
        elif watch_one >= 0:
            woken = changed[watch_one, i]
        else:
            woken = bool(watch) and bool(changed[watch, i].any())
        if preempted or i >= next_decision or woken:
            state.tick = i
            state.elapsed_hours = (i - start_tick) * g
            state.location = loc
            state.committed_hours = committed
            state.uncommitted_hours = u
            state.overhead_left_hours = ov
            state.preemptions = preemptions
            state.just_preempted = preempted
            state.launches = launches
            act: Action = policy.decide(state, obs_at(i))
            tgt = act.target
            if tgt != loc:
                if tgt >= n_z or tgt < ON_DEMAND and tgt != IDLE:
                    raise PolicyError(f"{policy.name}: tick {i}: target {tgt} is not a location")
                if tgt >= 0 and not avail[tgt, i]:
                    raise PolicyError(
                        f"{policy.name}: tick {i}: chose spot in {zones[tgt]}, which has no "
                        "capacity now; a policy may only pick zones with obs.available True")
                if loc != IDLE and u > 0.0 and ov <= 0.0:
                    # save on the old instance before releasing it (overlaps the new launch)
                    if loc == ON_DEMAND:
                        od_h += C
                    else:
                        spot_h += C
                    ckpt_h += C
                    committed += u
                    u = 0.0
                ck_left = 0.0
                loc = tgt
                if tgt != IDLE:
                    ov = r
                    launches += 1
                else:
                    ov = 0.0
            elif tgt >= 0 and not avail[tgt, i]:
                raise PolicyError(f"{policy.name}: tick {i}: spot in {zones[tgt]} is unavailable")
            T = act.checkpoint_interval_hours if act.checkpoint_interval_hours else math.inf
            next_decision = act.recheck_tick if act.recheck_tick is not None else i + 1
            watch = list(act.watch) if act.watch is not None else None
            watch_one = watch[0] if watch is not None and len(watch) == 1 else -1
            if timeline is not None:
                timeline.append((i, loc))
        if loc == IDLE:
            continue
        # advance one tick at ``loc``
        t = g
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
                completion = (i - start_tick) * g + (g - t)
                break
            if u >= T - _EPS and C > 0.0:
                ck_left = C
            elif u >= T - _EPS:
                committed += u
                u = 0.0
        held = g - (t if completion < math.inf else 0.0)
        if loc == ON_DEMAND:
            od_h += held
        else:
            spot_h += held
        if completion < math.inf:
            break
    cost = p_od * od_h + p_sp * spot_h
    return RunResult(
        policy=policy.name, start_tick=start_tick, cost=cost, spot_cost=p_sp * spot_h,
        on_demand_cost=p_od * od_h, spot_hours=spot_h, on_demand_hours=od_h,
        completion_hours=completion, deadline_met=completion <= D + 1e-6,
        preemptions=preemptions, launches=launches, lost_work_hours=lost,
        checkpoint_hours=ckpt_h, restart_hours=restart_h)
