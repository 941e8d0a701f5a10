"""MUST SHOW: exact resume of the example training process.

* SIGKILL at seeded random points, including in the middle of a save (a debug hook
  slows the persist phase so a kill after ``save_started`` lands inside it), resuming
  each time, plus one resume after corrupting the newest checkpoint: the final model
  AND optimizer state is bit-identical to an uninterrupted run, and no torn checkpoint
  is ever loaded.
* SIGTERM -> emergency save -> exit 75 -> the resume starts at the very step the
  process stopped at (zero steps lost) and ends bit-identical too.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ckrt_inprocess import run_main_in_process

from checkpointing.events import Event, read_events
from checkpointing.manifest import ENV_DEBUG_PERSIST_DELAY, MANIFEST_NAME, list_checkpoints
from checkpointing.runtime_env import EXIT_PREEMPTED
from checkpointing.stores.local import LocalStore

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "train_example.py"
STEPS = 120
FLAGS = ["--steps", str(STEPS), "--seed", "3", "--model", "mlp", "--size", "tiny",
         "--step-sleep", "0.01", "--periodic-every", "12", "--progress-every", "5"]
PERSIST_DELAY = 0.05  # seconds before each blob put and the manifest: ~0.15 s per save


def _env(tmp: Path, attempt: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "SPOTFLEET_CHECKPOINT_URI": str(tmp / "ckpt"),
        "SPOTFLEET_EVENTS_FILE": str(tmp / "events.jsonl"),
        "SPOTFLEET_NODE_ID": attempt,
        "SPOTFLEET_NOTICE_SOURCES": "signal:SIGTERM",
        ENV_DEBUG_PERSIST_DELAY: str(PERSIST_DELAY),
        "PYTHONUNBUFFERED": "1",
    })
    for var in ("SPOTFLEET_MTTP_SECONDS", "SPOTFLEET_STATS_FILE", "SPOTFLEET_RESTART_SECONDS"):
        env.pop(var, None)
    return env


def _start(tmp: Path, attempt: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(EXAMPLE), *FLAGS], env=_env(tmp, attempt),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _events(tmp: Path, attempt: str | None = None) -> list[Event]:
    evs = read_events(tmp / "events.jsonl")
    return [e for e in evs if attempt is None or e.node_id == attempt]


def _wait_for(tmp: Path, attempt: str, predicate, timeout: float = 30.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate(_events(tmp, attempt)):
            return True
        time.sleep(0.005)
    return False


def _final_sha(tmp: Path, attempt: str) -> str:
    exits = [e for e in _events(tmp, attempt) if e.kind == "exit"]
    assert exits and exits[-1].data["reason"] == "completed", exits
    return exits[-1].data["state_sha256"]


def _run_to_end(tmp: Path, attempt: str) -> str:
    proc = _start(tmp, attempt)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    sha = _final_sha(tmp, attempt)
    assert f"state_sha256={sha}" in out
    return sha


@pytest.fixture(scope="module")
def reference_sha(tmp_path_factory) -> str:
    """The uninterrupted run, in this process (saves a process start-up; same code path)."""
    tmp = tmp_path_factory.mktemp("reference")
    run_main_in_process(EXAMPLE, FLAGS, _env(tmp, "ref"), "train_example_ref")
    return _final_sha(tmp, "ref")


def _committed_steps(tmp: Path) -> list[int]:
    return [i.step for i in list_checkpoints(LocalStore(tmp / "ckpt"))]


@pytest.mark.slow
def test_sigkill_anywhere_including_mid_save_resumes_bit_identical(tmp_path: Path, reference_sha: str) -> None:
    rng = random.Random(20261123)
    mid_save_kills = 0
    expected_restores: list[int] = []
    for attempt in range(4):
        name = f"a{attempt}"
        before = _committed_steps(tmp_path)
        proc = _start(tmp_path, name)
        if attempt % 2 == 0:
            # kill in the middle of a save: right after a save_started, inside the slowed persist
            started = _wait_for(tmp_path, name, lambda evs: any(e.kind == "save_started" for e in evs))
            assert started, "the example never started a save"
            time.sleep(rng.uniform(0.0, 2 * PERSIST_DELAY))
        else:
            # kill at a random point of the run (startup, a step, or a save)
            _wait_for(tmp_path, name, lambda evs: any(e.kind == "start" for e in evs))
            time.sleep(rng.uniform(0.05, 1.2))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        evs = _events(tmp_path, name)
        started = [e for e in evs if e.kind == "save_started"]
        finished = [e for e in evs if e.kind in ("save_committed", "save_failed")]
        if len(started) > len(finished):
            mid_save_kills += 1
        restores = [e.data["step"] for e in evs if e.kind == "restore"]
        if before:
            assert restores == [max(before)], (restores, before)  # latest complete one, never a torn one
        expected_restores.append(max(before) if before else 0)
    assert mid_save_kills >= 2, f"only {mid_save_kills} kills landed inside a save"

    # a torn directory left by a mid-save kill has no manifest and must be ignored;
    # now also corrupt the newest COMMITTED checkpoint: the resume must fall back
    store = LocalStore(tmp_path / "ckpt")
    newest = list_checkpoints(store)[-1]
    blob = tmp_path / "ckpt" / newest.name / "tensors-00000.bin"
    blob.write_bytes(blob.read_bytes()[:-8])
    assert (tmp_path / "ckpt" / newest.name / MANIFEST_NAME).exists()

    sha = _run_to_end(tmp_path, "final")
    restore = [e for e in _events(tmp_path, "final") if e.kind == "restore"]
    assert restore and restore[0].data["fell_back"] is True
    assert restore[0].data["step"] < newest.step
    assert sha == reference_sha


@pytest.mark.slow
def test_sigterm_emergency_save_exit_75_loses_zero_steps(tmp_path: Path, reference_sha: str) -> None:
    proc = _start(tmp_path, "t0")
    assert _wait_for(tmp_path, "t0", lambda evs: any(e.kind == "progress" and e.data["step"] >= 30
                                                      for e in evs))
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_PREEMPTED, out
    evs = _events(tmp_path, "t0")
    kinds = [e.kind for e in evs]
    assert "notice" in kinds
    exit_event = [e for e in evs if e.kind == "exit"][-1]
    assert exit_event.data["reason"] == "preempted"
    stopped_at = exit_event.data["step"]
    emergency = [e for e in evs if e.kind == "save_committed" and e.data["kind"] == "emergency"]
    # the emergency save holds the exact step the process stopped at
    # (unless that step was already committed by a periodic save that same step)
    committed_steps = [e.data["step"] for e in evs if e.kind == "save_committed"]
    assert stopped_at in committed_steps
    assert emergency or stopped_at % 12 == 0

    sha = _run_to_end(tmp_path, "t1")
    restore = [e for e in _events(tmp_path, "t1") if e.kind == "restore"]
    assert restore and restore[0].data["step"] == stopped_at  # zero steps lost
    assert restore[0].data["fell_back"] is False
    assert sha == reference_sha
