"""How a training process ends when saving went wrong: exit codes, the "what is saved"
report, and the bound on waiting at exit.

* A run that finished every step but whose FINAL checkpoint is not committed to the
  checkpoint store exits ``EXIT_FINAL_SAVE_FAILED`` (74, EX_IOERR), never 0: a follow-on
  stage would otherwise start from stale weights. The error line says which step is
  saved where and what to do; the ``exit`` event has reason ``final_save_failed``.
* After a notice the process exits ``EXIT_PREEMPTED`` (75) and reports exactly what was
  saved before the deadline (``SavedState.describe``): the newest checkpoint in the
  store, and an emergency checkpoint written to local disk instead (the spill) with
  whether its upload finished.
* A save thread that is stuck in a frozen store must not keep the process alive after
  ``finish``: ``exit_when_stuck`` makes the interpreter's exit skip joining it (after
  flushing the logs) so the exit code arrives within ``EXIT_JOIN_SECONDS``.

All times are seconds.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("checkpointing.outcome")

#: exit code when training completed but the final checkpoint was not committed (EX_IOERR)
EXIT_FINAL_SAVE_FAILED = 74
#: the longest the training loop waits for a save in flight / a blocking save (seconds)
ENV_SAVE_WAIT_SECONDS = "SPOTFLEET_SAVE_WAIT_SECONDS"
#: the longest ``finish()`` waits for the final checkpoint to commit (seconds)
ENV_FINAL_SAVE_TIMEOUT_SECONDS = "SPOTFLEET_FINAL_SAVE_TIMEOUT_SECONDS"
DEFAULT_FINAL_SAVE_TIMEOUT_SECONDS = 300.0
#: after ``finish``, how long interpreter exit may wait for a stuck save thread (seconds)
EXIT_JOIN_SECONDS = 2.0
#: the longest the lease release at the end of ``finish`` may take (seconds; session.py)
LEASE_RELEASE_SECONDS = 2.0
#: an upload of the spilled checkpoint is waited for until this long before the deadline:
#: what ``finish`` does afterwards (lease release, exit join) still ends inside the window
PROMOTION_MARGIN_SECONDS = 0.5 + LEASE_RELEASE_SECONDS + EXIT_JOIN_SECONDS


@dataclass(frozen=True)
class SavedState:
    """What this process leaves behind. Steps are completed-step counts."""

    step: int
    store: str
    saved_step: int | None
    saved_location: str | None
    spilled_step: int | None = None
    spilled_location: str | None = None
    upload: str | None = None  # of the spilled checkpoint: "done", "running", "failed: ..."

    def event_data(self) -> dict[str, Any]:
        data: dict[str, Any] = {"saved_step": self.saved_step, "saved_location": self.saved_location}
        if self.spilled_step is not None:
            data.update(spilled_step=self.spilled_step, spilled_location=self.spilled_location,
                        spill_upload=self.upload)
        return data

    def describe(self) -> str:
        stored = (f"step {self.saved_step} in {self.store} ({self.saved_location})"
                  if self.saved_step is not None else f"no checkpoint in {self.store}")
        text = f"newest checkpoint: {stored}"
        if self.spilled_step is not None:
            text += (f"; emergency checkpoint of step {self.spilled_step} on LOCAL disk "
                     f"{self.spilled_location} (upload to {self.store}: {self.upload}); a "
                     f"restart on this machine resumes at step {self.spilled_step}, elsewhere "
                     f"at step {self.saved_step or 0}")
        return text


def saved_state(saver: Any, step: int) -> SavedState:
    """Summarise an ``AsyncSaver``'s outcome at ``step``."""
    last = saver.last_committed
    spilled = saver.last_spilled
    promotion = saver.promotion
    upload = None
    if spilled is not None:
        if promotion is None:
            upload = "not started"
        elif not promotion.done.is_set():
            upload = "still running (store not answering)"
        elif promotion.ok:
            upload = "done"
        else:
            upload = f"failed: {promotion.error}"
        if upload == "done":
            spilled = None  # the store has it: last_committed already points there
    return SavedState(step=step, store=saver.store.location,
                      saved_step=last.step if last is not None else None,
                      saved_location=last.location if last is not None else None,
                      spilled_step=spilled.step if spilled is not None else None,
                      spilled_location=spilled.location if spilled is not None else None,
                      upload=upload if spilled is not None else None)


def final_save_failed_message(saved: SavedState, total_steps: int | None, error: str | None) -> str:
    """The error a run prints when its final checkpoint was not committed."""
    done = f"all {total_steps} steps" if total_steps else f"{saved.step} steps"
    stored = saved.saved_step or 0
    if saved.spilled_step is not None:
        rerun = (f"re-run this job: on this machine it resumes at step {saved.spilled_step} from "
                 f"the local copy and uploads it; elsewhere it resumes at step {stored} and "
                 f"redoes {max(0, saved.step - stored)} steps")
    else:
        rerun = (f"re-run this job; it resumes at step {stored} and redoes "
                 f"{max(0, saved.step - stored)} steps")
    return (f"training completed {done}, but the FINAL checkpoint (step {saved.step}) was NOT "
            f"committed to {saved.store}: {error or 'unknown error'}. Saved: {saved.describe()}. "
            f"A follow-on stage must not start from this store yet. What to do: fix the store "
            f"(space, reachability, credentials) and {rerun} (exit code {EXIT_FINAL_SAVE_FAILED}).")


def wait_for_promotion(saver: Any, deadline: float | None) -> None:
    """Give the upload of a spilled checkpoint the time left before ``deadline``."""
    promotion = saver.promotion
    if promotion is None or promotion.done.is_set():
        return
    left = (deadline - time.time() - PROMOTION_MARGIN_SECONDS) if deadline is not None else 0.0
    if left > 0:
        promotion.done.wait(left)


def _flush_everything() -> None:
    for handler in logging.getLogger().handlers:
        with contextlib.suppress(Exception):
            handler.flush()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


def exit_when_stuck(saver: Any, code: int) -> bool:
    """If a save or upload thread is still blocked in the store, make interpreter exit
    end the process with ``code`` after ``EXIT_JOIN_SECONDS`` instead of joining worker
    threads that only a store timeout would release. Returns True when armed.

    Uses ``threading._register_atexit`` (run before the thread pools are joined); where
    that is missing, nothing is armed and exit waits for the store's own timeouts. Armed
    only in a fleet-launched training process (``SPOTFLEET_EVENTS_FILE`` or
    ``SPOTFLEET_NODE_ID`` set): a host program (a test runner, a notebook) keeps its own
    exit status.
    """
    jobs = [getattr(saver, "_job", None), *getattr(saver, "abandoned", [])]
    promotion = getattr(saver, "promotion", None)
    threads = [j.thread for j in jobs if j is not None and not j.done.is_set()]
    if promotion is not None and not promotion.done.is_set():
        threads.append(promotion.thread)
    busy = [t for t in dict.fromkeys(threads) if t is not None and t.is_alive()]
    register = getattr(threading, "_register_atexit", None)
    fleet = os.environ.get("SPOTFLEET_EVENTS_FILE") or os.environ.get("SPOTFLEET_NODE_ID")
    if not busy or register is None or not fleet:
        return False
    log.warning("a checkpoint write to %s is still blocked; the process exits with %d without "
                "waiting for it", saver.store.location, code)

    def _exit_now() -> None:
        end = time.monotonic() + EXIT_JOIN_SECONDS
        for thread in busy:
            thread.join(max(0.0, end - time.monotonic()))
        if any(t.is_alive() for t in busy):
            _flush_everything()
            os._exit(code)

    try:
        register(_exit_now)
    except RuntimeError:  # interpreter already shutting down
        return False
    return True
