"""The Pipes client of a training stage: ``PipesSubprocessClient`` that keeps what a
terminated node runner reported.

When a run is terminated (Dagster UI "Terminate", ``dagster run terminate``, SIGTERM /
SIGINT to the run worker, Ctrl-C on ``spotfleet main``) the step gets
``DagsterExecutionInterruptedError`` while it waits for the node runner. Dagster 1.13's
``PipesSubprocessClient.run`` then forwards SIGINT to the runner, waits for it and
re-raises -- out of the Pipes session, so the runner's ``stage_result`` (the node
sessions it stopped, billed up to the stop) was thrown away and the attempt was never
recorded. This client does the same forwarding, lets the session close normally (every
message read), and raises :class:`StageInterrupted` carrying the completed invocation.
The runner stops its stage gracefully (each node saves, up to the stage's
``terminate_grace_seconds``), so the client waits the extras' ``terminate_wait_seconds``
(grace + margin) rather than Dagster's 20 s; a second interrupt while it waits is
forwarded too, and the runner then forces the stop, sparing an emergency save under way
(fleet/providers/terminate.py: one Terminate may arrive twice).

``_start`` is the one hook: ``Popen`` here, the fork server in
``pipelines/commands/main_fleet.py``.
"""

from __future__ import annotations

import signal
import time
from subprocess import PIPE, Popen, TimeoutExpired

from dagster import PipesSubprocessClient
from dagster._core.errors import DagsterExecutionInterruptedError, DagsterPipesExecutionError
from dagster._core.pipes.client import PipesClientCompletedInvocation
from dagster._core.pipes.utils import open_pipes_session


class StageInterrupted(DagsterExecutionInterruptedError):
    """The run was terminated while a node runner ran; ``invocation``: what it reported
    after the forwarded SIGINT (its stage cancelled, nodes stopped)."""

    def __init__(self, invocation: PipesClientCompletedInvocation, returncode: int | None):
        super().__init__(f"execution interrupted; the node runner stopped its stage (exit {returncode})")
        self.invocation = invocation
        self.returncode = returncode


class StagePipesClient(PipesSubprocessClient):
    """``PipesSubprocessClient.run`` (Dagster 1.13), except that an interrupted run raises
    :class:`StageInterrupted` with the runner's messages instead of losing them."""

    def _start(self, command, env: dict[str, str], cwd: str | None):
        return Popen(command, cwd=cwd, env=env, stdout=None if self.forward_stdio else PIPE,
                     stderr=None if self.forward_stdio else PIPE)

    def run(self, *, context, extras=None, command, env=None, cwd=None) -> PipesClientCompletedInvocation:
        import os

        interrupted: DagsterExecutionInterruptedError | None = None
        with open_pipes_session(context=context, context_injector=self.context_injector,
                                message_reader=self.message_reader, extras=extras) as pipes_session:
            full_env = {**os.environ, **self.env, **(env or {}), **pipes_session.get_bootstrap_env_vars()}
            process = self._start(command, full_env, cwd or self.cwd)
            try:
                process.wait()
                if process.returncode != 0:
                    raise DagsterPipesExecutionError(
                        f"External execution process failed with code {process.returncode}")
            except DagsterExecutionInterruptedError as exc:
                if not self.forward_termination:
                    raise
                context.log.info("[pipes] execution interrupted, sending SIGINT to subprocess "
                                 "(its nodes are asked to save, then stopped).")
                process.send_signal(signal.SIGINT)
                # the runner's nodes make their emergency saves (up to the stage's Terminate
                # grace): wait that long, not Dagster's 20 s
                wait = max(float(self.termination_timeout_seconds),
                           float((extras or {}).get("terminate_wait_seconds") or 0.0))
                deadline = time.monotonic() + wait
                repeats = 0
                while True:
                    try:
                        process.wait(timeout=max(0.0, deadline - time.monotonic()))
                        break
                    except TimeoutExpired:
                        raise exc from None  # as Dagster's: the runner did not stop in time
                    except DagsterExecutionInterruptedError:
                        # interrupted again: a second Terminate, or the same one forwarded again
                        # (the multiprocess executor); the runner tells them apart by what its
                        # nodes do (fleet/providers/terminate.py): it kills the nodes that are
                        # not saving, a save under way when it ends, everything at a third.
                        # The wait is not cut: the runner ends within the grace either way
                        # (until 2026-11-28 it was cut to Dagster's 20 s, which could abandon a
                        # runner whose node was still making the save a duplicate spared)
                        context.log.warning("[pipes] interrupted again: forwarded; the node runner "
                                            "kills its nodes that are not saving (again: all).")
                        process.send_signal(signal.SIGINT)
                        repeats += 1
                        if repeats >= 2:
                            # a third interrupt: the runner kills every node at once, saves
                            # included, so Dagster's own wait is enough again (review, session
                            # 20: five Ctrl-C's still waited the whole grace, up to an hour)
                            deadline = min(deadline, time.monotonic()
                                           + float(self.termination_timeout_seconds))
                interrupted = exc
        invocation = PipesClientCompletedInvocation(pipes_session)
        if interrupted is not None:
            raise StageInterrupted(invocation, process.returncode) from interrupted
        return invocation
