"""The example workload checkpoints to a REAL S3-compatible server (Ceph radosgw on
127.0.0.1, started and stopped here): SIGKILL in the middle of a save, SIGTERM ->
emergency save -> exit 75, then completion -- bit-identical to an uninterrupted run that
used a local directory."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from ckrt_inprocess import run_main_in_process

from checkpointing.events import read_events
from checkpointing.manifest import ENV_DEBUG_PERSIST_DELAY, list_checkpoints
from checkpointing.runtime_env import EXIT_PREEMPTED
from checkpointing.stores.s3 import S3Store

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "train_example.py"
FLAGS = ["--steps", "80", "--seed", "5", "--model", "mlp", "--size", "tiny",
         "--step-sleep", "0.01", "--periodic-every", "10", "--progress-every", "5"]

sys.path.insert(0, str(REPO / "tests" / "s3"))
from s3_radosgw_server import RadosGateway, running_gateway  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.s3]


@pytest.fixture(scope="module")
def gateway():
    with running_gateway("ckrt-radosgw-") as gw:
        yield gw


def _env(tmp: Path, uri: str, gw: RadosGateway | None, attempt: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPOTFLEET_", "AWS_"))}
    env.update({
        "SPOTFLEET_CHECKPOINT_URI": uri,
        "SPOTFLEET_EVENTS_FILE": str(tmp / "events.jsonl"),
        "SPOTFLEET_NODE_ID": attempt,
        "SPOTFLEET_NOTICE_SOURCES": "signal:SIGTERM",
        ENV_DEBUG_PERSIST_DELAY: "0.05",
    })
    if gw is not None:
        env.update({"AWS_ACCESS_KEY_ID": gw.access_key, "AWS_SECRET_ACCESS_KEY": gw.secret_key,
                    "AWS_ENDPOINT_URL": gw.endpoint_url, "AWS_REGION": gw.region})
    return env


def _reference_sha(tmp: Path) -> str:
    run_main_in_process(EXAMPLE, FLAGS, _env(tmp, str(tmp / "ckpt"), None, "ref"), "train_example_ref_s3")
    return [e for e in read_events(tmp / "events.jsonl") if e.kind == "exit"][-1].data["state_sha256"]


def _wait(tmp: Path, attempt: str, predicate, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate([e for e in read_events(tmp / "events.jsonl") if e.node_id == attempt]):
            return
        time.sleep(0.005)
    raise AssertionError(f"attempt {attempt}: condition not reached in {timeout} s")


def test_example_on_real_s3_kill_mid_save_sigterm_then_complete(gateway: RadosGateway, tmp_path: Path) -> None:
    reference = _reference_sha(tmp_path / "ref")
    bucket = f"ckrt-{uuid.uuid4().hex[:12]}"
    gateway.client().create_bucket(Bucket=bucket)
    uri = f"s3://{bucket}/run"
    work = tmp_path / "s3run"
    argv = [sys.executable, str(EXAMPLE), *FLAGS]

    # 1) SIGKILL right after a save started (inside the slowed persist phase)
    proc = subprocess.Popen(argv, env=_env(work, uri, gateway, "k"), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    _wait(work, "k", lambda evs: any(e.kind == "save_started" and e.data["step"] >= 20 for e in evs))
    time.sleep(0.03)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    evs = [e for e in read_events(work / "events.jsonl") if e.node_id == "k"]
    committed = [e.data["step"] for e in evs if e.kind == "save_committed"]
    started = [e.data["step"] for e in evs if e.kind == "save_started"]
    assert started[-1] not in committed  # the kill landed inside that save

    # 2) SIGTERM -> emergency save to S3 -> exit 75
    proc = subprocess.Popen(argv, env=_env(work, uri, gateway, "t"), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    _wait(work, "t", lambda evs: any(e.kind == "progress" and e.data["step"] >= 45 for e in evs))
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_PREEMPTED, out
    evs = [e for e in read_events(work / "events.jsonl") if e.node_id == "t"]
    restore = [e.data for e in evs if e.kind == "restore"]
    assert restore and restore[0]["step"] == max(committed) and restore[0]["location"].startswith(uri)
    stopped = [e.data for e in evs if e.kind == "exit"][-1]
    assert stopped["reason"] == "preempted"

    # 3) complete: resumes at the exact stop step, ends bit-identical
    proc = subprocess.Popen(argv, env=_env(work, uri, gateway, "f"), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    evs = [e for e in read_events(work / "events.jsonl") if e.node_id == "f"]
    assert [e.data["step"] for e in evs if e.kind == "restore"] == [stopped["step"]]
    assert [e for e in evs if e.kind == "exit"][-1].data["state_sha256"] == reference

    store = S3Store(bucket, "run", client=gateway.client())
    kinds = [(c.step, c.kind) for c in list_checkpoints(store)]
    assert kinds[-1] == (80, "periodic") and all(k == "periodic" for _s, k in kinds)
