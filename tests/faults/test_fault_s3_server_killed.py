"""The S3 server PROCESS dies in the middle of a checkpoint upload and comes back later.

Real parts: Ceph radosgw on 127.0.0.1 (this module's own cluster: the test SIGKILLs the
radosgw daemon and starts it again on the same port over the same monitor and OSD, so
buckets and objects survive), the example training process (an MLP of 5.3 M parameters:
a 63 MB checkpoint, a PUT that takes a while on 2 cores). The other S3 fault tests use a
proxy that freezes or refuses; here the server itself dies with a request in flight.

1. radosgw is SIGKILLed 0.4 s into the save of step 40 (on a loaded machine that upload
   may already be done: then the kill lands between saves and the next save is the torn
   one): every save from then on fails with the store's "unreachable" error naming the
   endpoint, training goes on, later saves fail the same way (each one tries again);
2. the training process is SIGKILLed while the server is still down (a hard preemption);
3. a new attempt starts while the server is down: it fails at once with an error naming
   the store and what to check -- it does not start over from step 0 -- and writes nothing;
4. radosgw is back: the next attempt restores the newest COMPLETE checkpoint (step 20, or
   40 when that upload beat the kill; nothing of the torn save is taken) and ends bit-identical to an uninterrupted
   run; the store then holds only committed checkpoints.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE.parent / "s3"))
from s3_radosgw_server import RadosGateway, running_gateway  # noqa: E402

from checkpointing.events import Event, read_events  # noqa: E402
from checkpointing.manifest import scan_store  # noqa: E402
from checkpointing.stores.s3 import S3Store  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.s3]

EXAMPLE = REPO / "examples" / "train_example.py"
FLAGS = ["--model", "mlp", "--size", "large", "--steps", "100", "--seed", "3", "--periodic-every", "20",
         "--progress-every", "10", "--step-sleep", "0.02"]


@pytest.fixture(scope="module")
def gateway() -> Iterator[RadosGateway]:
    with running_gateway("faults-killed-radosgw-") as gw:
        yield gw


def _env(tmp: Path, uri: str, node: str, gw: RadosGateway | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPOTFLEET_", "AWS_"))}
    env.update({"SPOTFLEET_CHECKPOINT_URI": uri, "SPOTFLEET_EVENTS_FILE": str(tmp / "events.jsonl"),
                "SPOTFLEET_NODE_ID": node, "SPOTFLEET_NOTICE_SOURCES": "signal:SIGTERM",
                "SPOTFLEET_SPILL_DIR": str(tmp / "spill"), "PYTHONUNBUFFERED": "1"})
    if gw is not None:
        env.update({"AWS_ACCESS_KEY_ID": gw.access_key, "AWS_SECRET_ACCESS_KEY": gw.secret_key,
                    "AWS_ENDPOINT_URL": gw.endpoint_url, "AWS_REGION": gw.region})
    return env


def _events(tmp: Path, node: str) -> list[Event]:
    return [e for e in read_events(tmp / "events.jsonl") if e.node_id == node]


def _sha(out: str) -> str:
    return out.strip().splitlines()[-1].split("state_sha256=")[1]


def test_s3_server_killed_mid_upload_then_back_resumes_the_newest_complete_checkpoint(
        gateway: RadosGateway, tmp_path: Path) -> None:
    ref = subprocess.run([sys.executable, str(EXAMPLE), *FLAGS],
                         env=_env(tmp_path, str(tmp_path / "ref"), "ref", None),
                         capture_output=True, text=True, timeout=600)
    assert ref.returncode == 0, ref.stdout[-2000:] + ref.stderr[-2000:]
    bucket = f"killed-{uuid.uuid4().hex[:10]}"
    gateway.client().create_bucket(Bucket=bucket)
    uri = f"s3://{bucket}/run"
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen([sys.executable, str(EXAMPLE), *FLAGS], env=_env(tmp_path, uri, "a", gateway),
                                stdout=log, stderr=subprocess.STDOUT)
        try:
            end = time.monotonic() + 300
            while not [e for e in _events(tmp_path, "a") if e.kind == "save_started" and e.data["step"] >= 40]:
                assert proc.poll() is None and time.monotonic() < end, "no save at step 40"
                time.sleep(0.01)
            time.sleep(0.4)
            gateway.kill_gateway()  # 1. the server dies with the step-40 upload in flight
            end = time.monotonic() + 120
            while len([e for e in _events(tmp_path, "a") if e.kind == "save_failed"]) < 2:
                assert proc.poll() is None and time.monotonic() < end, "saves did not fail while the store was down"
                time.sleep(0.05)
        finally:
            proc.kill()  # 2. a hard preemption while the store is down
            proc.wait()
    failed = [e for e in _events(tmp_path, "a") if e.kind == "save_failed"]
    assert all("the S3 endpoint is unreachable" in e.data["reason"] and gateway.endpoint_url in e.data["reason"]
               for e in failed), [e.data for e in failed]
    committed = [e.data["step"] for e in _events(tmp_path, "a") if e.kind == "save_committed"]
    newest = max(committed)  # 20; 40 when its upload beat the kill (a CI run: 'assert 60 == 40')
    assert newest in (20, 40) and failed[0].data["step"] == newest + 20, (committed, [e.data for e in failed])

    # 3. a new attempt while the server is down: a clear error, no training from scratch
    down = subprocess.run([sys.executable, str(EXAMPLE), *FLAGS], env=_env(tmp_path, uri, "b", gateway),
                          capture_output=True, text=True, timeout=300)
    assert down.returncode not in (0, 75), down.stdout[-2000:]
    assert "StoreError" in down.stderr and f"s3://{bucket}/run" in down.stderr, down.stderr[-3000:]
    assert f"at endpoint {gateway.endpoint_url} failed: the S3 endpoint is unreachable: check that the server " \
           "is up" in down.stderr, down.stderr[-3000:]
    b = _events(tmp_path, "b")
    assert not [e for e in b if e.kind in ("start", "restore", "progress", "save_started")], [e.kind for e in b]

    # 4. the server is back: the newest COMPLETE checkpoint is restored, the end is bit-identical
    gateway.restart_gateway()
    done = subprocess.run([sys.executable, str(EXAMPLE), *FLAGS], env=_env(tmp_path, uri, "c", gateway),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    [restore] = [e for e in _events(tmp_path, "c") if e.kind == "restore"]
    assert restore.data["step"] == newest and not restore.data["fell_back"], restore.data
    assert _sha(done.stdout) == _sha(ref.stdout)
    store = S3Store.from_uri(f"s3://{gateway.access_key}:{gateway.secret_key}@{bucket}/run",
                             endpoint_url=gateway.endpoint_url, region=gateway.region)
    found = scan_store(store)
    assert not found.incomplete and not found.invalid  # the torn saves were collected
    assert max(i.step for i in found.committed) == 100
