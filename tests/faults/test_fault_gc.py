"""Issue 9 item 5: torn and invalid checkpoints are garbage-collected.

On a local directory and on the real radosgw S3 server, real processes leave real
garbage behind:

* the example training process is SIGKILLed in the middle of a save: a checkpoint prefix
  with data blobs and no manifest;
* a writer process is SIGKILLed in the middle of a put (tests/faults/partial_writer.py):
  a temp file on the local disk / an orphan multipart upload with a 5 MiB part on S3 --
  invisible to listings, but it takes space; it is named like a checkpoint of a HIGHER
  step than any committed one (the old rule "torn and below the newest step" never
  deleted such a prefix);
* the newest committed checkpoint is corrupted, so the next restore falls back past it.

The next run of the same job deletes all of it before its first save (GC runs before
writing and never touches the save in flight): at the end, the store holds only
committed, verifiable checkpoints; no unfinished upload is left.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from example_procs import ExampleLauncher
from fault_s3 import aws_env, new_bucket

from checkpointing.manifest import ENV_DEBUG_PERSIST_DELAY, list_checkpoints, scan
from checkpointing.saver import load_checkpoint
from checkpointing.stores.base import open_store

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
PERSIST_DELAY = 0.3  # seconds before each blob put and the manifest
FLAGS = ["--model", "mlp", "--size", "small", "--steps", "120", "--seed", "8", "--periodic-every", "10",
         "--step-sleep", "0.005", "--progress-every", "10"]
ORPHAN = "ckpt-000009999999-periodic-0rphan00/tensors-00000.bin"


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def target(request, tmp_path: Path) -> tuple[str, dict[str, str]]:
    if request.param == "local":
        return str(tmp_path / "ckpt"), {}
    gw = request.getfixturevalue("s3_gateway")
    return f"s3://{new_bucket(gw)}/gc-run", aws_env(gw)


def _kill_writer_mid_put(uri: str, env: dict[str, str], store) -> None:
    """Start partial_writer.py, feed it 10 MiB, SIGKILL it once its put is visibly underway."""
    proc = subprocess.Popen([sys.executable, str(HERE / "partial_writer.py"), uri, ORPHAN],
                            stdin=subprocess.PIPE, env=env, stderr=subprocess.PIPE)
    try:
        proc.stdin.write(os.urandom(10 << 20))  # > one 8 MiB local chunk, > one 5 MiB part
        proc.stdin.flush()
        end = time.monotonic() + 120
        while time.monotonic() < end:
            partial = store.list_partial("ckpt-")
            if partial and _has_data(store, partial[0]):
                break
            assert proc.poll() is None, proc.stderr.read().decode(errors="replace")
            time.sleep(0.05)
        else:
            raise AssertionError("the writer never started its put")
    finally:
        proc.kill()  # SIGKILL: no cleanup of any kind runs
        proc.wait(timeout=30)


def _has_data(store, upload) -> bool:
    if hasattr(store, "client"):  # S3: at least one part uploaded
        full = store._key(upload.key)
        parts = store.client.list_parts(Bucket=store.bucket, Key=full, UploadId=upload.upload_id)
        return bool(parts.get("Parts"))
    return (store.root / upload.upload_id).stat().st_size > 0


def test_torn_saves_orphan_uploads_and_corrupt_checkpoints_are_collected(
        target: tuple[str, dict[str, str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    uri, aws = target
    for k, v in aws.items():
        monkeypatch.setenv(k, v)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTFLEET_")}
    env.update({"SPOTFLEET_CHECKPOINT_URI": uri, "SPOTFLEET_EVENTS_FILE": str(tmp_path / "events.jsonl"),
                "SPOTFLEET_JOB_ID": "gc-job", "SPOTFLEET_SPILL_DIR": "off",
                ENV_DEBUG_PERSIST_DELAY: str(PERSIST_DELAY)})
    launcher = ExampleLauncher(FLAGS, env, tmp_path / "events.jsonl", tmp_path / "logs")
    store = open_store(uri)

    # 1) SIGKILL the training process inside a save until a torn prefix is left
    for attempt in range(6):
        name = f"k{attempt}"
        proc = launcher.start(name)
        # the process's THIRD save (two committed before it): kill it mid-persist
        assert launcher.wait_for(name, lambda evs: sum(e.kind == "save_started" for e in evs) >= 3,
                                 proc), launcher.log(name)
        time.sleep(1.5 * PERSIST_DELAY)  # the first data blob is on the store, no manifest yet
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(timeout=30)
        if scan(store)[1]:
            break
    committed, torn, _invalid = scan(store)
    assert torn, "no kill left a torn prefix"
    assert len(committed) >= 2

    # 2) a writer killed in the middle of a put: a temp file / an orphan multipart upload
    _kill_writer_mid_put(uri, dict(os.environ), store)
    orphans = store.list_partial("ckpt-")
    assert [u.key for u in orphans] == [ORPHAN]

    # 3) the newest committed checkpoint gets corrupted (one flipped byte in its data)
    newest = list_checkpoints(store)[-1]
    blob = f"{newest.name}/tensors-00000.bin"
    data = bytearray(store.get_bytes(blob))
    data[len(data) // 2] ^= 0xFF
    store.put_bytes(blob, bytes(data))

    # 4) the next run of the job: falls back past the corrupt one, and collects everything
    proc = launcher.start("final", {ENV_DEBUG_PERSIST_DELAY: "0"})
    proc.join(timeout=600)
    assert proc.exitcode == 0, launcher.log("final")
    restore = [e for e in launcher.events("final") if e.kind == "restore"]
    assert restore and restore[0].data["fell_back"] is True
    assert "garbage collection" in launcher.log("final")

    committed, torn_after, invalid_after = scan(store)
    assert torn_after == [] and invalid_after == {}
    assert store.list_partial("") == []  # no temp file, no open multipart upload
    names = {c.name for c in committed}
    assert newest.name not in names  # the corrupt checkpoint was removed after the fallback
    assert not set(torn) & names
    for info in committed:  # what is left verifies completely
        load_checkpoint(store, info)
    keys = [k for k, _ in store.list("")]
    assert all(k.split("/")[0] in names or k == "LEASE.json" for k in keys), keys
