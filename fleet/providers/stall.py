"""The progress watchdog's rule: when a running node that reports nothing is hung.

A training process that deadlocks stays alive and billed but emits no more events. The
local fleet (which reads every training event of its nodes) applies :func:`stall_limit_seconds`
and :func:`is_stalled` to each running node (ready, no notice, no emergency save in flight)
and kills and relaunches a stalled one like a failed one (docs/providers.md).

All durations here are WALL seconds of the training process (what it measures and what
the provider's clock reads), never market (emulated) seconds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

#: the least an automatic stall limit is, wall s (a slow step, GC, a periodic save's stall)
STALL_FLOOR_SECONDS = 120.0
#: an automatic limit is this many of the node's own progress intervals (mean step s x
#: steps between progress events)
STALL_INTERVALS = 20.0
#: default start-up allowance, wall s: from the node's ``start`` event (emitted after its
#: restore) to its first ``progress`` event (warm-up of the first steps)
STALL_STARTUP_SECONDS = 600.0

StallTimeout = float | Literal["auto"] | None


def check_stall_timeout(value: object, field: str = "stall_timeout_seconds") -> StallTimeout:
    """``value`` as a stall timeout, or ValueError naming ``field`` and the fix.

    Accepted: ``"auto"`` (derived from the node's own step time), a number of wall seconds
    > 0, or 0 / None (no watchdog)."""
    if value is None or value == "auto":
        return value  # type: ignore[return-value]
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or value < 0:
        raise ValueError(
            f"{field}={value!r} is not a stall limit; give wall seconds > 0 (e.g. 600), 'auto' "
            f"(max({STALL_FLOOR_SECONDS:g} s, {STALL_INTERVALS:g} x the node's mean step seconds x "
            "its steps per progress event)), or 0 / null to turn the watchdog off")
    return None if value == 0 else float(value)


def check_stall_startup(value: object, field: str = "stall_startup_seconds") -> float:
    """``value`` as a start-up allowance (wall s > 0), or ValueError naming ``field``."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or value <= 0:
        raise ValueError(
            f"{field}={value!r} is not a start-up allowance; give wall seconds > 0 (default "
            f"{STALL_STARTUP_SECONDS:g}): the longest a node may take from its start event "
            "(after its restore) to its first progress event")
    return float(value)


def stall_limit_seconds(timeout: StallTimeout, *, seen_progress: bool,
                        mean_step_seconds: float | None, progress_steps: int | None,
                        startup_seconds: float = STALL_STARTUP_SECONDS) -> float | None:
    """How long (wall s) a running node may go without any training event; None: never
    stalled (the watchdog is off).

    ``timeout``: the stage's ``stall_timeout_seconds`` (wall s, ``"auto"``, 0 / None = off);
    ``seen_progress``: the node emitted a ``progress`` event (before that, the start-up
    allowance ``startup_seconds`` applies: the first steps may be slow); ``mean_step_seconds``:
    the node's own mean step time (wall s, from its latest ``progress``);
    ``progress_steps``: steps between its progress events (None: unknown, taken as 1).
    ``"auto"`` = max(:data:`STALL_FLOOR_SECONDS`, :data:`STALL_INTERVALS` x mean step s x
    progress steps).
    """
    if timeout is None or timeout == 0:
        return None
    if not seen_progress:
        return float(startup_seconds)
    if timeout != "auto":
        return float(timeout)
    step = mean_step_seconds if mean_step_seconds is not None and mean_step_seconds > 0 else 0.0
    return max(STALL_FLOOR_SECONDS, STALL_INTERVALS * step * max(1, progress_steps or 1))


def is_stalled(now: float, last_event_at: float, limit_seconds: float | None) -> bool:
    """True when ``now - last_event_at`` (wall s) exceeds ``limit_seconds`` (None: never)."""
    return limit_seconds is not None and now - last_event_at > limit_seconds


def stall_reason(silent_seconds: float, limit_seconds: float) -> str:
    """The reason a stalled node's session and provider event carry."""
    return (f"stalled: no progress for {silent_seconds:.1f} s (limit {limit_seconds:g} s); "
            "killed and relaunched")


@dataclass
class ProgressWatch:
    """What the watchdog knows of one watched unit (a node, or an elastic group as one):
    when the provider last read a training event of it and its progress rate. Wall s."""

    last_event_at: float | None = None  # when the provider last read a training event
    progress_step: int | None = None  # step of the latest progress event
    progress_steps: int | None = None  # steps between the latest two progress events
    mean_step_seconds: float | None = None  # the unit's own mean step time
    seen_progress: bool = False  # a progress event since the start (or the last restart())

    def observe(self, kind: str, data: Mapping[str, Any], now: float) -> None:
        """A training event of kind ``kind`` with ``data`` was read at ``now``."""
        self.last_event_at = now
        step = data.get("step")
        if kind == "progress" and isinstance(step, int | float):
            if self.progress_step is not None and int(step) > self.progress_step:
                self.progress_steps = int(step) - self.progress_step
            self.progress_step = int(step)
            m = data.get("mean_step_seconds")
            if isinstance(m, int | float) and m > 0:
                self.mean_step_seconds = float(m)
            self.seen_progress = True

    def restart(self) -> None:
        """The unit's workers start again (an elastic re-formation): the start-up allowance
        applies until the next progress event."""
        self.seen_progress = False

    def stalled(self, now: float, timeout: StallTimeout,
                startup_seconds: float = STALL_STARTUP_SECONDS) -> str | None:
        """The stall reason (:func:`stall_reason`) when the unit has been silent for longer
        than its limit (:func:`stall_limit_seconds`) at ``now``, else None."""
        if self.last_event_at is None:
            return None
        limit = stall_limit_seconds(timeout, seen_progress=self.seen_progress,
                                    mean_step_seconds=self.mean_step_seconds,
                                    progress_steps=self.progress_steps, startup_seconds=startup_seconds)
        if not is_stalled(now, self.last_event_at, limit):
            return None
        return stall_reason(now - self.last_event_at, limit)
