"""Issue 9 item 6: a full disk does not stay full.

The example trains onto a REAL small tmpfs (``mount -t tmpfs -o size=...``):

* sized for 3.6 checkpoints with ``--keep-periodic 3``: before the 4th checkpoint the
  oldest periodic one -- which retention would delete after that save anyway -- is
  deleted first, so every save commits (before the fix the 4th and every later save
  failed with ENOSPC because old checkpoints were deleted only after a successful save);
* sized for 1.7 checkpoints: nothing may be deleted (the newest complete checkpoint is
  never deleted), so later saves fail CLEARLY before writing anything ("not enough
  space ... the newest complete checkpoint (step 10) is kept"), the disk holds no torn
  blobs, and the step-10 checkpoint stays loadable.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from example_procs import ExampleLauncher
from fault_kit import MountNotPermitted, mounted_tmpfs

from checkpointing.manifest import list_checkpoints, scan
from checkpointing.saver import restore_state
from checkpointing.stores.local import LocalStore

pytestmark = pytest.mark.slow

FLAGS = ["--model", "mlp", "--size", "medium", "--steps", "70", "--seed", "4", "--periodic-every", "10",
         "--keep-periodic", "3", "--progress-every", "10"]


def _launcher(tmp: Path, ckpt: Path) -> ExampleLauncher:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPOTFLEET_", "AWS_"))}
    env.update({"SPOTFLEET_CHECKPOINT_URI": str(ckpt), "SPOTFLEET_EVENTS_FILE": str(tmp / "events.jsonl"),
                "SPOTFLEET_NOTICE_SOURCES": "signal:SIGTERM", "SPOTFLEET_SPILL_DIR": "off"})
    return ExampleLauncher(FLAGS, env, tmp / "events.jsonl", tmp / "logs")


@pytest.fixture(scope="module")
def checkpoint_bytes(tmp_path_factory) -> int:
    """On-disk size of one checkpoint of this model (measured, in bytes)."""
    tmp = tmp_path_factory.mktemp("size")
    launcher = _launcher(tmp, tmp / "ckpt")
    proc = launcher.start("size", flags=["--model", "mlp", "--size", "medium", "--steps", "10",
                                         "--seed", "4", "--periodic-every", "10"])
    proc.join(timeout=300)
    assert proc.exitcode == 0, launcher.log("size")
    [info] = list_checkpoints(LocalStore(tmp / "ckpt"))
    return info.bytes


def _enter_tmpfs(path: Path, size: int):
    """(context manager, mount point) of a fresh tmpfs of ``size`` bytes; skips when
    mounting is not permitted here."""
    cm = mounted_tmpfs(path, size)
    try:
        return cm, cm.__enter__()
    except MountNotPermitted as exc:  # pragma: no cover - depends on the container
        pytest.skip(f"cannot mount a tmpfs here ({exc}); run as root / with CAP_SYS_ADMIN")


def test_room_is_made_within_retention_so_every_save_commits(tmp_path: Path, checkpoint_bytes: int) -> None:
    cm, disk = _enter_tmpfs(tmp_path / "disk", int(3.6 * checkpoint_bytes))
    try:
        launcher = _launcher(tmp_path, disk / "ckpt")
        proc = launcher.start("run")
        proc.join(timeout=600)
        log = launcher.log("run")
        assert proc.exitcode == 0, log
        evs = launcher.events("run")
        failed = [e.data for e in evs if e.kind == "save_failed"]
        committed = [e.data["step"] for e in evs if e.kind == "save_committed"]
        assert not failed, failed
        assert committed == [10, 20, 30, 40, 50, 60, 70], committed
        assert "short of space" in log  # room was made ahead of the retention pass
        store = LocalStore(disk / "ckpt")
        assert [c.step for c in list_checkpoints(store)] == [50, 60, 70]
        assert scan(store)[1:] == ([], {}) and store.list_partial("") == []
    finally:
        cm.__exit__(None, None, None)


def test_no_room_even_after_retention_fails_clearly_and_keeps_the_newest(
        tmp_path: Path, checkpoint_bytes: int) -> None:
    cm, disk = _enter_tmpfs(tmp_path / "disk", int(1.7 * checkpoint_bytes))
    try:
        launcher = _launcher(tmp_path, disk / "ckpt")
        proc = launcher.start("run")
        proc.join(timeout=600)
        log = launcher.log("run")
        assert proc.exitcode != 0, log  # the final checkpoint is not there: not "completed"
        evs = launcher.events("run")
        committed = [e.data["step"] for e in evs if e.kind == "save_committed"]
        failed = [e.data["reason"] for e in evs if e.kind == "save_failed"]
        assert committed == [10], committed
        assert failed and all("not enough space" in r for r in failed[:6]), failed
        assert "newest complete checkpoint (step 10" in failed[0]
        assert "keep_periodic" in failed[0]  # the fix is named
        # nothing half-written was left on the full disk, and step 10 is intact
        store = LocalStore(disk / "ckpt")
        assert [c.step for c in list_checkpoints(store)] == [10]
        assert scan(store)[1:] == ([], {}) and store.list_partial("") == []
        outcome = restore_state(store)
        assert outcome is not None and outcome.info.step == 10 and not outcome.fell_back
    finally:
        cm.__exit__(None, None, None)
