"""Issue 9, item 3 (disk half): the checkpoint disk fills up mid-run (a real 4 MiB tmpfs
filled by another writer), so every later save -- the final one included -- fails.

The run used to finish "completed", exit 0, with the newest checkpoint many steps
behind. Now completion requires the final checkpoint committed: exit 74
(``EXIT_FINAL_SAVE_FAILED``), an ``exit`` event with reason ``final_save_failed`` and
the step that IS saved, and an error line saying what is saved and what to do. After
space is freed, a re-run resumes from that step and completes with exit 0.
(The S3 half -- the store gone near the end -- is in test_faults_frozen_s3.py.)
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

from checkpointing.events import read_events  # noqa: E402
from checkpointing.manifest import list_checkpoints  # noqa: E402
from checkpointing.outcome import EXIT_FINAL_SAVE_FAILED  # noqa: E402
from checkpointing.stores.local import LocalStore  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "train_example.py"
STEPS = 160
FLAGS = ["--steps", str(STEPS), "--seed", "2", "--model", "mlp", "--size", "tiny",
         "--periodic-every", "20", "--keep-periodic", "1", "--progress-every", "10",
         "--step-sleep", "0.02"]


def _env(tmp: Path, ckpt: Path, node: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPOTFLEET_", "AWS_"))}
    env.update({"SPOTFLEET_CHECKPOINT_URI": str(ckpt), "SPOTFLEET_EVENTS_FILE": str(tmp / "events.jsonl"),
                "SPOTFLEET_NODE_ID": node, "PYTHONUNBUFFERED": "1"})
    return env


@pytest.mark.slow
def test_final_save_on_a_full_disk_exits_74_and_says_what_is_saved(tmp_path: Path) -> None:
    try:
        ctx = mounted_tmpfs(tmp_path / "disk", 4 << 20)
        disk = ctx.__enter__()
    except MountNotPermitted as exc:
        pytest.skip(f"cannot mount a small tmpfs here ({exc}); run the fault tests as root")
    try:
        ckpt = disk / "ckpt"
        proc = subprocess.Popen([sys.executable, str(EXAMPLE), *FLAGS], env=_env(tmp_path, ckpt, "a"),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        end = time.monotonic() + 120
        while not any(e.kind == "save_committed" and e.data["step"] == 60
                      for e in read_events(tmp_path / "events.jsonl")):
            assert proc.poll() is None and time.monotonic() < end, "no checkpoint of step 60"
            time.sleep(0.01)
        fill(disk)  # another writer takes all the space left
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == EXIT_FINAL_SAVE_FAILED, out[-3000:]
        evs = [e for e in read_events(tmp_path / "events.jsonl") if e.node_id == "a"]
        exit_event = evs[-1]
        assert exit_event.kind == "exit" and exit_event.data["reason"] == "final_save_failed"
        assert exit_event.data["step"] == STEPS
        saved = exit_event.data["saved_step"]
        assert saved is not None and 60 <= saved < STEPS
        assert [c.step for c in list_checkpoints(LocalStore(ckpt))][-1] == saved
        assert f"FINAL checkpoint (step {STEPS}) was NOT committed" in out
        assert f"step {saved}" in out and "re-run this job" in out
        assert any(e.kind == "save_failed" and e.data["step"] == STEPS for e in evs)

        # space comes back: the re-run resumes from the saved step and completes
        (disk / "filler.bin").unlink()
        proc = subprocess.run([sys.executable, str(EXAMPLE), *FLAGS], env=_env(tmp_path, ckpt, "b"),
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        evs = [e for e in read_events(tmp_path / "events.jsonl") if e.node_id == "b"]
        assert [e.data["step"] for e in evs if e.kind == "restore"] == [saved]
        assert evs[-1].data["reason"] == "completed" and evs[-1].data["saved_step"] == STEPS
    finally:
        ctx.__exit__(None, None, None)
