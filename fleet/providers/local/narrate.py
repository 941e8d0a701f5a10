"""Human-readable lines for fleet events and a summary of a stage's node sessions.

Used by ``spotfleet local-fleet run`` to show the path notice -> emergency save ->
relaunch in another zone -> exact resume as it happens.

The provider reports events in market seconds (fleet/providers/local/clock.py). A person
watching the demo counts wall seconds, so each line shows both: the wall seconds since
the start and the market hours they stand for; durations (notice window, save time) are
shown in wall seconds with their market equivalent.
"""

from __future__ import annotations

from collections.abc import Sequence

from checkpointing.events import Event
from fleet.contract import session_cost_usd
from fleet.providers.base import NodeSession
from fleet.providers.events import is_provider_event


def _short(node_id: str | None) -> str:
    if not node_id:
        return "-"
    parts = node_id.rsplit("-", 2)
    return "-".join(parts[-2:]) if len(parts) == 3 else node_id


class Narrator:
    """Turns events into one-line messages; remembers each node's zone and last save."""

    def __init__(self, t0: float, progress: bool = True, factor: float = 1.0):
        """``t0``: the market clock's anchor (unix s); ``factor``: market s per wall s."""
        self.t0 = t0
        self.factor = factor if factor > 0 else 1.0
        self.progress = progress
        self.zone_of: dict[str, str] = {}
        self.last_emergency: int | None = None
        self.moving_from: str | None = None  # zone of a group the policy is moving (its
        # next notice is the move's, not a capacity loss)

    def line(self, e: Event) -> str | None:
        d = e.data
        node = e.node_id or ""
        zone = d.get("zone") or self.zone_of.get(node, "")
        if e.kind == "launch" and node:
            self.zone_of[node] = d.get("zone", "")
            zone = self.zone_of[node]
        market_s = e.time - self.t0
        head = f"[{market_s / self.factor:6.1f}s | market {market_s / 3600.0:6.2f} h] {zone:<12} {_short(node):<7}"
        msg = self._message(e, d) if is_provider_event(e) else self._training(e, d)
        return None if msg is None else f"{head} {msg}"

    def _dur(self, market_seconds) -> str:
        """A duration reported in market seconds, as wall seconds (market equivalent)."""
        m = float(market_seconds or 0.0)
        if self.factor == 1.0:
            return f"{m:.2f} s"
        return f"{m / self.factor:.2f} s wall = {m / 60.0:.1f} market min"

    def _message(self, e: Event, d: dict) -> str | None:
        if e.kind == "launch":
            self.moving_from = None
            kind = "spot" if d.get("spot") else "ON-DEMAND"
            return (f"launch ({kind}, {d.get('price_per_hour', 0):.3f} $/h) - {d.get('reason')}")
        if e.kind == "moved":
            self.moving_from = d.get("from_zone")
            kind = "spot" if d.get("spot") else "idle" if d.get("spot") is None else "on-demand"
            return f"MOVE {d.get('from_zone')} -> {d.get('to_zone')} ({kind}): {d.get('reason')}"
        if e.kind == "notice_sent":
            src = ",".join(s.split(":")[0] for s in str(d.get("sources") or "").split(","))
            what = "PREEMPTION NOTICE: zone lost capacity"
            if self.moving_from is not None and d.get("zone") == self.moving_from:
                what = "MOVE NOTICE: the policy moves the group (its zone still has capacity)"
            return f"{what}; delivered via {src}, kill in {self._dur(d.get('grace_seconds'))}"
        if e.kind == "preempted":
            how = (f"exit code {d['exit_code']}" if d.get("exit_code") is not None
                   else f"process reported {d.get('exit_reason')}")
            return (f"node released ({how}); last step {d.get('last_step')}, "
                    f"last checkpoint step {d.get('last_checkpoint_step')}")
        if e.kind == "relaunch":
            kind = "spot" if d.get("spot") else "on-demand"
            return f"RELAUNCH {d.get('from_zone')} -> {d.get('to_zone')} ({kind}): {d.get('reason')}"
        if e.kind == "waiting":
            return f"waiting for spot capacity (up: {d.get('up')}, blocked: {d.get('blocked')})"
        if e.kind == "completed":
            return f"stage COMPLETED at step {d.get('final_step')} after {d.get('preemptions')} preemptions"
        if e.kind == "failed":
            why = f": {d['reason']}" if d.get("reason") else ""
            return f"node FAILED with exit code {d.get('exit_code')}{why}"
        if e.kind == "cancelled":
            return "stage cancelled"
        return None

    def _training(self, e: Event, d: dict) -> str | None:
        if e.kind == "start":
            r = d.get("resumed_from_step")
            if r is None:
                return "training started at step 0"
            exact = (" = the emergency save: exact resume" if r == self.last_emergency
                     else "")
            return f"training RESUMED at step {r}{exact}"
        if e.kind == "notice":
            return f"process got the notice from {d.get('source')}"
        if e.kind == "save_committed":
            kind = d.get("kind")
            if kind == "emergency":
                self.last_emergency = d.get("step")
                return (f"EMERGENCY SAVE committed at step {d.get('step')} "
                        f"({d.get('bytes', 0) / 1e6:.2f} MB, {self._dur(d.get('persist_seconds'))})")
            return f"{kind} checkpoint at step {d.get('step')}"
        if e.kind == "save_failed":
            return f"save FAILED at step {d.get('step')}: {d.get('reason')}"
        if e.kind == "restore":
            fb = " (fell back)" if d.get("fell_back") else ""
            return f"restored checkpoint of step {d.get('step')}{fb}"
        if e.kind == "progress" and self.progress:
            loss = d.get("loss")
            ls = f" loss {loss:.4f}" if isinstance(loss, (int, float)) else ""
            return f"step {d.get('step')}/{d.get('total_steps')}{ls}"
        if e.kind == "exit":
            sha = d.get("state_sha256")
            return (f"process exit: {d.get('reason')} at step {d.get('step')}"
                    + (f", state_sha256={sha[:16]}..." if sha else ""))
        return None


def sessions_table(sessions: Sequence[NodeSession]) -> str:
    """A text table of node sessions (the provider reports them in market seconds)."""
    head = (f"{'node':<8} {'zone':<12} {'kind':<9} {'$/h':>6} {'market s':>9} {'steps':>11} "
            f"{'end':<10} {'cost $':>8}")
    rows = [head, "-" * len(head)]
    for s in sessions:
        held = (s.ended_at or s.launched_at) - s.launched_at
        cost = session_cost_usd(s.price_per_hour, s.launched_at, s.ended_at)
        steps = f"{s.first_step if s.first_step is not None else '?'}->{s.last_step if s.last_step is not None else '?'}"
        rows.append(f"{_short(s.node_id):<8} {s.zone:<12} {'spot' if s.spot else 'on-demand':<9} "
                    f"{s.price_per_hour:>6.3f} {held:>9.1f} {steps:>11} {s.end_reason:<10} {cost:>8.3f}")
    return "\n".join(rows)
