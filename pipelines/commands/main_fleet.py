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
``StagePipesClient`` (``pipelines/pipes_client.py``) unchanged. Only the ``subprocess`` channel (local fleet) forks.
"""

from __future__ import annotations

import os
import sys
from subprocess import Popen

from fleet.providers.local.forkserver import ENV_FORK_SERVER, spawn_module
from pipelines.pipes_client import StagePipesClient
from pipelines.resources import FleetResource


def _forkable_module(command) -> tuple[str, list[str]] | None:
    """``(module, args)`` for ``[this python, "-m", module, *args]``, else None."""
    if isinstance(command, str) or len(command) < 3 or command[1] != "-m":
        return None
    if os.path.realpath(command[0]) != os.path.realpath(sys.executable):
        return None
    return command[2], list(command[3:])


class ForkingPipesSubprocessClient(StagePipesClient):
    """``StagePipesClient`` with the process forked by the fork server named in the
    environment when there is one; otherwise exactly ``Popen``."""

    def _start(self, command, env: dict[str, str], cwd: str | None):
        target = _forkable_module(command) if self.forward_stdio else None
        process = spawn_module(target[0], target[1], env, cwd) if target else None
        return process if process is not None else Popen(command, cwd=cwd, env=env)


class MainFleetResource(FleetResource):
    """``FleetResource`` whose local-fleet node runners fork from ``$SPOTFLEET_FORK_SERVER``."""

    def pipes_client(self):
        client = super().pipes_client()
        if self.pipes_channel != "subprocess" or not os.environ.get(ENV_FORK_SERVER):
            return client
        return ForkingPipesSubprocessClient(cwd=client.cwd, message_reader=client.message_reader)
