"""Saver, commit protocol, retention and restore-with-fallback on a real local store."""

from __future__ import annotations

import json
import logging
import os
import random
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from checkpointing.events import EventLog, read_events
from checkpointing.manifest import (
    ENV_DEBUG_PERSIST_DELAY,
    MANIFEST_NAME,
    CheckpointInfo,
    apply_retention,
    list_checkpoints,
    plan_retention,
    scan,
)
from checkpointing.saver import AsyncSaver, restore_state
from checkpointing.snapshot import SnapshotBuffers, flatten
from checkpointing.stores.local import LocalStore
from checkpointing.torch_state import TrainingState, state_sha256


def _objects(seed: int = 0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.GELU(), torch.nn.Linear(48, 4))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    return model, opt, sched


def _train(model, opt, sched, steps: int) -> None:
    for _ in range(steps):
        opt.zero_grad()
        x = torch.randn(16, 32)
        model(x).pow(2).mean().backward()
        opt.step()
        sched.step()


def _saver(tmp_path: Path, **kw) -> tuple[AsyncSaver, Path]:
    events = tmp_path / "events.jsonl"
    return AsyncSaver(LocalStore(tmp_path / "ckpt"), events=EventLog(events), shard_bytes=4096, **kw), events


def test_local_store_put_get_list_delete(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    store.put_bytes("a/b.bin", b"hello")
    store.put_file("a/c.bin", tmp_path / "a" / "b.bin")
    assert store.get_bytes("a/c.bin") == b"hello"
    assert sorted(store.list("a/")) == [("a/b.bin", 5), ("a/c.bin", 5)]
    assert not [p for p in (tmp_path / "a").iterdir() if ".tmp-" in p.name]
    with pytest.raises(KeyError):
        store.get_bytes("a/missing")
    store.delete_prefix("a/")
    assert list(store.list()) == []
    with pytest.raises(Exception, match="invalid store key"):
        store.put_bytes("../escape", b"x")


def test_roundtrip_is_bit_identical_including_rng(tmp_path: Path) -> None:
    model, opt, sched = _objects()
    _train(model, opt, sched, 3)
    random.seed(5)
    np.random.seed(6)
    state = TrainingState(model, opt, sched, step=3, data_position={"epoch": 1, "offset": 7},
                          extras={"tokens": np.arange(5), "name": "run"})
    saver, events = _saver(tmp_path)
    result = saver.save(state.capture, 3, "periodic", block=True)
    assert result is not None and result.ok and result.bytes > 0
    expected = state_sha256(model, opt, sched)
    want_py, want_np, want_torch = random.random(), np.random.rand(), torch.rand(1)

    model2, opt2, sched2 = _objects(seed=1)
    assert state_sha256(model2, opt2, sched2) != expected
    restored = TrainingState(model2, opt2, sched2)
    outcome = restore_state(saver.store)
    assert outcome is not None and not outcome.fell_back
    assert restored.apply(outcome.value) == 3
    assert state_sha256(model2, opt2, sched2) == expected
    assert restored.data_position == {"epoch": 1, "offset": 7}
    assert restored.extras["name"] == "run" and list(restored.extras["tokens"]) == [0, 1, 2, 3, 4]
    assert (random.random(), np.random.rand()) == (want_py, want_np)
    assert torch.equal(torch.rand(1), want_torch)
    # training continues identically from the restored copy
    torch.manual_seed(9)
    _train(model, opt, sched, 2)
    torch.manual_seed(9)
    _train(model2, opt2, sched2, 2)
    assert state_sha256(model2, opt2, sched2) == state_sha256(model, opt, sched)
    kinds = [e.kind for e in read_events(events)]
    assert kinds == ["save_started", "save_committed"]
    committed = read_events(events)[1].data
    assert committed["kind"] == "periodic" and committed["bytes"] == result.bytes
    assert committed["location"].endswith(result.info.name)


def test_buffers_are_reused_between_saves(tmp_path: Path) -> None:
    model, opt, sched = _objects()
    _train(model, opt, sched, 1)
    saver, _ = _saver(tmp_path)
    state = TrainingState(model, opt, sched)
    for step in range(1, 5):
        _train(model, opt, sched, 1)
        state.step = step
        saver.save(state.capture, step, "periodic", block=True)
    assert saver.buffers.allocations == 1


def test_unsupported_state_is_rejected_with_the_path() -> None:
    with pytest.raises(TypeError, match=r"state\.extras\.bad"):
        flatten({"extras": {"bad": object()}})
    buffers = SnapshotBuffers()
    snap = buffers.capture({"x": torch.arange(3.0), "y": [1, "a"]})
    assert snap.tensor_count == 1


def _two_checkpoints(tmp_path: Path) -> tuple[AsyncSaver, list[CheckpointInfo], str]:
    model, opt, sched = _objects()
    saver, _ = _saver(tmp_path, keep_periodic=5)
    state = TrainingState(model, opt, sched)
    _train(model, opt, sched, 1)
    state.step = 1
    saver.save(state.capture, 1, "periodic", block=True)
    first_sha = state_sha256(model, opt, sched)
    _train(model, opt, sched, 1)
    state.step = 2
    saver.save(state.capture, 2, "periodic", block=True)
    infos = list_checkpoints(saver.store)
    assert [i.step for i in infos] == [1, 2]
    return saver, infos, first_sha


def _corrupt(root: Path, info: CheckpointInfo, how: str) -> None:
    ckpt = root / info.name
    if how == "truncate_blob":
        p = ckpt / "tensors-00000.bin"
        p.write_bytes(p.read_bytes()[:-100])
    elif how == "flip_byte":
        p = ckpt / "tensors-00001.bin"
        data = bytearray(p.read_bytes())
        data[17] ^= 0xFF
        p.write_bytes(bytes(data))
    elif how == "missing_blob":
        (ckpt / "state.pkl").unlink()
    elif how == "torn_manifest":
        p = ckpt / MANIFEST_NAME
        p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2])
    elif how == "edited_manifest":
        p = ckpt / MANIFEST_NAME
        doc = json.loads(p.read_text())
        doc["step"] = 99
        p.write_text(json.dumps(doc))
    elif how == "no_manifest":
        (ckpt / MANIFEST_NAME).unlink()
    else:  # pragma: no cover
        raise AssertionError(how)


@pytest.mark.parametrize("how", ["truncate_blob", "flip_byte", "missing_blob", "torn_manifest",
                                 "edited_manifest", "no_manifest"])
def test_torn_checkpoint_is_never_loaded_falls_back(tmp_path: Path, how: str, caplog) -> None:
    saver, infos, first_sha = _two_checkpoints(tmp_path)
    _corrupt(tmp_path / "ckpt", infos[1], how)
    model, opt, sched = _objects(seed=3)
    with caplog.at_level(logging.WARNING):
        outcome = restore_state(saver.store)
    assert outcome is not None and outcome.info.step == 1
    TrainingState(model, opt, sched).apply(outcome.value)
    assert state_sha256(model, opt, sched) == first_sha
    if how == "no_manifest":  # an uncommitted save is simply not a checkpoint
        assert not outcome.fell_back
    else:
        assert outcome.fell_back and infos[1].name in outcome.reason
        assert any("fall" in r.getMessage() or "ignoring" in r.getMessage() for r in caplog.records)


def test_all_corrupt_means_fresh_start(tmp_path: Path) -> None:
    saver, infos, _ = _two_checkpoints(tmp_path)
    for info in infos:
        _corrupt(tmp_path / "ckpt", info, "flip_byte")
    assert restore_state(saver.store) is None


def _info(step: int, kind: str, created: float | None = None) -> CheckpointInfo:
    return CheckpointInfo(name=f"ckpt-{step:012d}-{kind}-x", kind=kind, step=step, bytes=1,
                          save_seconds=0, stall_seconds=0, location="", created=created or step)


def test_retention_plan() -> None:
    committed = [_info(s, "periodic") for s in (10, 20, 30, 40)]
    committed += [_info(25, "insurance"), _info(35, "insurance"), _info(45, "insurance"),
                  _info(46, "emergency"), _info(47, "insurance")]
    doomed = plan_retention(committed, ["ckpt-000000000041-insurance-y", "ckpt-000000000050-periodic-z"],
                            keep_periodic=2, keep_insurance=2)
    assert sorted(doomed) == sorted([
        "ckpt-000000000010-periodic-x", "ckpt-000000000020-periodic-x",   # beyond keep_periodic
        "ckpt-000000000025-insurance-x", "ckpt-000000000035-insurance-x",  # older than periodic 40
        "ckpt-000000000045-insurance-x",                                   # over keep_insurance
        "ckpt-000000000041-insurance-y",                                   # torn, older than newest
    ])
    with pytest.raises(ValueError, match="keep_periodic"):
        plan_retention(committed, [], keep_periodic=0, keep_insurance=1)


def test_retention_after_commit_on_store(tmp_path: Path) -> None:
    model, opt, sched = _objects()
    saver, _ = _saver(tmp_path, keep_periodic=2)
    state = TrainingState(model, opt, sched)
    plan = [(1, "periodic"), (2, "insurance"), (3, "periodic"), (4, "insurance"), (5, "emergency"),
            (6, "periodic")]
    for step, kind in plan:
        state.step = step
        saver.save(state.capture, step, kind, block=True)
    assert [(i.step, i.kind) for i in list_checkpoints(saver.store)] == [(3, "periodic"), (6, "periodic")]
    (tmp_path / "ckpt" / "ckpt-000000000002-periodic-dead").mkdir()
    (tmp_path / "ckpt" / "ckpt-000000000002-periodic-dead" / "tensors-00000.bin").write_bytes(b"x")
    assert scan(saver.store)[1] == ["ckpt-000000000002-periodic-dead"]
    assert apply_retention(saver.store, keep_periodic=2) == ["ckpt-000000000002-periodic-dead"]


def test_emergency_supersedes_in_flight_save(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(ENV_DEBUG_PERSIST_DELAY, "0.05")
    model, opt, sched = _objects()
    _train(model, opt, sched, 1)
    saver, events = _saver(tmp_path)
    state = TrainingState(model, opt, sched, step=1)
    saver.save(state.capture, 1, "periodic")
    assert saver.in_flight == (1, "periodic")
    assert saver.save(state.capture, 1, "insurance") is None  # skipped: one in flight
    _train(model, opt, sched, 1)
    state.step = 2
    want = state_sha256(model, opt, sched)
    result = saver.save(state.capture, 2, "emergency", deadline=time.time() + 30)
    assert result is not None and result.ok and result.kind == "emergency"
    assert [(i.step, i.kind) for i in list_checkpoints(saver.store)] == [(2, "emergency")]
    assert sorted(os.listdir(tmp_path / "ckpt")) == [result.info.name]  # abandoned prefix removed
    failed = [e for e in read_events(events) if e.kind == "save_failed"]
    assert failed and failed[0].data["step"] == 1 and "abandoned" in failed[0].data["reason"]
    model2, opt2, sched2 = _objects(seed=4)
    TrainingState(model2, opt2, sched2).apply(restore_state(saver.store).value)
    assert state_sha256(model2, opt2, sched2) == want


def test_emergency_that_cannot_fit_the_window_says_so(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(ENV_DEBUG_PERSIST_DELAY, "0.3")
    model, opt, sched = _objects()
    saver, events = _saver(tmp_path)
    state = TrainingState(model, opt, sched, step=1)
    result = saver.save(state.capture, 1, "emergency", deadline=time.time() + 0.6)
    assert result is not None and not result.ok and "deadline" in (result.error or "")
    failed = [e for e in read_events(events) if e.kind == "save_failed"]
    assert failed and "before the preemption deadline" in failed[0].data["reason"]
    saver.close()


def test_parallel_copy_path_is_exact(tmp_path: Path, monkeypatch) -> None:
    import checkpointing.snapshot as snapshot

    monkeypatch.setattr(snapshot, "PARALLEL_COPY_MIN_BYTES", 0)
    monkeypatch.setattr(snapshot, "COPY_PIECE_BYTES", 1000)  # many pieces over 2 threads
    model, opt, sched = _objects()
    _train(model, opt, sched, 2)
    saver = AsyncSaver(LocalStore(tmp_path), shard_bytes=4096)
    saver.buffers.copy_threads = 2
    saver.save(TrainingState(model, opt, sched, step=2).capture, 2, "periodic", block=True)
    model2, opt2, sched2 = _objects(seed=5)
    TrainingState(model2, opt2, sched2).apply(restore_state(saver.store).value)
    assert state_sha256(model2, opt2, sched2) == state_sha256(model, opt, sched)


def test_deferred_sync_block_writes_everything(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    with store.deferred_sync():
        store.put_bytes("c/a.bin", b"a" * 10)
        store.put_bytes("c/b.bin", b"b" * 20)
        with store.deferred_sync():  # nested blocks are fine
            store.put_bytes("c/d.bin", b"d")
    assert sorted(store.list("c/")) == [("c/a.bin", 10), ("c/b.bin", 20), ("c/d.bin", 1)]
    assert not [p for p in (tmp_path / "c").iterdir() if ".tmp-" in p.name]


def test_retention_orders_by_step_not_by_the_writers_clock() -> None:
    # steps 10-30 written by node A; 40-60 by a relaunch on node B whose clock is 10 min
    # behind: B's checkpoints are the newest ones although their `created` is earlier
    node_a = [_info(s, "periodic", created=10_000.0 + s) for s in (10, 20, 30)]
    node_b = [_info(s, "periodic", created=10_000.0 - 600 + s) for s in (40, 50, 60)]
    node_b.append(_info(65, "insurance", created=10_000.0 - 600 + 65))
    doomed = plan_retention(node_a + node_b, [], keep_periodic=3, keep_insurance=2)
    assert sorted(doomed) == ["ckpt-000000000010-periodic-x", "ckpt-000000000020-periodic-x",
                              "ckpt-000000000030-periodic-x"]
    # what a save just committed is never deleted, whatever its step
    assert "ckpt-000000000010-periodic-x" not in plan_retention(
        node_a + node_b, [], keep_periodic=3, keep_insurance=2, keep=["ckpt-000000000010-periodic-x"])


def test_store_io_error_during_restore_is_raised_not_a_fallback(tmp_path: Path) -> None:
    from checkpointing.stores.base import StoreError

    saver, _infos, _ = _two_checkpoints(tmp_path)

    class Flaky(LocalStore):
        def open_read(self, key):
            raise StoreError("connection reset")

    with pytest.raises(StoreError, match="may be intact"):
        restore_state(Flaky(tmp_path / "ckpt"))


def _bump_manifest_version(root: Path, info: CheckpointInfo, version: int = 2) -> None:
    from checkpointing.manifest import encode_manifest

    path = root / info.name / MANIFEST_NAME
    doc = json.loads(path.read_text())
    doc.pop("manifest_sha256")
    doc["version"] = version
    path.write_bytes(encode_manifest(doc))


def test_checkpoint_of_a_newer_library_is_kept_and_restore_refuses_to_skip_it(tmp_path: Path) -> None:
    from checkpointing.manifest import CheckpointTooNew, collect_garbage

    saver, infos, _ = _two_checkpoints(tmp_path)
    _bump_manifest_version(tmp_path / "ckpt", infos[1])  # step 2, written by "spotfleet v2"
    with pytest.raises(CheckpointTooNew) as err:
        restore_state(saver.store)
    msg = str(err.value)
    assert infos[1].name in msg and "step 2" in msg
    assert "version is 2" in msg and "reads version 1" in msg and "upgrade spotfleet" in msg
    # neither garbage collection, retention nor the next save delete it
    assert infos[1].name not in collect_garbage(saver.store).deleted
    assert infos[1].name not in apply_retention(saver.store, keep_periodic=1)
    state = TrainingState(*_objects(), step=3)
    saver.save(state.capture, 3, "periodic", block=True)
    saver.close()
    assert (tmp_path / "ckpt" / infos[1].name / MANIFEST_NAME).exists()
    assert (tmp_path / "ckpt" / infos[1].name / "state.pkl").exists()


def test_newer_format_checkpoint_below_the_newest_does_not_block_restore(tmp_path: Path) -> None:
    from checkpointing.manifest import CheckpointTooNew

    saver, infos, _ = _two_checkpoints(tmp_path)
    _bump_manifest_version(tmp_path / "ckpt", infos[0])  # step 1; step 2 is loadable
    outcome = restore_state(saver.store)
    assert outcome is not None and outcome.info.step == 2 and not outcome.fell_back
    _corrupt(tmp_path / "ckpt", infos[1], "flip_byte")  # falling back would skip step 1
    with pytest.raises(CheckpointTooNew, match=infos[0].name):
        restore_state(saver.store)
