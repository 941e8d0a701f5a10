"""Signal notice source: SIGTERM by default (what SkyPilot, Kubernetes, systemd and the
clouds' shutdown paths send), any catchable signal by name.

The handler only records: it builds a ``Notice`` and hands it to the guard, which
stores it in one attribute. No I/O, no locks, no allocation beyond the record, so it is
safe at any bytecode boundary. While armed the signal does NOT terminate the process;
the training loop sees ``guard.notice`` at the next step boundary and does the
emergency save itself. ``stop()`` restores the previous handler.
"""

from __future__ import annotations

import signal
import threading
import time
from typing import Any

from checkpointing.notices.base import Deliver, NoticeSource


def parse_signal(name: str) -> signal.Signals:
    """``"SIGTERM"``, ``"TERM"``, ``"15"`` -> ``signal.SIGTERM``; ValueError naming the fix."""
    raw = name.strip().upper()
    if raw.isdigit():
        try:
            return signal.Signals(int(raw))
        except ValueError:
            pass
    else:
        full = raw if raw.startswith("SIG") else f"SIG{raw}"
        if hasattr(signal.Signals, full):
            sig = signal.Signals[full]
            if sig not in (signal.SIGKILL, signal.SIGSTOP):
                return sig
    raise ValueError(
        f"unknown or uncatchable signal {name!r}; use a catchable signal name such as "
        "SIGTERM, SIGINT, SIGUSR1 or SIGUSR2"
    )


class SignalSource(NoticeSource):
    """Deliver a notice when the process receives ``signum`` (main thread only)."""

    kind = "signal"

    def __init__(self, signum: signal.Signals | int | str = signal.SIGTERM):
        self.signum = parse_signal(signum) if isinstance(signum, str) else signal.Signals(signum)
        self._previous: Any = None
        self._armed = False
        self.received = 0

    def describe(self) -> str:
        return f"signal:{self.signum.name}"

    def start(self, deliver: Deliver) -> None:
        if self._armed:
            return
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError(
                f"signal:{self.signum.name} can only be armed from the main thread; start the "
                "PreemptionGuard in the main thread or use an HTTP notice source"
            )
        # Build the notice lazily inside the handler; import kept out of the hot path.
        from checkpointing.notices.base import Notice

        name = self.signum.name

        def _handler(signum: int, frame: object) -> None:
            self.received += 1
            deliver(Notice("signal", time.time(), None, {"signal": name, "count": self.received}))

        previous = signal.signal(self.signum, _handler)
        # the recording handler installed at import (checkpointing.early_notice) is not
        # restored on stop(): the default action is
        self._previous = signal.SIG_DFL if getattr(previous, "spotfleet_early", False) else previous
        self._armed = True

    def stop(self) -> None:
        if not self._armed:
            return
        if threading.current_thread() is threading.main_thread():
            signal.signal(self.signum, self._previous if self._previous is not None else signal.SIG_DFL)
        self._armed = False
