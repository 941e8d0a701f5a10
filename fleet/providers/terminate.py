"""An operator's Terminate as a graceful stop: the rule and its words.

Terminate (Dagster UI "Terminate", ``dagster run terminate``, SIGINT / SIGTERM to the node
runner) asks the provider to *stop* a stage, not to kill it: every running node gets the
same notice a preemption gives it (on the local fleet ``PreemptionInjector.preempt_now``:
its notice signal and/or its metadata endpoint), its training process makes the emergency
save of a notice and exits, and a node still running after the grace period is SIGKILLed
(a hung process, or a save slower than the grace). A second Terminate, or a run worker
killed outright, kills at once (``FleetProvider.cancel``).

The grace period is the stage's ``terminate_grace_seconds`` in WALL seconds of the training
process: ``"auto"`` (default) = the fleet's preemption-notice window (the local fleet's
``market.grace_seconds``, else the cloud's window x its grace scale), so the training
process -- which reads its window from ``SPOTFLEET_GRACE_SECONDS`` or its metadata
endpoint -- plans the emergency save for the time it really has; a number of seconds;
``0``: kill at once (the behaviour before 2026-11-28, when Terminate lost every step since
the last checkpoint).
"""

from __future__ import annotations

import math
from typing import Literal

TerminateGrace = float | Literal["auto"]

#: the most a Terminate waits for a node's save (wall s): the Pipes client waits this
#: plus :data:`PIPES_MARGIN_SECONDS` for the node runner after forwarding the signal
MAX_TERMINATE_GRACE_SECONDS = 3600.0
#: what the Pipes client waits for the node runner beyond the grace (record, report)
PIPES_MARGIN_SECONDS = 30.0


def check_terminate_grace(value: object, field: str = "terminate_grace_seconds") -> TerminateGrace:
    """``value`` as a Terminate grace period, or ValueError naming ``field`` and the fix.

    Accepted: ``"auto"`` (the fleet's notice window), wall seconds >= 0 (0: kill at once),
    at most :data:`MAX_TERMINATE_GRACE_SECONDS`."""
    if value == "auto":
        return "auto"
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or value < 0 or value > MAX_TERMINATE_GRACE_SECONDS:
        raise ValueError(
            f"{field}={value!r} is not a Terminate grace period; give wall seconds from 0 to "
            f"{MAX_TERMINATE_GRACE_SECONDS:g} (how long Terminate waits for each node's emergency "
            "save before killing it; 0 = kill at once, losing the steps since the last "
            "checkpoint) or 'auto' (the fleet's preemption-notice window)")
    return float(value)


def terminate_grace_seconds(value: TerminateGrace, notice_window_seconds: float | None) -> float:
    """The grace (wall s) a Terminate gives: ``value``, or for ``"auto"`` the notice window
    (``notice_window_seconds``; None: no window known, 0 = kill at once)."""
    if value == "auto":
        return float(notice_window_seconds or 0.0)
    return float(value)


def pipes_wait_seconds(grace_seconds: float, floor: float) -> float:
    """How long the Pipes client waits for the node runner after forwarding a Terminate: the
    stage's grace (wall s, resolved) plus :data:`PIPES_MARGIN_SECONDS`, at least ``floor``
    (Dagster's ``termination_timeout_seconds``)."""
    return max(float(floor), float(grace_seconds) + PIPES_MARGIN_SECONDS)


def stop_summary(node_id: str, *, grace_seconds: float, stopped_by_itself: bool,
                 last_step: int | None, checkpoint_step: int | None, saved_at_stop: bool,
                 save_failed: str | None, started: bool = True) -> str:
    """One node's line of a Terminate's outcome: was the emergency save made, and which
    checkpoint a re-execution resumes from."""
    ckpt = (f"step {checkpoint_step}" if checkpoint_step is not None
            else "the run group's latest checkpoint (none was committed by this node)")
    if saved_at_stop and checkpoint_step is not None:
        return (f"node {node_id} saved an emergency checkpoint at step {checkpoint_step} and "
                f"stopped within the {grace_seconds:g} s grace; re-execution resumes from step "
                f"{checkpoint_step} (0 steps lost)")
    if not started:
        return (f"node {node_id} had not started training (still starting or restoring: nothing "
                f"new to save) and was stopped at once; re-execution resumes from {ckpt}")
    lost = (f" ({last_step - checkpoint_step} reported steps lost)"
            if last_step is not None and checkpoint_step is not None and last_step > checkpoint_step
            else "")
    if stopped_by_itself:
        why = f": {save_failed}" if save_failed else ""
        return (f"node {node_id} stopped within the {grace_seconds:g} s grace without an emergency "
                f"save{why}; re-execution resumes from {ckpt}{lost}")
    return (f"node {node_id} made no emergency save within the {grace_seconds:g} s grace (it did not "
            f"stop: hung, or its save was slower than the grace) and was killed; last reported step "
            f"{last_step}; re-execution resumes from {ckpt}{lost}")
