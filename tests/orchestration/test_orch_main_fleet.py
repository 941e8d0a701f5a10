"""spotfleet main's fleet resource: node runners fork from the fork server only when one is
named in the environment, only for `[this python, -m, module, ...]` and the local channel."""

from __future__ import annotations

import sys

from fleet.providers.local.forkserver import ENV_FORK_SERVER
from pipelines.commands.main_fleet import (
    ForkingPipesSubprocessClient,
    MainFleetResource,
    _forkable_module,
)
from pipelines.pipes_client import StagePipesClient


def test_the_forking_client_only_with_a_server_and_the_subprocess_channel(monkeypatch, tmp_path):
    monkeypatch.delenv(ENV_FORK_SERVER, raising=False)
    plain = MainFleetResource(var_dir=str(tmp_path)).pipes_client()
    assert type(plain) is StagePipesClient  # SPOTFLEET_FORK_SERVER=off / dagster dev: no fork
    monkeypatch.setenv(ENV_FORK_SERVER, str(tmp_path / "fs.sock"))
    forking = MainFleetResource(var_dir=str(tmp_path), project_dir=str(tmp_path)).pipes_client()
    assert isinstance(forking, ForkingPipesSubprocessClient) and forking.cwd == str(tmp_path)
    assert forking.message_reader is not None and forking.forward_stdio
    s3 = MainFleetResource(var_dir=str(tmp_path), pipes_channel="s3", pipes_bucket="b",
                           pipes_endpoint_url="http://127.0.0.1:1").pipes_client()
    assert not isinstance(s3, ForkingPipesSubprocessClient)  # remote nodes: no local fork


def test_only_this_interpreter_running_a_module_is_forked():
    assert _forkable_module([sys.executable, "-m", "pipelines.node_runner"]) == ("pipelines.node_runner", [])
    assert _forkable_module([sys.executable, "-m", "m", "--x", "1"]) == ("m", ["--x", "1"])
    assert _forkable_module(["/usr/bin/env", "-m", "m"]) is None
    assert _forkable_module([sys.executable, "script.py"]) is None
    assert _forkable_module(f"{sys.executable} -m m") is None
