"""What the local fleet tracks about one node process, single-node and elastic alike."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from checkpointing.events import Event
from fleet.providers.events import EventTail


@dataclass(kw_only=True)
class NodeProcess:
    """One emulated node: where it runs, its price, its process and what its events said.

    Times (``launched_at``, ``ready_at``, ``ended_at``, ``notice_at``) are wall-clock unix
    seconds; ``price`` is $/h of the node's market.
    """

    node_id: str
    zone: str
    region: str
    spot: bool
    price: float
    launched_at: float
    log_path: Path
    events_path: Path
    tail: EventTail
    proc: subprocess.Popen | None = None
    ready_at: float | None = None
    ended_at: float | None = None
    notice_at: float | None = None
    exit_code: int | None = None
    first_step: int | None = None
    last_step: int | None = None
    last_checkpoint_step: int | None = None
    exit_event: Event | None = None
