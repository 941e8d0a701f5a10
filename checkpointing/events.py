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
    ``save_spilled``     an emergency checkpoint was written to the LOCAL spill area
                         because the store could not take it in time; data: step, kind,
                         bytes, location (local), primary (the store it is meant for).
                         A later ``save_committed`` with ``promoted_from`` reports its upload.
    ``restore``          data: step, location, fell_back (bool), reason
    ``interval``         adaptive insurance interval changed; data: tau_seconds, tau_steps,
                         mttp_seconds, restart_seconds, delta_seconds (the delta tau
                         came from: measured stalls and the prior, weighted),
                         delta_prior_seconds (the plan's C, or null), measured_saves
    ``exit``             data: reason (completed|preempted|error|final_save_failed), step;
                         ``saved_step`` / ``saved_location``: the newest checkpoint this
                         process knows to be committed (what a restart resumes from)
    ``membership``       (elastic multi-node) a worker group formed and synced its state;
                         data: step, rank, world_size, state_from (handoff|peer|checkpoint|
                         fresh), src_rank, restart_count, pause_seconds, lost_at
    ``handoff``          (elastic multi-node) a survivor keeps its state in memory across a
                         membership change; data: step, reason, leavers, world_size
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from checkpointing.redact import redact_obj

log = logging.getLogger("checkpointing.events")

EVENT_KINDS = (
    "start",
    "progress",
    "notice",
    "save_started",
    "save_committed",
    "save_failed",
    "save_spilled",
    "restore",
    "interval",
    "exit",
    "membership",
    "handoff",
)


@dataclass(frozen=True)
class Event:
    """One event. ``time`` is a unix timestamp in seconds."""

    kind: str
    time: float
    node_id: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        """One JSON line; credentials in URLs and secret ``NAME=value`` pairs are redacted
        (``checkpointing.redact``), so no event line carries them."""
        return json.dumps(redact_obj(asdict(self)), sort_keys=True, default=lambda o: redact_obj(str(o)))

    @staticmethod
    def from_json(line: str) -> Event:
        raw = json.loads(line)
        return Event(kind=raw["kind"], time=float(raw["time"]), node_id=raw.get("node_id"),
                     data=raw.get("data") or {})


class EventLog:
    """Thread-safe event emitter: JSON lines to a file plus optional callbacks.

    Event logging is best-effort: ``emit`` never raises because of the file or a
    callback (a full or read-only events disk, a broken callback). The first failure is
    logged as a warning naming the file and the error; further failures are counted
    (``write_failures``) and logged again at most once every ``WARN_EVERY_SECONDS``.
    Training and checkpoints go on; only the events are lost.
    """

    #: at most one repeated "events file not writable" warning per this many seconds
    WARN_EVERY_SECONDS = 60.0

    def __init__(self, path: str | os.PathLike[str] | None = None, node_id: str | None = None):
        self.path = Path(path) if path else None
        self.node_id = node_id
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[Event], None]] = []
        #: events that could not be written to ``path`` (disk full, permissions, ...)
        self.write_failures = 0
        #: callback invocations that raised
        self.callback_failures = 0
        self._last_warning = -float("inf")

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
                try:
                    self.path.parent.mkdir(parents=True, exist_ok=True)
                    with self.path.open("a", encoding="utf-8") as fh:
                        fh.write(event.to_json() + "\n")
                        fh.flush()
                except (OSError, ValueError) as exc:
                    self.write_failures += 1
                    self._warn(f"events file {self.path} not writable ({exc}); the {kind!r} event "
                               f"is lost ({self.write_failures} so far). Training and checkpoints "
                               "continue; free space on that disk or point SPOTFLEET_EVENTS_FILE "
                               "elsewhere to get events again")
            for cb in self._callbacks:
                try:
                    cb(event)
                except Exception as exc:
                    self.callback_failures += 1
                    self._warn(f"event callback {getattr(cb, '__qualname__', cb)!r} failed on a "
                               f"{kind!r} event: {type(exc).__name__}: {exc}; ignored")
        return event

    def _warn(self, message: str) -> None:
        """Warn at most once per ``WARN_EVERY_SECONDS``; never raises (stderr may be full too)."""
        now = time.monotonic()
        if now - self._last_warning < self.WARN_EVERY_SECONDS:
            return
        self._last_warning = now
        with contextlib.suppress(Exception):
            log.warning("%s", message)


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
