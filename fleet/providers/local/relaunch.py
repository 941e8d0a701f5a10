"""Where to (re)launch a stage after a preemption: next zone, blocked zones, on-demand.

A small, pure decision rule the providers call between node sessions:

* never relaunch in a zone that was just preempted: it is blocked for
  ``block_seconds`` of market time (real seconds on SkyPilot; emulated trace seconds
  on the local fleet, which converts them with its time scale);
* otherwise take the first candidate zone with spot capacity, in preference order,
  starting after the zone that was lost (rotation);
* fall back to on-demand when the deadline demands it: the time left is smaller than
  the remaining work plus ``safety_restarts`` restarts (the playbook's "on-demand
  when the slack is gone" rule, the same rule as Uniform Progress' last resort), or
  when no spot capacity was found for ``on_demand_after_wait_seconds``.

Fleet policies in fleet/policies can replace this object: anything with the same
``choose(ctx) -> Launch | None`` method works.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Launch:
    """A decision: launch the node group in ``zone``, spot or on-demand, and why."""

    zone: str
    spot: bool
    reason: str


@dataclass
class RelaunchContext:
    """What the provider knows when it must place the node group. Seconds are wall seconds."""

    zones: list[str]  # candidate zones, preference order
    up_zones: list[str]  # zones with spot capacity now
    now: float  # unix seconds
    started_at: float  # unix seconds, attempt start
    previous_zone: str | None = None
    blocked_until: dict[str, float] = field(default_factory=dict)  # zone -> unix seconds
    deadline_seconds: float | None = None  # from started_at
    remaining_work_seconds: float | None = None  # estimate, None before any progress
    restart_seconds: float = 0.0  # estimate of one relaunch (allocation + start + restore)
    waiting_since: float | None = None  # when we started waiting for capacity
    on_demand_zone: str | None = None
    committed_fraction: float = 0.0  # share of the job's steps in the latest checkpoint
    preemptions: int = 0  # so far in this attempt
    launches: int = 0  # node-group launches so far in this attempt


@dataclass(frozen=True)
class RelaunchPolicy:
    """Rotate to another zone with capacity; block the preempted zone; on-demand on need."""

    block_seconds: float = 1800.0  # market clock: emulated seconds on the local fleet
    on_demand_fallback: bool = True
    safety_restarts: float = 2.0
    on_demand_after_wait_seconds: float | None = None

    def deadline_needs_on_demand(self, ctx: RelaunchContext) -> bool:
        if ctx.deadline_seconds is None or ctx.remaining_work_seconds is None:
            return False
        left = ctx.deadline_seconds - (ctx.now - ctx.started_at)
        return left < ctx.remaining_work_seconds + self.safety_restarts * ctx.restart_seconds

    def choose(self, ctx: RelaunchContext) -> Launch | None:
        """The next launch, or None to wait for capacity."""
        od_zone = ctx.on_demand_zone or (ctx.zones[0] if ctx.zones else None)
        if self.on_demand_fallback and od_zone and self.deadline_needs_on_demand(ctx):
            return Launch(od_zone, spot=False, reason="deadline: the slack left no longer "
                          "covers more spot restarts, so the rest runs on-demand")
        order = list(ctx.zones)
        if ctx.previous_zone in order:
            i = order.index(ctx.previous_zone)
            order = order[i + 1:] + order[: i + 1]
        for zone in order:
            if zone in ctx.up_zones and ctx.blocked_until.get(zone, 0.0) <= ctx.now:
                why = ("first zone with spot capacity" if ctx.previous_zone is None else
                       f"{ctx.previous_zone} was preempted and is blocked; {zone} has capacity")
                return Launch(zone, spot=True, reason=why)
        if (self.on_demand_fallback and od_zone and self.on_demand_after_wait_seconds is not None
                and ctx.waiting_since is not None
                and ctx.now - ctx.waiting_since >= self.on_demand_after_wait_seconds):
            return Launch(od_zone, spot=False, reason=f"no spot capacity for "
                          f"{ctx.now - ctx.waiting_since:.1f} s; falling back to on-demand")
        return None
