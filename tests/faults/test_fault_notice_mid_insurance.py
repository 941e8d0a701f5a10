"""A preemption notice (SIGTERM) while an INSURANCE checkpoint is being written.

Real processes (tests/faults/insurance_train.py: the example's model and data through
``TrainingSession`` with insurance saves only, each blob put slowed by 0.3 s so the
notice lands inside one), a real local store. Two cases: the notice arrives right as the
insurance save of step s starts (the loop is one step further when it sees it), and
several steps later. Either way the insurance save in flight is abandoned (``save_failed``
"superseded by an emergency save"; its prefix deleted), the emergency checkpoint of the
step the loop stopped at commits, the process exits 75, the next process resumes at
exactly that step (zero steps lost) and ends bit-identical to an uninterrupted run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from checkpointing.events import Event, read_events
from checkpointing.manifest import ENV_DEBUG_PERSIST_DELAY, list_checkpoints
from checkpointing.runtime_env import EXIT_PREEMPTED
from checkpointing.stores.local import LocalStore

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parent / "insurance_train.py"
STEPS = 120


def _env(tmp: Path, node: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPOTFLEET_", "AWS_"))}
    env.update({"SPOTFLEET_EVENTS_FILE": str(tmp / "events.jsonl"), "SPOTFLEET_NODE_ID": node,
                "SPOTFLEET_NOTICE_SOURCES": "signal:SIGTERM", "SPOTFLEET_GRACE_SECONDS": "10",
                "PYTHONUNBUFFERED": "1", **extra})
    return env


def _events(tmp: Path, node: str) -> list[Event]:
    return [e for e in read_events(tmp / "events.jsonl") if e.node_id == node]


def _sha(out: str) -> str:
    return out.strip().splitlines()[-1].split("state_sha256=")[1]


def test_notice_during_an_insurance_save_abandons_it_and_loses_zero_steps(tmp_path: Path) -> None:
    ref = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "ref"), str(STEPS)],
                         env=_env(tmp_path, "ref"), capture_output=True, text=True, timeout=300)
    assert ref.returncode == 0, ref.stdout[-2000:] + ref.stderr[-2000:]
    uri = tmp_path / "ckpt"
    stopped_at = 0
    for node, first_step, delay in (("same-step", 20, 0.0), ("later-step", 50, 0.35)):
        proc = subprocess.Popen([sys.executable, str(SCRIPT), str(uri), str(STEPS)],
                                env=_env(tmp_path, node, **{ENV_DEBUG_PERSIST_DELAY: "0.3"}),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        end = time.monotonic() + 240
        while True:
            started = [e for e in _events(tmp_path, node) if e.kind == "save_started"
                       and e.data["kind"] == "insurance" and e.data["step"] >= first_step]
            if started:
                break
            assert proc.poll() is None and time.monotonic() < end, proc.stdout.read()[-3000:]
            time.sleep(0.003)
        time.sleep(delay)
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=120)[0]
        assert proc.returncode == EXIT_PREEMPTED, out[-3000:]
        ins_step = started[0].data["step"]
        ev = _events(tmp_path, node)
        outcome = [e for e in ev if e.kind in ("save_committed", "save_failed") and e.data["step"] == ins_step
                   and e.data["kind"] == "insurance"]
        # the insurance save was in flight when the notice came: it is abandoned for the emergency one
        assert [e.kind for e in outcome] == ["save_failed"], [(e.kind, e.data) for e in ev]
        assert "superseded by an emergency save" in outcome[0].data["reason"]
        [exit_ev] = [e for e in ev if e.kind == "exit"]
        assert exit_ev.data["reason"] == "preempted"
        stopped_at = exit_ev.data["step"]
        assert exit_ev.data["saved_step"] == stopped_at > ins_step
        committed = [e for e in ev if e.kind == "save_committed" and e.data["kind"] == "emergency"]
        assert [e.data["step"] for e in committed] == [stopped_at]
        # no torn prefix of the abandoned save is left; the newest checkpoint is the emergency one
        names = [p.name for p in uri.iterdir() if p.name.startswith("ckpt-")]
        assert all(f"{ins_step:012d}-insurance" not in n for n in names), names
        assert list_checkpoints(LocalStore(uri))[-1].step == stopped_at

    done = subprocess.run([sys.executable, str(SCRIPT), str(uri), str(STEPS)], env=_env(tmp_path, "resume"),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    [restore] = [e for e in _events(tmp_path, "resume") if e.kind == "restore"]
    assert restore.data["step"] == stopped_at  # zero steps lost
    assert _sha(done.stdout) == _sha(ref.stdout)
