"""Uploading ("promoting") a spilled emergency checkpoint to the store while the
relaunched process saves: garbage collection and retention must spare the upload, the
spilled copy is deleted only once the uploaded one verifies, and the newest committed
checkpoint stays the newest when the upload ends after a newer save."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import torch

from checkpointing.events import EventLog
from checkpointing.manifest import list_checkpoints, verify_blobs
from checkpointing.session import TrainingSession
from checkpointing.stores.base import StoreError
from checkpointing.stores.local import LocalStore


class PromotionControlledStore(LocalStore):
    """A local store whose writes from the upload thread ("ckpt-promote-*") can fail,
    pause after the first blob until released, or be truncated."""

    def __init__(self, root: Path, mode: str):
        super().__init__(root)
        self.mode = mode
        self.release = threading.Event()
        self.paused = threading.Event()
        self._promote_puts = 0

    def put_file(self, key, src, size=None):
        if threading.current_thread().name.startswith("ckpt-promote"):
            if self.mode == "fail":
                raise StoreError("emulated: the store stopped answering")
            self._promote_puts += 1
            if self.mode == "pause" and self._promote_puts == 2:
                self.paused.set()
                assert self.release.wait(60), "the test never released the upload"
            if self.mode == "truncate":
                data = src.read()
                return super().put_bytes(key, data[:-1])
        return super().put_file(key, src, size)


def _model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))


def _spill_step_15(tmp_path: Path, monkeypatch) -> Path:
    """Process 1: periodic save at step 10, then an emergency save of step 15 that goes
    to the spill area (store in trouble) and whose upload fails. Returns the spill dir."""
    spill_dir = tmp_path / "spill"
    monkeypatch.setenv("SPOTFLEET_SPILL_DIR", str(spill_dir))
    store = PromotionControlledStore(tmp_path / "ckpt", "fail")
    model = _model()
    first = TrainingSession(store=store, model=model, periodic_every=10, guard=None, job_id="j",
                            shard_bytes=2048, events=EventLog(tmp_path / "events1.jsonl"))
    first.restore()
    for _ in range(15):
        with first.step():
            pass
    first.saver.wait(10)
    first.saver.store_trouble = "emulated: the store stopped answering"
    result = first.saver.save(first.state.capture, 15, "emergency", deadline=time.time() + 20)
    assert result is not None and result.ok and result.spilled
    first.saver.promotion.done.wait(10)
    assert not first.saver.promotion.ok
    first.saver.close()
    first._release_lease()
    assert [c.step for c in list_checkpoints(LocalStore(spill_dir))] == [15]
    return spill_dir


def test_save_during_the_upload_of_a_restored_spill_spares_it(tmp_path: Path, monkeypatch) -> None:
    spill_dir = _spill_step_15(tmp_path, monkeypatch)
    store = PromotionControlledStore(tmp_path / "ckpt", "pause")
    second = TrainingSession(store=store, model=_model(1), periodic_every=1, guard=None, job_id="j",
                             shard_bytes=2048, events=EventLog(tmp_path / "events2.jsonl"))
    assert second.restore() == 15  # from the spill area; its upload starts now
    promotion = second.saver.promotion
    assert store.paused.wait(30)  # the upload has written its first blob and is slow
    with second.step():
        pass  # step 16: a periodic save with its pre-write garbage collection, then retention
    result = second.saver.wait(30)
    assert result is not None and result.ok and result.step == 16
    store.release.set()
    assert promotion.done.wait(30) and promotion.ok, promotion.error
    uploaded = {c.step: c for c in list_checkpoints(store)}
    assert sorted(uploaded) == [10, 15, 16]
    verify_blobs(store, uploaded[15])  # complete, every blob's sha256 as in its manifest
    assert list_checkpoints(LocalStore(spill_dir)) == []  # deleted only after that
    assert second.saver.last_committed.step == 16  # the upload ended after a newer save
    assert second.finish() == 0
    assert TrainingSession(store=LocalStore(tmp_path / "ckpt"), model=_model(2), guard=None,
                           job_id="j").restore() == 16


def test_spilled_copy_is_kept_when_the_uploaded_copy_does_not_verify(tmp_path: Path, monkeypatch) -> None:
    spill_dir = _spill_step_15(tmp_path, monkeypatch)
    store = PromotionControlledStore(tmp_path / "ckpt", "truncate")
    second = TrainingSession(store=store, model=_model(1), guard=None, job_id="j",
                             events=EventLog(tmp_path / "events2.jsonl"))
    assert second.restore() == 15
    promotion = second.saver.promotion
    assert promotion.done.wait(30)
    assert not promotion.ok and "bytes" in (promotion.error or "")
    assert [c.step for c in list_checkpoints(LocalStore(spill_dir))] == [15]  # not lost
    assert [c.step for c in list_checkpoints(store)] == [10]  # no unusable copy committed
    second.saver.close()
    second._release_lease()


class FreezableStore(LocalStore):
    """A local store whose checkpoint blob writes hang while ``frozen`` (an S3 endpoint
    that stopped answering) until ``thaw`` is set."""

    def __init__(self, root: Path):
        super().__init__(root)
        self.frozen = False
        self.thaw = threading.Event()

    def put_file(self, key, src, size=None):
        if self.frozen and key.startswith("ckpt-"):
            assert self.thaw.wait(120), "the test never thawed the store"
        return super().put_file(key, src, size)


def test_notice_during_the_final_save_ends_its_wait_and_takes_the_emergency_path(
        tmp_path: Path, monkeypatch) -> None:
    import os
    import signal

    from checkpointing.events import read_events
    from checkpointing.guard import PreemptionGuard
    from checkpointing.notices.signals import SignalSource
    from checkpointing.runtime_env import EXIT_PREEMPTED

    spill_dir = tmp_path / "spill"
    monkeypatch.setenv("SPOTFLEET_SPILL_DIR", str(spill_dir))
    monkeypatch.setenv("SPOTFLEET_FINAL_SAVE_TIMEOUT_SECONDS", "60")
    store = FreezableStore(tmp_path / "ckpt")
    guard = PreemptionGuard([SignalSource("SIGUSR1")], grace_seconds=3.0)
    session = TrainingSession(store=store, model=_model(), guard=guard, job_id="j", total_steps=6,
                              events=EventLog(tmp_path / "events.jsonl"))
    session.restore()
    for _ in range(6):
        with session.step():
            pass
    store.frozen = True  # the final save hangs in the store ...
    notice = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGUSR1))
    notice.start()  # ... and the preemption notice comes while finish() waits for it
    try:
        code = session.finish()
        spilled = list_checkpoints(LocalStore(spill_dir))
    finally:
        notice.cancel()
        store.thaw.set()
    assert code == EXIT_PREEMPTED  # not 74 after the 60 s final-save timeout
    assert [c.step for c in spilled] == [6]  # the final state, on local disk
    exit_event = read_events(tmp_path / "events.jsonl")[-1].data
    assert exit_event["reason"] == "preempted"
    assert exit_event["spilled_step"] == 6 and exit_event["saved_step"] is None
    promotion = session.saver.promotion
    assert promotion is not None and promotion.done.wait(30)
    restarted = TrainingSession(store=LocalStore(tmp_path / "ckpt"), model=_model(1), guard=None,
                                job_id="j")
    assert restarted.restore() == 6
    restarted.finish()
