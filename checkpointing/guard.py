"""The preemption guard: arms notice sources and exposes the latest notice to the loop.

    guard = PreemptionGuard.from_env().start()      # or: with PreemptionGuard(...) as guard:
    for step in ...:
        train_step()
        if guard.notice is not None:                 # one attribute read per step
            emergency_save(deadline_in=guard.seconds_left())
            guard.acknowledge()                      # Azure: let the eviction proceed
            sys.exit(EXIT_PREEMPTED)

Sources (``checkpointing.notices``) deliver a ``Notice`` from a signal handler or a
poller thread; delivery only stores it in an attribute (no I/O, no locks). While the
guard is armed, the watched signal does not kill the process. ``on_notice`` callbacks
run on a separate dispatcher thread, never inside the signal handler.

Kill notices (signal, aws, gcp, azure) set ``guard.notice``. An AWS rebalance
recommendation (source ``aws-rebalance``) is advisory: it sets ``guard.advisory`` and is
passed to ``on_notice``, but ``guard.notice`` stays ``None`` (the node is not being
reclaimed yet; the policy may take an early insurance save). Times are unix seconds.
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import threading
import time
from collections.abc import Callable, Sequence

from checkpointing import early_notice
from checkpointing.notices.base import HttpError, Notice, NoticeSource
from checkpointing.notices.config import ENV_NOTICE_SOURCES, NoticeConfigError, parse_sources
from checkpointing.notices.signals import SignalSource
from checkpointing.runtime_env import ENV_GRACE_SECONDS, env_float

__all__ = ["Notice", "NoticeConfigError", "NoticeSource", "PreemptionGuard"]

log = logging.getLogger("checkpointing.guard")

#: optional override of the HTTP pollers' interval, seconds (default: per source)
ENV_NOTICE_POLL_SECONDS = "SPOTFLEET_NOTICE_POLL_SECONDS"
DEFAULT_GRACE_SECONDS = 30.0


class PreemptionGuard:
    """Watch ``sources`` for preemption notices.

    grace_seconds: the notice window assumed when a source gives no deadline (seconds;
    30 s is the GCP and Azure documented minimum, AWS gives ~120 s with a deadline).
    on_notice: called with every notice (kill or advisory) on a dispatcher thread.
    """

    def __init__(
        self,
        sources: Sequence[NoticeSource],
        on_notice: Callable[[Notice], None] | None = None,
        grace_seconds: float = DEFAULT_GRACE_SECONDS,
    ):
        if grace_seconds <= 0:
            raise ValueError(f"grace_seconds must be > 0 seconds, got {grace_seconds}; "
                             f"set {ENV_GRACE_SECONDS} to e.g. 30")
        self.sources = list(sources)
        self.on_notice = on_notice
        self.grace_seconds = float(grace_seconds)
        self._notice: Notice | None = None
        self._advisory: Notice | None = None
        #: every notice delivered, in order (appends are atomic; safe from a handler)
        self.history: list[Notice] = []
        # SimpleQueue.put is reentrant: safe to call from a signal handler.
        self._queue: queue.SimpleQueue[Notice | None] = queue.SimpleQueue()
        self._dispatcher: threading.Thread | None = None
        self._armed: list[NoticeSource] = []

    # ---- construction -------------------------------------------------------------
    @classmethod
    def from_env(cls, on_notice: Callable[[Notice], None] | None = None) -> PreemptionGuard:
        """Sources from ``SPOTFLEET_NOTICE_SOURCES`` (default ``signal:SIGTERM``), grace
        from ``SPOTFLEET_GRACE_SECONDS`` (default 30), poll interval from
        ``SPOTFLEET_NOTICE_POLL_SECONDS`` (optional). Raises ``NoticeConfigError`` /
        ``ValueError`` naming the variable and the fix."""
        try:
            poll = env_float(ENV_NOTICE_POLL_SECONDS, greater_than=0, example="1")
        except ValueError as exc:
            raise NoticeConfigError(str(exc)) from exc
        sources = parse_sources(os.environ.get(ENV_NOTICE_SOURCES), poll_seconds=poll)
        grace = env_float(ENV_GRACE_SECONDS, DEFAULT_GRACE_SECONDS, greater_than=0, example="30")
        assert grace is not None
        return cls(sources, on_notice=on_notice, grace_seconds=grace)

    # ---- lifecycle ----------------------------------------------------------------
    def start(self) -> PreemptionGuard:
        """Arm every source (signal sources must be armed from the main thread)."""
        if self.on_notice is not None and self._dispatcher is None:
            self._dispatcher = threading.Thread(target=self._dispatch, daemon=True,
                                                name="spotfleet-guard-dispatch")
            self._dispatcher.start()
        for source in self.sources:
            if source in self._armed:
                continue
            try:
                source.start(self._deliver)
            except Exception:
                self.stop()
                raise
            self._armed.append(source)
        self._claim_early_sigterm()
        log.debug("preemption guard armed: %s", ", ".join(s.describe() for s in self.sources))
        return self

    def _claim_early_sigterm(self) -> None:
        """Deliver a SIGTERM that arrived before this guard was armed (recorded by
        ``checkpointing.early_notice``) as a notice with its original arrival time."""
        watches = any(isinstance(s, SignalSource) and s.signum == signal.SIGTERM
                      for s in self._armed)
        if not watches:
            early_notice.release_unclaimed()
            return
        received_at = early_notice.claim()
        if received_at is not None and self._notice is None:
            log.warning("SIGTERM arrived %.1f s before the preemption guard was armed; "
                        "handling it as a notice now", time.time() - received_at)
            self._deliver(Notice("signal", received_at, None,
                                 {"signal": "SIGTERM", "count": 1, "early": True}))

    def stop(self) -> None:
        """Disarm every source (signal handlers restored, pollers joined)."""
        for source in reversed(self._armed):
            try:
                source.stop()
            except Exception as exc:  # keep disarming the others
                log.warning("stopping %s failed: %s", source.describe(), exc)
        self._armed.clear()
        if self._dispatcher is not None:
            self._queue.put(None)
            self._dispatcher.join(timeout=5.0)
            self._dispatcher = None

    def __enter__(self) -> PreemptionGuard:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def armed(self) -> bool:
        return bool(self._armed)

    # ---- what the loop reads ----------------------------------------------------------
    @property
    def notice(self) -> Notice | None:
        """The kill notice, or None. One attribute read: safe to call every step."""
        return self._notice

    @property
    def advisory(self) -> Notice | None:
        """The latest advisory notice (AWS rebalance recommendation), or None."""
        return self._advisory

    @property
    def deadline(self) -> float | None:
        """Unix seconds when the node will be killed: the source's deadline, else
        ``received_at + grace_seconds``; None without a notice."""
        notice = self._notice
        if notice is None:
            return None
        return notice.deadline if notice.deadline is not None else notice.received_at + self.grace_seconds

    def seconds_left(self) -> float | None:
        """Seconds until ``deadline`` (negative once past), or None without a notice."""
        deadline = self.deadline
        return None if deadline is None else deadline - time.time()

    def wait_for_notice(self, timeout: float) -> Notice | None:
        """Block up to ``timeout`` seconds for a kill notice (polls every 10 ms; no locks,
        so a signal arriving meanwhile cannot deadlock it)."""
        end = time.monotonic() + timeout
        while self._notice is None and time.monotonic() < end:
            time.sleep(0.01)
        return self._notice

    def acknowledge(self) -> bool:
        """Tell sources that support it (Azure Scheduled Events) that this node is ready
        to be evicted now. Call after the emergency save. Returns True if one was sent."""
        notice = self._notice
        if notice is None:
            return False
        sent = False
        for source in self.sources:
            try:
                sent = source.acknowledge(notice) or sent
            except HttpError as exc:
                log.warning("acknowledging %s failed (the platform will evict at its deadline "
                            "anyway): %s", source.describe(), exc)
        return sent

    # ---- delivery (signal handler / poller thread context) ------------------------
    def _deliver(self, notice: Notice) -> None:
        self.history.append(notice)
        if notice.is_kill:
            current = self._notice
            if current is None:
                self._notice = notice
            elif notice.deadline is not None:
                current_deadline = (current.deadline if current.deadline is not None
                                    else current.received_at + self.grace_seconds)
                if notice.deadline < current_deadline:
                    self._notice = notice
        else:
            self._advisory = notice
        if self.on_notice is not None:
            self._queue.put(notice)

    def _dispatch(self) -> None:
        while True:
            notice = self._queue.get()
            if notice is None:
                return
            try:
                assert self.on_notice is not None
                self.on_notice(notice)
            except Exception:
                log.exception("on_notice callback failed for %s notice", notice.source)
