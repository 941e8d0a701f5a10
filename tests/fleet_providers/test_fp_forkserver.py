"""The warm fork server: forked training processes behave like fresh ones.

Same final state as a Popen'd run (bit-exact), a notice to the process group is an
emergency save + exit 75, SIGKILL reads as -9, and without a server (or for a command
that is not `python script.py`) spawn() falls back to an ordinary process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleet.providers.local.forkserver import (
    ENV_FORK_SERVER,
    ForkedProcess,
    spawn,
    spawn_module,
    start_server,
)

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "train_example.py"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    # json.tool: a package's module the server has imported, as spotfleet main preloads
    # pipelines.node_runner
    handle = start_server(tmp_path_factory.mktemp("fs") / "fs.sock", wait_ready=120, preload=("json.tool",))
    assert os.path.exists(handle.socket_path), "fork server did not come up"
    yield handle
    handle.stop()
    assert handle.proc.returncode is not None


def _env(tmp: Path, tag: str, server=None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTFLEET_")}
    env.update(SPOTFLEET_EVENTS_FILE=str(tmp / f"{tag}.jsonl"), SPOTFLEET_NODE_ID=tag)
    if server is not None:
        env[ENV_FORK_SERVER] = server.socket_path
    return env


def _events(tmp: Path, tag: str) -> list[dict]:
    return [json.loads(x) for x in (tmp / f"{tag}.jsonl").read_text().splitlines() if x.strip()]


def _cmd(tmp: Path, tag: str, *extra: str) -> list[str]:
    return [sys.executable, str(EXAMPLE), "--steps", "40", "--size", "tiny", "--seed", "3",
            "--checkpoint-uri", str(tmp / tag), *extra]


def test_a_forked_run_ends_bit_identical_to_a_fresh_one(server, tmp_path):
    fresh = spawn(_cmd(tmp_path, "fresh"), _env(tmp_path, "fresh"), tmp_path / "fresh.log")
    forked = spawn(_cmd(tmp_path, "forked"), _env(tmp_path, "forked", server), tmp_path / "forked.log")
    assert isinstance(fresh, subprocess.Popen) and isinstance(forked, ForkedProcess)
    assert fresh.wait(timeout=300) == 0 and forked.wait(timeout=300) == 0
    sha = [next(e for e in reversed(_events(tmp_path, t)) if e["kind"] == "exit")["data"]["state_sha256"]
           for t in ("fresh", "forked")]
    assert sha[0] and sha[0] == sha[1]
    assert "state_sha256=" in (tmp_path / "forked.log").read_text()  # stdout went to the node's log
    assert os.getpgid(os.getpid()) != forked.pid  # it ran in its own session / process group


def test_a_notice_to_the_process_group_is_an_emergency_save(server, tmp_path):
    proc = spawn(_cmd(tmp_path, "n", "--step-sleep", "0.05", "--steps", "100000"),
                 _env(tmp_path, "n", server), tmp_path / "n.log")
    assert isinstance(proc, ForkedProcess)
    deadline = time.time() + 120
    while time.time() < deadline and not any(e["kind"] == "progress" for e in _events_or_empty(tmp_path, "n")):
        time.sleep(0.1)
    assert proc.poll() is None
    os.killpg(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=120) == 75
    kinds = [e["kind"] for e in _events(tmp_path, "n")]
    assert "save_committed" in kinds and kinds[-1] == "exit"

    killed = spawn(_cmd(tmp_path, "k", "--step-sleep", "0.05", "--steps", "100000"),
                   _env(tmp_path, "k", server), tmp_path / "k.log")
    os.killpg(killed.pid, signal.SIGKILL)
    assert killed.wait(timeout=60) == -signal.SIGKILL


def _events_or_empty(tmp: Path, tag: str) -> list[dict]:
    try:
        return _events(tmp, tag)
    except (FileNotFoundError, json.JSONDecodeError):
        return []


def test_without_a_server_or_for_other_commands_it_is_popen(tmp_path):
    env = _env(tmp_path, "x")
    env[ENV_FORK_SERVER] = str(tmp_path / "no-such.sock")
    p = spawn([sys.executable, "-c", "print('hi')"], env, tmp_path / "x.log")
    assert isinstance(p, subprocess.Popen) and p.wait(timeout=60) == 0
    q = spawn(_cmd(tmp_path, "y"), env, tmp_path / "y.log")
    assert isinstance(q, subprocess.Popen) and q.wait(timeout=300) == 0


PROBE = """import os, sys
print("out", sys.argv[1:], os.environ.get("PROBE"), os.getcwd(), os.getpgid(0), "torch" in sys.modules)
print("err", file=sys.stderr)
if __name__ == "__main__":
    sys.exit(int(sys.argv[1]))
"""


def test_spawn_module_is_python_dash_m_with_the_callers_stdio(server, tmp_path):
    """What spotfleet main's node runners get: `python -m module args` with the launcher's env,
    cwd, stdout/stderr (inherited fds) and process group; the exit status like Popen's."""
    (tmp_path / "probe_mod.py").write_text(PROBE)
    r, w = os.pipe()
    env = dict(_env(tmp_path, "m", server), PROBE="yes")
    proc = spawn_module("probe_mod", ["3"], env, cwd=str(tmp_path), stdio_fds=(w, w))
    os.close(w)
    assert isinstance(proc, ForkedProcess)
    assert proc.wait(timeout=60) == 3
    with os.fdopen(r) as f:
        out = f.read()
    # forked from the warm server (torch already imported), in the launcher's process group
    assert f"out ['3'] yes {tmp_path} {os.getpgid(0)} True" in out and "err" in out, out
    env.pop(ENV_FORK_SERVER)
    assert spawn_module("probe_mod", ["0"], env, cwd=str(tmp_path)) is None  # no server: the caller Popens


def test_a_preloaded_module_runs_as_main_without_runpy_warning(server, tmp_path):
    """spotfleet main preloads ``pipelines.node_runner`` in the fork server and then runs it
    with ``-m``: runpy warned on every launch ("found in sys.modules after import of
    package ... unpredictable behaviour") into each stage's log. The module is run fresh
    as __main__, as ``python -m`` does, and says nothing."""
    (tmp_path / "in.json").write_text('{"stage": "pretrain", "step": 300}')
    r, w = os.pipe()
    proc = spawn_module("json.tool", ["in.json"], _env(tmp_path, "json", server), cwd=str(tmp_path),
                        stdio_fds=(w, w))
    os.close(w)
    assert isinstance(proc, ForkedProcess)
    assert proc.wait(timeout=60) == 0
    with os.fdopen(r) as f:
        out = f.read()
    assert '"step": 300' in out, out
    assert "RuntimeWarning" not in out and "found in sys.modules" not in out, out


def test_a_forked_node_outlives_its_server_and_is_not_reported_dead(tmp_path):
    """The server dies with its launcher (``spotfleet main`` SIGKILLed): nobody reports the
    node's exit any more. Before, the node then read as killed (-9) although it was
    training, so the provider never stopped it and it trained on, orphaned. Now it reads as
    running while it runs, and as ended once it is gone."""
    handle = start_server(tmp_path / "fs.sock", wait_ready=120)
    try:
        proc = spawn(_cmd(tmp_path, "orphan", "--steps", "100000", "--step-sleep", "0.05"),
                     _env(tmp_path, "orphan", handle), tmp_path / "orphan.log")
        assert isinstance(proc, ForkedProcess)
        deadline = time.time() + 120
        while time.time() < deadline and not (tmp_path / "orphan.jsonl").exists():
            time.sleep(0.1)
        handle.proc.kill()
        handle.proc.wait()
        assert proc.poll() is None  # still training: not "killed"
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=0.5)
        os.kill(proc.pid, 0)  # it really is alive
        os.killpg(proc.pid, signal.SIGKILL)  # what the provider's cancel does
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        handle.stop()
