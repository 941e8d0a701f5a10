"""Provider events (what the fleet did) and a tail reader for training events files.

Training processes write ``checkpointing.events`` kinds (start, progress, notice,
save_*, restore, interval, exit). Providers add their own, with ``data["origin"] ==
"provider"`` so a consumer never confuses a provider's ``notice_sent`` with the
process' ``notice``:

    launch        a node session was launched; data: zone, region, spot, price_per_hour,
                  reason, relaunch (int)
    notice_sent   the injector delivered a preemption notice; data: zone, deadline_unix,
                  grace_seconds, sources
    preempted     the node is gone after a notice; data: zone, exit_code, last_step,
                  last_checkpoint_step
    relaunch      the stage moves on; data: from_zone, to_zone, spot, reason
    waiting       no zone has spot capacity; data: blocked (list), up (list)
    completed     the stage finished; data: zone, final_step
    failed        a node exited with an error; data: zone, exit_code
    cancelled     the stage was cancelled
    decision      the stage's fleet policy decided (fleet/providers/decisions.py); data:
                  policy (registry name), policy_class, target ("idle", "on-demand" or a
                  zone), spot, market_seconds (since the attempt start), tick,
                  interval_seconds
    moved         the policy moved the running group voluntarily (notice + emergency save,
                  not a preemption); data: from_zone, to_zone, spot
    stats         the statistics exported to the training process changed (market
                  seconds); data: mttp_seconds, restart_seconds, interval_seconds, zone
    terminating   an operator's Terminate: each running node got a preemption notice and is
                  killed if still running after the grace; data: stage, grace_seconds
                  (wall s), nodes
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from checkpointing.events import Event

PROVIDER_EVENT_KINDS = ("launch", "notice_sent", "preempted", "relaunch", "waiting",
                        "completed", "failed", "cancelled", "decision", "moved", "stats",
                        "terminating")


def provider_event(kind: str, node_id: str | None = None, **data: Any) -> Event:
    """Build a provider event (``data["origin"] = "provider"``)."""
    if kind not in PROVIDER_EVENT_KINDS:
        raise ValueError(f"unknown provider event kind {kind!r}; expected one of {PROVIDER_EVENT_KINDS}")
    return Event(kind=kind, time=time.time(), node_id=node_id, data={"origin": "provider", **data})


def is_provider_event(event: Event) -> bool:
    return event.data.get("origin") == "provider"


class EventTail:
    """Reads the complete new lines of a JSONL events file at each ``poll()``."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._offset = 0
        self._partial = b""

    def poll(self) -> list[Event]:
        try:
            with self.path.open("rb") as fh:
                fh.seek(self._offset)
                chunk = fh.read()
        except FileNotFoundError:
            return []
        self._offset += len(chunk)
        data = self._partial + chunk
        lines = data.split(b"\n")
        self._partial = lines.pop()  # incomplete last line (or b"")
        out: list[Event] = []
        for raw in lines:
            raw = raw.strip()
            if not raw:
                continue
            try:
                out.append(Event.from_json(raw.decode("utf-8")))
            except (ValueError, KeyError):
                continue
        return out
