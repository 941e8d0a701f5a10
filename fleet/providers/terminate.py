"""An operator's Terminate as a graceful stop: the rule and its words.

Terminate (Dagster UI "Terminate", ``dagster run terminate``, SIGINT / SIGTERM to the node
runner) asks the provider to *stop* a stage, not to kill it: every running node gets the
same notice a preemption gives it (on the local fleet ``PreemptionInjector.preempt_now``:
its notice signal and/or its metadata endpoint), its training process makes the emergency
save of a notice and exits, and a node still running after the grace period is SIGKILLed
(a hung process, or a save slower than the grace). A second Terminate, or a run worker
killed outright, kills at once (``FleetProvider.cancel``) -- except a node in the middle
of its emergency save, which is killed when that save ends (:class:`StopSaves`, the rule
below).

**When a second signal forces (the node runner, ``pipelines/node_runner.py``).** One
Terminate may reach the node runner more than once: a Ctrl-C reaches the runner's process
group AND is forwarded by the Pipes client (milliseconds apart), and Dagster's multiprocess
executor forwards the run worker's interrupt to the step process on its own (the Pipes
client forwards each; seconds apart, as the executor polls). A second signal cannot be told
from a user's deliberate one, so the rule rests on what the nodes are doing:

1. a signal within :data:`SAME_TERMINATE_SECONDS` of the first is the same Terminate;
2. a later one asks to force (``FleetProvider.cancel``), and the force is applied at once
   unless a node is saving: it acknowledged a notice (``notice`` or an emergency
   ``save_started`` event) and has not ended its save (``save_committed`` / ``save_failed``
   of the emergency save, ``exit``, or the provider's ``preempted`` / ``failed`` /
   ``cancelled`` of the node), or it has not acknowledged the stop's notice yet but is
   still within :data:`SAME_TERMINATE_SECONDS` + :data:`ACK_STEPS` of its own mean step
   time since the stop began (it saves at its next step boundary). The force then waits
   until no node is saving, and is applied then; a save never lasts beyond the grace (the
   provider kills at its end), so neither does the wait;
3. a third signal, :data:`SAME_TERMINATE_SECONDS` or more after the second, kills at once,
   saves under way included (a node hung inside its save would otherwise hold the stop
   until the grace ends);
4. so a duplicated forward never cuts an emergency save, and a user still forces: with no
   node saving (a hung node: no acknowledgement within its steps) the second signal kills
   at once; with one saving, the stage (``cancel`` is stage-wide: its other nodes too) is
   killed the moment that save ends; everything at once at a third.
   The Pipes client (``pipelines/pipes_client.py``) forwards every interrupt and keeps
   waiting the grace + margin: the runner bounds the stop itself.

Until 2026-11-28 any second signal more than 1.5 s after the first killed at once, and a
forward repeated while the nodes saved threw their emergency saves away.

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
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

TerminateGrace = float | Literal["auto"]

#: a second SIGINT / SIGTERM this soon after the first is the same Terminate (Ctrl-C on
#: ``spotfleet main`` reaches the runner's process group AND is forwarded by the Pipes client)
SAME_TERMINATE_SECONDS = 1.5
#: a node that has not acknowledged the stop's notice yet is spared a forced kill this many of
#: its own mean step times (plus :data:`SAME_TERMINATE_SECONDS`) after the stop began
ACK_STEPS = 2.0
#: events that end a node's stop: its save is over, or the node is
_NODE_ENDS = frozenset({"exit", "preempted", "failed", "cancelled"})

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


@dataclass
class _NodeStop:
    started: bool = False  # its training process started (a ``start`` event)
    acked: bool = False  # it acknowledged a notice: its emergency save is under way
    saved: bool = False  # that emergency save ended (committed or failed); a later notice re-arms
    ended: bool = False  # the node itself ended (exit, preempted, failed, cancelled)
    step_seconds: float = 0.0  # its own mean step time (latest ``progress``)


class StopSaves:
    """Which nodes of a stopping stage are making (or about to make) their emergency save,
    from the events the node runner relays (``observe``); thread-safe. The node runner
    applies a forced stop only when :meth:`saving` is empty (the module's rule)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._nodes: dict[str, _NodeStop] = {}
        self.stop_at: float | None = None

    def begin(self, now: float) -> None:
        """The graceful stop began at ``now`` (monotonic s); idempotent.

        Called from the node runner's signal handler, which runs on the main thread between
        two bytecodes of whatever it interrupted -- possibly :meth:`observe` holding the
        lock (the local provider relays events on the main thread). So it takes no lock: one
        attribute store is atomic, and only the first signal calls it (review, session 20:
        with the lock a Terminate landing inside ``observe`` deadlocked the runner, its
        nodes training and billing on)."""
        if self.stop_at is None:
            self.stop_at = now

    def observe(self, kind: str, node_id: str | None, data: Mapping[str, Any]) -> None:
        """A training or provider event of node ``node_id``."""
        if not node_id:
            return
        with self._lock:
            n = self._nodes.setdefault(node_id, _NodeStop())
            if kind == "start":
                n.started = True
            elif kind == "progress":
                m = data.get("mean_step_seconds")
                if isinstance(m, int | float) and m > 0:
                    n.step_seconds = float(m)
            elif kind == "notice" or (kind == "save_started" and data.get("kind") == "emergency"):
                # a later notice (the Terminate's, after a false alarm the node saved for and
                # trained on) is a new save to spare: until session 20 a node that had
                # finished one emergency save was never spared again
                n.acked, n.saved = True, False
            elif kind in ("save_committed", "save_failed") and n.acked \
                    and data.get("kind") in ("emergency", None):
                n.saved = True
            elif kind in _NODE_ENDS:
                n.ended = True

    def running(self) -> list[str]:
        """Nodes whose training process started and has not ended."""
        with self._lock:
            return [k for k, n in self._nodes.items() if n.started and not n.ended]

    def saving(self, now: float) -> list[str]:
        """Nodes a forced kill would cut short at ``now`` (monotonic s): saving, or not yet
        at the step boundary where they would start to."""
        with self._lock:
            def about_to(n: _NodeStop) -> bool:  # not acknowledged yet: within its steps
                return self.stop_at is not None and \
                    now - self.stop_at < SAME_TERMINATE_SECONDS + ACK_STEPS * n.step_seconds

            return [k for k, n in self._nodes.items()
                    if n.started and not n.ended and not n.saved and (n.acked or about_to(n))]
