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

``_start`` is the one hook: ``Popen`` here, the fork server in
``pipelines/commands/main_fleet.py``.
"""

from __future__ import annotations

import signal
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
                context.log.info("[pipes] execution interrupted, sending SIGINT to subprocess.")
                process.send_signal(signal.SIGINT)
                try:
                    process.wait(timeout=self.termination_timeout_seconds)
                except TimeoutExpired:
                    raise exc from None  # as Dagster's: the runner did not stop in time
                interrupted = exc
        invocation = PipesClientCompletedInvocation(pipes_session)
        if interrupted is not None:
            raise StageInterrupted(invocation, process.returncode) from interrupted
        return invocation
