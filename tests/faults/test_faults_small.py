"""Issue 9, item 9 (the smaller ones), reproduced for real.

* A SIGTERM that arrives before the session has armed its guard (the process is still
  loading torch / building its model) used to kill the process (exit -15). Now it is
  recorded at ``import checkpointing`` and handled as a notice once the guard is armed:
  emergency save, exit 75, and the next run resumes at exactly that step.
* A checkpoint whose manifest is consistent (checksums match) but whose ``state.pkl``
  names a forbidden global (``os.system``) used to crash restore with an
  ``UnpicklingError``. Now it counts as unusable: restore falls back to the previous
  checkpoint, says why, and never runs the global.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from checkpointing.events import read_events
from checkpointing.manifest import MANIFEST_NAME, encode_manifest, list_checkpoints
from checkpointing.runtime_env import EXIT_PREEMPTED
from checkpointing.saver import STATE_BLOB, AsyncSaver, restore_state
from checkpointing.stores.local import LocalStore
from checkpointing.torch_state import TrainingState

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "train_example.py"
FLAGS = ["--steps", "40", "--seed", "6", "--model", "mlp", "--size", "tiny",
         "--periodic-every", "10", "--progress-every", "5"]

# a process that imports checkpointing, then spends a while before training starts
# (standing in for importing torch and building a large model), then runs the example
SLOW_START = textwrap.dedent(f"""
    import sys, time
    import checkpointing
    print("imported", flush=True)
    time.sleep(2.0)
    import runpy
    sys.argv = [{str(EXAMPLE)!r}] + sys.argv[1:]
    runpy.run_path({str(EXAMPLE)!r}, run_name="__main__")
""")


def _env(tmp: Path, node: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPOTFLEET_", "AWS_"))}
    env.update({"SPOTFLEET_CHECKPOINT_URI": str(tmp / "ckpt"),
                "SPOTFLEET_EVENTS_FILE": str(tmp / "events.jsonl"), "SPOTFLEET_NODE_ID": node,
                "SPOTFLEET_NOTICE_SOURCES": "signal:SIGTERM", "PYTHONUNBUFFERED": "1", **extra})
    return env


def _sigterm_during_start(tmp: Path, node: str, env: dict[str, str]) -> tuple[int, str]:
    proc = subprocess.Popen([sys.executable, "-c", SLOW_START, *FLAGS], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "imported"
    proc.send_signal(signal.SIGTERM)  # the guard is not armed yet
    out, _ = proc.communicate(timeout=120)
    return proc.returncode, out


@pytest.mark.slow
def test_sigterm_before_the_guard_is_armed_exits_75_and_resumes(tmp_path: Path) -> None:
    # a generous window: on a loaded 2-core machine importing torch alone can take 20 s+,
    # and an unclaimed early SIGTERM ends the process when the window is over (exit 143)
    code, out = _sigterm_during_start(tmp_path, "a", _env(tmp_path, "a",
                                                          SPOTFLEET_GRACE_SECONDS="300"))
    assert code == EXIT_PREEMPTED, out[-3000:]
    evs = [e for e in read_events(tmp_path / "events.jsonl") if e.node_id == "a"]
    notices = [e for e in evs if e.kind == "notice"]
    assert len(notices) == 1 and notices[0].data["source"] == "signal"
    exit_event = evs[-1]
    assert exit_event.kind == "exit" and exit_event.data["reason"] == "preempted"
    stop = exit_event.data["step"]
    assert exit_event.data["saved_step"] == stop  # the emergency save committed
    assert "before the preemption guard was armed" in out

    proc = subprocess.run([sys.executable, str(EXAMPLE), *FLAGS], env=_env(tmp_path, "b"),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    evs = [e for e in read_events(tmp_path / "events.jsonl") if e.node_id == "b"]
    assert [e.data["step"] for e in evs if e.kind == "restore"] == [stop]


@pytest.mark.slow
def test_early_sigterm_handler_is_only_for_fleet_processes(tmp_path: Path) -> None:
    env = _env(tmp_path, "x", SPOTFLEET_EARLY_SIGTERM="off")
    code, _out = _sigterm_during_start(tmp_path, "x", env)
    assert code == -signal.SIGTERM  # opted out: the default action, as before


def test_unclaimed_early_sigterm_ends_the_process_after_the_window(tmp_path: Path) -> None:
    """A fleet process that imports checkpointing but never arms a guard is not made
    immune to SIGTERM: it exits 143 once the grace window is over; a program that set
    its own SIGTERM handler meanwhile keeps it."""
    env = _env(tmp_path, "u", SPOTFLEET_GRACE_SECONDS="2")
    for code, want in (("", 143), ("signal.signal(signal.SIGTERM, lambda *a: None); ", 0)):
        script = (f"import checkpointing, signal, time; {code}print('ready', flush=True); "
                  "time.sleep(8)")
        proc = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE,
                                text=True)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == want


def _forge_forbidden_state(store: LocalStore, name: str) -> None:
    """Replace state.pkl by a pickle naming os.system and re-seal the manifest so that
    every checksum is consistent (a hostile or foreign writer, not a torn write)."""
    class _Evil:
        def __reduce__(self):
            return (os.system, ("touch " + str(store.root / "PWNED"),))

    evil = pickle.dumps({"format": "spotfleet-state-v1", "skeleton": _Evil(), "tensors": [],
                         "flat_bytes": 0})
    (store.root / name / STATE_BLOB).write_bytes(evil)
    manifest_path = store.root / name / MANIFEST_NAME
    doc = json.loads(manifest_path.read_text())
    doc.pop("manifest_sha256")
    doc["blobs"][STATE_BLOB] = {"bytes": len(evil), "sha256": hashlib.sha256(evil).hexdigest()}
    manifest_path.write_bytes(encode_manifest(doc))


def test_state_naming_a_forbidden_global_falls_back(tmp_path: Path) -> None:
    model = torch.nn.Linear(4, 3)
    store = LocalStore(tmp_path / "ckpt")
    saver = AsyncSaver(store, shard_bytes=4096)
    saved = {}
    for step in (5, 10):
        with torch.no_grad():
            model.weight.add_(1.0)
        saved[step] = model.weight.detach().clone()
        saver.save(TrainingState(model=model, step=step).capture, step, "periodic", block=True)
    saver.close()
    newest = list_checkpoints(store)[-1]
    _forge_forbidden_state(store, newest.name)
    assert [c.step for c in list_checkpoints(store)] == [5, 10]  # the manifest still verifies

    outcome = restore_state(store)  # used to raise pickle.UnpicklingError
    assert outcome is not None and outcome.info.step == 5 and outcome.fell_back
    assert "posix.system" in outcome.reason and "not allowed" in outcome.reason
    assert not (store.root / "PWNED").exists()  # the global never ran
    restored = torch.nn.Linear(4, 3)
    assert TrainingState(model=restored).apply(outcome.value) == 5
    assert torch.equal(restored.weight, saved[5])


def test_s3_store_timeouts_are_bounded_and_configurable(monkeypatch: pytest.MonkeyPatch) -> None:
    """A frozen S3 used to hold a request for boto3's defaults (60 s read timeout, more
    with retries); the store's bound is now explicit, smaller and set per deployment."""
    from checkpointing.stores.base import StoreError
    from checkpointing.stores.s3 import S3Store

    for var in ("SPOTFLEET_S3_CONNECT_TIMEOUT_SECONDS", "SPOTFLEET_S3_READ_TIMEOUT_SECONDS",
                "SPOTFLEET_S3_MAX_ATTEMPTS"):
        monkeypatch.delenv(var, raising=False)
    store = S3Store("b", "p", endpoint_url="http://127.0.0.1:9")
    config = store.client.meta.config
    assert (config.connect_timeout, config.read_timeout) == (3.0, 20.0)
    assert config.retries == {"total_max_attempts": 3, "mode": "standard"}  # tries, not retries
    assert store.request_bound_seconds == 3 * (3.0 + 20.0) + (1 + 2)

    monkeypatch.setenv("SPOTFLEET_S3_READ_TIMEOUT_SECONDS", "2")
    monkeypatch.setenv("SPOTFLEET_S3_MAX_ATTEMPTS", "2")
    store = S3Store("b", "p", endpoint_url="http://127.0.0.1:9")
    assert store.client.meta.config.read_timeout == 2.0
    assert store.request_bound_seconds == 2 * (3.0 + 2.0) + 1
    assert S3Store("b", "p", endpoint_url="http://127.0.0.1:9",
                   read_timeout_seconds=7).read_timeout_seconds == 7.0  # explicit wins

    monkeypatch.setenv("SPOTFLEET_S3_READ_TIMEOUT_SECONDS", "soon")
    with pytest.raises(StoreError, match="SPOTFLEET_S3_READ_TIMEOUT_SECONDS"):
        S3Store("b", "p", endpoint_url="http://127.0.0.1:9")
