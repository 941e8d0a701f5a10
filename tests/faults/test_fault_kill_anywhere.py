"""MUST SHOW (issue 9): kill anywhere, many times, and end bit-identical.

* 56 SIGKILLs of the example training process at seeded random moments: 20 aimed
  inside a save (right after ``save_started``, during the slowed persist phase), 24
  anywhere after training started (a step, a save, in between) and 12 anywhere from
  the process start (start-up, restore, the first steps). Every restart resumes from the
  newest COMMITTED checkpoint (never a torn one), torn prefixes and temp files left by
  the kills are garbage-collected, and the final model + optimizer state is
  bit-identical to an uninterrupted run. At least 15 kills must really land inside a
  save (counted from the events: a ``save_started`` without its outcome).
* 10 SIGTERMs in a row (a preemption notice each): every one ends with an emergency
  save and exit 75, and the next process resumes at exactly the step the previous one
  stopped at (0 steps lost); the end is bit-identical too.

Processes are forked from a warm forkserver (tests/faults/example_procs.py) so that 60+
real process starts take seconds, not minutes.
"""

from __future__ import annotations

import os
import random
import signal
from pathlib import Path

import pytest
from example_procs import EXAMPLE, ExampleLauncher

from checkpointing.manifest import ENV_DEBUG_PERSIST_DELAY, list_checkpoints, scan
from checkpointing.runtime_env import EXIT_PREEMPTED
from checkpointing.stores.local import LocalStore

pytestmark = pytest.mark.slow

# Enough steps that all 56 kills land before the job can finish, even on an idle machine:
# each killed process trains for up to ~1.5 s (about 35 steps on average at ~0.01 s/step,
# up to ~140), so 1500 steps ran out at kill 44 when nothing else was loading the cores.
STEPS = 5000
FLAGS = ["--steps", str(STEPS), "--seed", "11", "--model", "mlp", "--size", "tiny",
         "--step-sleep", "0.003", "--periodic-every", "20", "--progress-every", "10"]
PERSIST_DELAY = 0.02  # seconds before each blob put and before the manifest (~0.06 s per save)
KILLS_IN_SAVE, KILLS_IN_RUN, KILLS_AT_BOOT = 20, 24, 12
SIGTERMS = 10


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPOTFLEET_", "AWS_"))}
    env.update({
        "SPOTFLEET_CHECKPOINT_URI": str(tmp / "ckpt"),
        "SPOTFLEET_EVENTS_FILE": str(tmp / "events.jsonl"),
        "SPOTFLEET_NOTICE_SOURCES": "signal:SIGTERM",
        "SPOTFLEET_JOB_ID": "kill-anywhere",
        ENV_DEBUG_PERSIST_DELAY: str(PERSIST_DELAY),
        "PYTHONUNBUFFERED": "1",
    })
    return env


def _launcher(tmp: Path) -> ExampleLauncher:
    return ExampleLauncher(FLAGS, _env(tmp), tmp / "events.jsonl", tmp / "logs")


@pytest.fixture(scope="module")
def reference_sha(tmp_path_factory) -> str:
    """An uninterrupted run (one process) of the same flags."""
    tmp = tmp_path_factory.mktemp("reference")
    launcher = _launcher(tmp)
    proc = launcher.start("ref")
    proc.join(timeout=600)
    assert proc.exitcode == 0, launcher.log("ref")
    exits = [e for e in launcher.events("ref") if e.kind == "exit"]
    assert exits and exits[-1].data["reason"] == "completed"
    return exits[-1].data["state_sha256"]


def _committed_steps(store: LocalStore) -> list[int]:
    return [i.step for i in list_checkpoints(store)]


def _garbage(store: LocalStore) -> tuple[int, int]:
    """(prefixes without a valid manifest, unfinished temp files) in the store."""
    _committed, incomplete, invalid = scan(store)
    return len(incomplete) + len(invalid), len(store.list_partial(""))


def _finish(launcher: ExampleLauncher, name: str) -> str:
    proc = launcher.start(name)
    proc.join(timeout=600)
    assert proc.exitcode == 0, launcher.log(name)
    exits = [e for e in launcher.events(name) if e.kind == "exit"]
    assert exits and exits[-1].data["reason"] == "completed", exits
    return exits[-1].data["state_sha256"]


def test_56_sigkills_anywhere_20_aimed_inside_saves_bit_identical(tmp_path: Path, reference_sha: str) -> None:
    rng = random.Random(20261123)
    launcher = _launcher(tmp_path)
    store = LocalStore(tmp_path / "ckpt")
    plan = ["save"] * KILLS_IN_SAVE + ["run"] * KILLS_IN_RUN + ["boot"] * KILLS_AT_BOOT
    rng.shuffle(plan)
    in_save = 0
    max_garbage = 0
    for i, where in enumerate(plan):
        name = f"k{i:02d}"
        before = _committed_steps(store)
        proc = launcher.start(name)
        if where == "save":
            # inside a save: right after a save_started, during the slowed persist phase
            assert launcher.wait_for(name, lambda evs: any(e.kind == "save_started" for e in evs), proc), \
                launcher.log(name)
            delay = rng.uniform(0.0, 3 * PERSIST_DELAY)
        elif where == "run":  # anywhere once training started: a step, a save, between
            assert launcher.wait_for(name, lambda evs: any(e.kind == "start" for e in evs), proc), \
                launcher.log(name)
            delay = rng.uniform(0.0, 0.6)
        else:  # from the fork on: start-up, restore, the first steps
            delay = rng.uniform(0.0, 1.5)
        proc.join(timeout=delay)
        assert proc.is_alive(), f"{name} ended before its kill:\n{launcher.log(name)}"
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(timeout=30)
        assert proc.exitcode == -signal.SIGKILL
        evs = launcher.events(name)
        started = sum(1 for e in evs if e.kind == "save_started")
        finished = sum(1 for e in evs if e.kind in ("save_committed", "save_failed"))
        in_save += started > finished
        restores = [e.data["step"] for e in evs if e.kind == "restore"]
        if before and restores:  # killed after restore: it resumed the newest COMMITTED one
            assert restores == [max(before)], (name, restores, before)
        max_garbage = max(max_garbage, sum(_garbage(store)))
    assert in_save >= 15, f"only {in_save} of {len(plan)} kills landed inside a save"

    sha = _finish(launcher, "final")
    assert sha == reference_sha
    restore = [e for e in launcher.events("final") if e.kind == "restore"]
    assert restore and restore[0].data["fell_back"] is False
    # the torn prefixes / temp files the kills left were collected (item 5)
    assert _garbage(store) == (0, 0), scan(store)
    print(f"\n{len(plan)} SIGKILLs ({in_save} inside a save); at most {max_garbage} torn prefixes/temp "
          f"files at once; none left at the end; final sha256 {sha[:16]} == reference")


def test_10_sigterms_each_loses_zero_steps_bit_identical(tmp_path: Path, reference_sha: str) -> None:
    launcher = _launcher(tmp_path)
    resume_at = 0
    for i in range(SIGTERMS):
        name = f"t{i:02d}"
        proc = launcher.start(name)
        target = resume_at + 40 + 7 * i
        assert launcher.wait_for(name, lambda evs, t=target: any(
            e.kind == "progress" and e.data["step"] >= t for e in evs), proc), launcher.log(name)
        os.kill(proc.pid, signal.SIGTERM)
        proc.join(timeout=120)
        assert proc.exitcode == EXIT_PREEMPTED, launcher.log(name)
        evs = launcher.events(name)
        restore = [e.data["step"] for e in evs if e.kind == "restore"]
        assert restore == ([resume_at] if resume_at else []), (name, restore, resume_at)  # 0 steps lost
        exit_event = [e for e in evs if e.kind == "exit"][-1]
        assert exit_event.data["reason"] == "preempted"
        stopped_at = exit_event.data["step"]
        committed = [e.data["step"] for e in evs if e.kind == "save_committed"]
        assert stopped_at in committed, (name, stopped_at, committed)
        resume_at = stopped_at
    sha = _finish(launcher, "final")
    restore = [e.data["step"] for e in launcher.events("final") if e.kind == "restore"]
    assert restore == [resume_at]
    assert sha == reference_sha
    assert EXAMPLE.exists()
