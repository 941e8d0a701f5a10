"""``spotfleet main``'s fleet resource: node runners forked from the warm fork server.

Each attempt of a training stage runs ``python -m pipelines.node_runner`` through Dagster
Pipes. A fresh interpreter pays Python's start and the runner's imports (dagster_pipes,
numpy, pydantic, the local provider: ~0.2-0.4 s per attempt here) on the stage's critical
path. ``spotfleet main`` already runs a fork server for the training nodes
(``fleet/providers/local/forkserver.py``); it preloads the node runner's modules too
(``main_job.NODE_RUNNER_PRELOAD``),
and this resource's Pipes client forks the runner from it (``spawn_module``) instead of
``Popen``: same command, environment (with the Pipes bootstrap variables), working
directory, inherited stdout/stderr, process group and exit status. Without a server
(``SPOTFLEET_FORK_SERVER=off``, not listening yet) or for another command it is
``PipesSubprocessClient`` unchanged. Only the ``subprocess`` channel (local fleet) forks.
"""

from __future__ import annotations

import os
import signal
import sys
from subprocess import Popen

from dagster import PipesSubprocessClient
from dagster._core.errors import DagsterExecutionInterruptedError, DagsterPipesExecutionError
from dagster._core.pipes.client import PipesClientCompletedInvocation
from dagster._core.pipes.utils import open_pipes_session

from fleet.providers.local.forkserver import ENV_FORK_SERVER, spawn_module
from pipelines.resources import FleetResource


def _forkable_module(command) -> tuple[str, list[str]] | None:
    """``(module, args)`` for ``[this python, "-m", module, *args]``, else None."""
    if isinstance(command, str) or len(command) < 3 or command[1] != "-m":
        return None
    if os.path.realpath(command[0]) != os.path.realpath(sys.executable):
        return None
    return command[2], list(command[3:])


class ForkingPipesSubprocessClient(PipesSubprocessClient):
    """``PipesSubprocessClient.run`` (Dagster 1.13) with the process forked by the fork server
    named in the environment when there is one; otherwise exactly ``Popen``."""

    def run(self, *, context, extras=None, command, env=None, cwd=None) -> PipesClientCompletedInvocation:
        with open_pipes_session(context=context, context_injector=self.context_injector,
                                message_reader=self.message_reader, extras=extras) as pipes_session:
            full_env = {**os.environ, **self.env, **(env or {}), **pipes_session.get_bootstrap_env_vars()}
            where = cwd or self.cwd
            target = _forkable_module(command) if self.forward_stdio else None
            process = spawn_module(target[0], target[1], full_env, where) if target else None
            if process is None:
                process = Popen(command, cwd=where, env=full_env)
            try:
                process.wait()
                if process.returncode != 0:
                    raise DagsterPipesExecutionError(
                        f"External execution process failed with code {process.returncode}")
            except DagsterExecutionInterruptedError:
                if self.forward_termination:
                    context.log.info("[pipes] execution interrupted, sending SIGINT to subprocess.")
                    process.send_signal(signal.SIGINT)
                    process.wait(timeout=self.termination_timeout_seconds)
                raise
        return PipesClientCompletedInvocation(pipes_session)


class MainFleetResource(FleetResource):
    """``FleetResource`` whose local-fleet node runners fork from ``$SPOTFLEET_FORK_SERVER``."""

    def pipes_client(self):
        client = super().pipes_client()
        if self.pipes_channel != "subprocess" or not os.environ.get(ENV_FORK_SERVER):
            return client
        return ForkingPipesSubprocessClient(cwd=client.cwd, message_reader=client.message_reader)
