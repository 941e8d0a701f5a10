"""A SIGTERM that arrives before the ``PreemptionGuard`` is armed (issue 9).

A training process spends seconds importing torch, building the model and restoring
before its session arms the guard. A SIGTERM in that window used to kill it with
signal 15 (exit -15) instead of the clean ``EXIT_PREEMPTED`` (75). ``import
checkpointing`` therefore installs a minimal handler (``install``) that only records
when the signal came, provided that

* this is a fleet-launched training process (``SPOTFLEET_CHECKPOINT_URI`` or
  ``SPOTFLEET_EVENTS_FILE`` is set),
* its notice sources include ``signal:SIGTERM`` (the default),
* it is the main thread and SIGTERM still has the default disposition.

When the guard is armed it ``claim``s the recorded signal and delivers it as a normal
notice, with the ORIGINAL arrival time (so the deadline is right): the session then
saves and exits 75. If no guard claims it within the grace window
(``SPOTFLEET_GRACE_SECONDS``, default 30 s) -- a process that imports checkpointing but
never trains -- the process exits with 143 (128 + SIGTERM), as the VM would be gone by
then anyway. Set ``SPOTFLEET_EARLY_SIGTERM=off`` to not install the handler.
"""

from __future__ import annotations

import math
import os
import signal
import threading
import time

ENV_EARLY_SIGTERM = "SPOTFLEET_EARLY_SIGTERM"
#: exit status when an unclaimed early SIGTERM's grace window ran out (128 + 15)
EXIT_UNCLAIMED = 128 + signal.SIGTERM

_received: list[float] = []  # unix seconds of each early SIGTERM (append is signal-safe)
_state = {"installed": False, "claimed": False}
_timer: list[threading.Timer] = []


def _grace_seconds() -> float:
    try:
        grace = float(os.environ.get("SPOTFLEET_GRACE_SECONDS", "") or 30.0)
    except ValueError:
        return 30.0
    return max(1.0, grace) if math.isfinite(grace) else 30.0  # the guard reports bad values


def _unclaimed() -> None:
    # only while our handler is still the one installed: a program that installed its own
    # SIGTERM handler since then has taken the signal over
    if not _state["claimed"] and is_early_handler(signal.getsignal(signal.SIGTERM)):
        os._exit(EXIT_UNCLAIMED)


def _handler(signum: int, frame: object) -> None:
    _received.append(time.time())
    if len(_received) == 1 and not _state["claimed"]:
        timer = threading.Timer(_grace_seconds(), _unclaimed)
        timer.daemon = True
        timer.start()
        _timer.append(timer)


_handler.spotfleet_early = True  # type: ignore[attr-defined]


def _wants_sigterm(spec: str | None) -> bool:
    spec = (spec or "").strip()
    if not spec:
        return True  # default sources: signal:SIGTERM
    for item in spec.split(","):
        kind, _, arg = item.strip().partition(":")
        if kind.strip().lower() == "signal" and arg.strip().upper() in ("", "SIGTERM", "TERM", "15"):
            return True
    return False


def install() -> bool:
    """Install the recording handler when the conditions above hold; True if installed.

    Safe to call again (e.g. in a child forked from a process that already imported
    checkpointing, after its environment and signal dispositions were reset)."""
    try:
        if is_early_handler(signal.getsignal(signal.SIGTERM)):
            return True
    except ValueError:
        return False
    env = os.environ
    if env.get(ENV_EARLY_SIGTERM, "").strip().lower() in ("off", "0", "false", "no"):
        return False
    if not (env.get("SPOTFLEET_CHECKPOINT_URI") or env.get("SPOTFLEET_EVENTS_FILE")):
        return False
    if not _wants_sigterm(env.get("SPOTFLEET_NOTICE_SOURCES")):
        return False
    if threading.current_thread() is not threading.main_thread():
        return False
    try:
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return False
        _received.clear()  # nothing inherited from a parent process
        _state["claimed"] = False
        signal.signal(signal.SIGTERM, _handler)
    except (ValueError, OSError):
        return False
    _state["installed"] = True
    return True


def is_early_handler(handler: object) -> bool:
    return bool(getattr(handler, "spotfleet_early", False))


def claim() -> float | None:
    """Called by the guard once its own SIGTERM handler is in place: returns the arrival
    time (unix seconds) of the first early SIGTERM, or None; stops the fallback exit."""
    _state["claimed"] = True
    for timer in _timer:
        timer.cancel()
    return _received[0] if _received else None


def release_unclaimed() -> None:
    """For a guard that does NOT watch SIGTERM: give SIGTERM its default action back
    and, if one already arrived, let it take effect now (main thread only)."""
    if not _state["installed"] or threading.current_thread() is not threading.main_thread():
        return
    if is_early_handler(signal.getsignal(signal.SIGTERM)):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _state["claimed"] = True
        for timer in _timer:
            timer.cancel()
        if _received:
            os.kill(os.getpid(), signal.SIGTERM)
