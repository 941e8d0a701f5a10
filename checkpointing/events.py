"""Events the training process reports (notices, saves, resumes, progress).

The training side never talks to Dagster directly: it appends one JSON object per
line to the file named by ``SPOTFLEET_EVENTS_FILE`` (and/or calls in-process
callbacks). The fleet provider and the Dagster Pipes bridge tail that file.

Event kinds (``Event.kind``) — the contract between checkpointing/ and fleet/:
    ``start``            process started; data: node_id, zone, resumed_from_step (or None)
    ``progress``         every N steps; data: step, total_steps, mean_step_seconds, loss
    ``notice``           a preemption notice arrived; data: source (signal|aws|gcp|azure),
                         deadline_unix (float, seconds) or None
    ``save_started``     data: step, kind (periodic|insurance|emergency)
    ``save_committed``   data: step, kind, bytes, stall_seconds, persist_seconds, location
    ``save_failed``      data: step, kind, reason
    ``restore``          data: step, location, fell_back (bool), reason
    ``interval``         adaptive insurance interval changed; data: tau_seconds, tau_steps,
                         mttp_seconds, restart_seconds, delta_seconds
    ``exit``             data: reason (completed|preempted|error), step
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

EVENT_KINDS = (
    "start",
    "progress",
    "notice",
    "save_started",
    "save_committed",
    "save_failed",
    "restore",
    "interval",
    "exit",
)


@dataclass(frozen=True)
class Event:
    """One event. ``time`` is a unix timestamp in seconds."""

    kind: str
    time: float
    node_id: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, default=str)

    @staticmethod
    def from_json(line: str) -> Event:
        raw = json.loads(line)
        return Event(kind=raw["kind"], time=float(raw["time"]), node_id=raw.get("node_id"),
                     data=raw.get("data") or {})


class EventLog:
    """Thread-safe event emitter: JSON lines to a file plus optional callbacks."""

    def __init__(self, path: str | os.PathLike[str] | None = None, node_id: str | None = None):
        self.path = Path(path) if path else None
        self.node_id = node_id
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[Event], None]] = []

    @classmethod
    def from_env(cls) -> EventLog:
        return cls(os.environ.get("SPOTFLEET_EVENTS_FILE"), os.environ.get("SPOTFLEET_NODE_ID"))

    def subscribe(self, callback: Callable[[Event], None]) -> None:
        self._callbacks.append(callback)

    def emit(self, kind: str, /, **data: Any) -> Event:
        """Record one event. ``kind`` is positional-only so ``data`` may hold a ``kind`` key
        (the save events' checkpoint kind: periodic / insurance / emergency)."""
        if kind not in EVENT_KINDS:
            raise ValueError(f"unknown event kind {kind!r}; expected one of {EVENT_KINDS}")
        event = Event(kind=kind, time=time.time(), node_id=self.node_id, data=data)
        with self._lock:
            if self.path is not None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with self.path.open("a", encoding="utf-8") as fh:
                    fh.write(event.to_json() + "\n")
                    fh.flush()
            for cb in self._callbacks:
                cb(event)
        return event


def read_events(path: str | os.PathLike[str]) -> list[Event]:
    """Read every complete event line of a JSONL events file (a torn last line is skipped)."""
    p = Path(path)
    if not p.exists():
        return []
    out: list[Event] = []
    for line in p.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            out.append(Event.from_json(line))
        except (json.JSONDecodeError, KeyError):
            continue
    return out
