"""Issue 9, items 1 and 7: a full events/log disk.

* item 7: the events file and the node log (stdout/stderr) sit on a FULL tmpfs; the
  example trains to the end, exit 0, every checkpoint committed (it used to die with a
  bare ``OSError: [Errno 28]`` at its first event).
* item 1: the events disk fills up WHILE a save is persisting, so the ``save_committed``
  write fails right after the manifest was written. The committed checkpoint stays,
  nothing hangs (the next saves and ``finish`` return) and the run completes (the old
  saver deleted the just-committed checkpoint and its waiters hung forever).
* item 1, in-process: an event callback (e.g. a log bridge) that raises on
  ``save_committed`` does not fail or delete the committed checkpoint and does not
  hang the next save.

Real processes, a real tmpfs (mounted here; skipped with the reason where ``mount``
is not permitted), a real local checkpoint store.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fault_kit import MountNotPermitted, fill, mounted_tmpfs  # noqa: E402

from checkpointing.events import EventLog, read_events  # noqa: E402
from checkpointing.manifest import ENV_DEBUG_PERSIST_DELAY, list_checkpoints  # noqa: E402
from checkpointing.saver import AsyncSaver  # noqa: E402
from checkpointing.stores.local import LocalStore  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "train_example.py"
STEPS = 40
FLAGS = ["--steps", str(STEPS), "--seed", "1", "--model", "mlp", "--size", "tiny",
         "--periodic-every", "10", "--progress-every", "5"]


@pytest.fixture
def small_disk(tmp_path: Path):
    try:
        with mounted_tmpfs(tmp_path / "small", 2 << 20) as mnt:
            yield mnt
    except MountNotPermitted as exc:
        pytest.skip(f"cannot mount a small tmpfs here ({exc}); run the fault tests as root")


def _env(events: Path, ckpt: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPOTFLEET_", "AWS_"))}
    env.update({"SPOTFLEET_CHECKPOINT_URI": str(ckpt), "SPOTFLEET_EVENTS_FILE": str(events),
                "SPOTFLEET_NODE_ID": "n1", "PYTHONUNBUFFERED": "1", **extra})
    return env


@pytest.mark.slow
def test_full_events_and_log_disk_does_not_stop_training(small_disk: Path, tmp_path: Path) -> None:
    fill(small_disk)
    ckpt = tmp_path / "ckpt"
    with open(small_disk / "node.log", "wb") as log_fh:  # the node log, on the full disk too
        proc = subprocess.run([sys.executable, str(EXAMPLE), *FLAGS],
                              env=_env(small_disk / "events.jsonl", ckpt),
                              stdout=log_fh, stderr=log_fh, timeout=300)
    assert proc.returncode == 0
    steps = [c.step for c in list_checkpoints(LocalStore(ckpt))]
    assert steps and steps[-1] == STEPS, steps
    assert read_events(small_disk / "events.jsonl") == []  # the fault was real: nothing written


@pytest.mark.slow
def test_events_disk_filling_during_a_save_keeps_the_committed_checkpoint(small_disk: Path,
                                                                          tmp_path: Path) -> None:
    events = small_disk / "events.jsonl"
    ckpt = tmp_path / "ckpt"
    # each blob put (and the manifest) waits 0.4 s: the disk fills while step 20 persists
    proc = subprocess.Popen([sys.executable, str(EXAMPLE), *FLAGS, "--step-sleep", "0.01"],
                            env=_env(events, ckpt, **{ENV_DEBUG_PERSIST_DELAY: "0.4"}),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    end = time.monotonic() + 120
    while not any(e.kind == "save_started" and e.data["step"] == 20 for e in read_events(events)):
        assert proc.poll() is None and time.monotonic() < end, "no save of step 20 started"
        time.sleep(0.005)
    fill(small_disk)
    fill(small_disk, "events.jsonl", b"\n")  # the events file's last page too
    out, _ = proc.communicate(timeout=240)  # the old saver hung here forever
    assert proc.returncode == 0, out[-3000:]
    recorded = read_events(events)
    # the fault landed after the save started and before it was recorded as committed
    assert not any(e.kind == "save_committed" and e.data["step"] == 20 for e in recorded)
    steps = [c.step for c in list_checkpoints(LocalStore(ckpt))]
    assert 20 in steps and steps[-1] == STEPS, steps  # the committed checkpoint was kept
    assert "not writable" in out and "No space left on device" in out


def test_raising_event_callback_neither_deletes_nor_hangs(tmp_path: Path) -> None:
    import torch

    events = EventLog(tmp_path / "events.jsonl")

    def bridge(event) -> None:  # a user's bridge that breaks on one event kind
        if event.kind == "save_committed":
            raise OSError(28, "No space left on device")

    events.subscribe(bridge)
    saver = AsyncSaver(LocalStore(tmp_path / "ckpt"), events=events, shard_bytes=4096,
                       wait_limit_seconds=30)
    state = {"w": torch.arange(5000, dtype=torch.float32)}
    first = saver.save(state, 1, "periodic", block=True)
    assert first is not None and first.ok
    second = saver.save(state, 2, "periodic", block=True)  # used to wait forever
    assert second is not None and second.ok
    saver.close()
    assert [c.step for c in list_checkpoints(saver.store)] == [1, 2]
    assert events.callback_failures == 2
