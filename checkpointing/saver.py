"""Asynchronous checkpoint saver: snapshot now, persist in the background.

``AsyncSaver.save(state, step, kind)`` copies every tensor into the reusable CPU buffer
(``SnapshotBuffers``; this copy is the only time the training loop stalls) and hands
the buffer to a background thread that writes the blobs and commits the manifest
(``checkpointing.manifest``), then applies retention.

Concurrency rules (at most one save in flight):

* periodic save while another save is in flight: waits for it, then saves
  (back-pressure; the wait is counted in the stall);
* insurance save while another save is in flight: skipped (the in-flight save is
  already the insurance);
* emergency save while another save is in flight: if the in-flight save holds the same
  step it is simply awaited (it is the emergency checkpoint); otherwise it is
  ABANDONED: its writer stops before its next blob (<= one 64 MiB blob later), its
  partial prefix is deleted, and the emergency snapshot is written right away. This
  commits the emergency save sooner than letting the old one finish, because only one
  checkpoint's bytes go through the store before the deadline.

An emergency save with a ``deadline`` (unix seconds) is waited for until shortly before
the deadline; if it has not committed by then, a ``save_failed`` event and an error log
say so, and that the previous checkpoint will be used.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch

from checkpointing.events import EventLog
from checkpointing.manifest import (
    CheckpointInfo,
    CheckpointWriter,
    CorruptCheckpoint,
    RestoreOutcome,
    SaveAbandoned,
    apply_retention,
    read_blob,
    read_blob_into,
    restore_latest,
)
from checkpointing.snapshot import Snapshot, SnapshotBuffers, load_state, loads_header
from checkpointing.stores.base import CheckpointStore

log = logging.getLogger("checkpointing.saver")

STATE_BLOB = "state.pkl"
SHARD_BLOB = "tensors-{:05d}.bin"
DEFAULT_SHARD_BYTES = 64 << 20
#: how long before the notice deadline an unfinished emergency save is declared failed
DEADLINE_MARGIN_SECONDS = 0.5


@dataclass(frozen=True)
class SaveResult:
    """Outcome of one save. Times in seconds, sizes in bytes."""

    step: int
    kind: str
    ok: bool
    bytes: int
    stall_seconds: float
    persist_seconds: float
    info: CheckpointInfo | None = None
    error: str | None = None
    abandoned: bool = False


class _Job:
    def __init__(self, step: int, kind: str, snapshot: Snapshot):
        self.step = step
        self.kind = kind
        self.snapshot = snapshot
        self.cancel = threading.Event()
        self.done = threading.Event()
        self.result: SaveResult | None = None
        self.thread: threading.Thread | None = None




def shard_ranges(total: int, shard_bytes: int) -> list[tuple[int, int]]:
    """Byte ranges [start, end) that split ``total`` bytes into shards."""
    if total == 0:
        return []
    return [(s, min(total, s + shard_bytes)) for s in range(0, total, shard_bytes)]


class AsyncSaver:
    """Background checkpoint persistence with at most one save in flight."""

    def __init__(self, store: CheckpointStore, *, events: EventLog | None = None,
                 keep_periodic: int = 3, keep_insurance: int = 2,
                 shard_bytes: int = DEFAULT_SHARD_BYTES, pin_memory: bool | None = None,
                 on_result: Callable[[SaveResult], None] | None = None):
        if shard_bytes <= 0:
            raise ValueError(f"shard_bytes must be > 0, got {shard_bytes}")
        self.store = store
        self.events = events or EventLog()
        self.keep_periodic = keep_periodic
        self.keep_insurance = keep_insurance
        self.shard_bytes = shard_bytes
        self.buffers = SnapshotBuffers(pin_memory=pin_memory)
        self.on_result = on_result
        self._lock = threading.Lock()
        self._job: _Job | None = None
        self._results: list[SaveResult] = []
        # sha256 runs on up to 2 threads, overlapping the store writes
        self._hash_pool = ThreadPoolExecutor(max(1, min(2, os.cpu_count() or 1)),
                                             thread_name_prefix="ckpt-hash")
        self.last_committed: CheckpointInfo | None = None

    # -- state ------------------------------------------------------------------------
    @property
    def in_flight(self) -> tuple[int, str] | None:
        job = self._job
        if job is None or job.done.is_set():
            return None
        return job.step, job.kind

    def poll_results(self) -> list[SaveResult]:
        """Results completed since the last call (for the policy), oldest first."""
        with self._lock:
            out, self._results = self._results, []
        return out

    def wait(self, timeout: float | None = None) -> SaveResult | None:
        """Wait for the in-flight save; returns its result (None if none or timed out)."""
        job = self._job
        if job is None:
            return None
        if not job.done.wait(timeout):
            return None
        return job.result

    # -- saving -----------------------------------------------------------------------
    def save(self, state: Any, step: int, kind: str = "periodic", *, block: bool = False,
             deadline: float | None = None) -> SaveResult | None:
        """Snapshot ``state`` (a nested dict of tensors/values, or a zero-arg callable
        returning one) and persist it in the background.

        Returns the result when ``block`` (or ``deadline``) is given and the save
        finished, else ``None``. ``deadline`` is a unix time in seconds.
        """
        kind = str(getattr(kind, "value", kind))
        t0 = time.perf_counter()
        current = self._job
        if current is not None and not current.done.is_set():
            if kind == "insurance":
                log.debug("insurance save at step %d skipped: save of step %d still in flight",
                         step, current.step)
                return None
            if kind == "emergency":
                if current.step == step:
                    log.info("emergency save: the in-flight save already holds step %d; waiting for it", step)
                    return self._await(current, deadline) if (block or deadline) else None
                log.warning("emergency save at step %d supersedes the in-flight %s save of step %d (abandoned)",
                            step, current.kind, current.step)
                current.cancel.set()
            current.done.wait()
        self.events.emit("save_started", step=step, kind=kind)
        try:
            snap = self.buffers.capture(state() if callable(state) else state)
        except Exception as exc:
            reason = f"snapshot failed: {type(exc).__name__}: {exc}"
            log.error("checkpoint of step %d (%s) failed: %s", step, kind, reason)
            self.events.emit("save_failed", step=step, kind=kind, reason=reason)
            raise
        snap.stall_seconds = time.perf_counter() - t0
        job = _Job(step, kind, snap)
        job.thread = threading.Thread(target=self._persist, args=(job,),
                                      name=f"ckpt-persist-{step}", daemon=True)
        self._job = job
        job.thread.start()
        if block or deadline is not None:
            return self._await(job, deadline)
        return None

    def _await(self, job: _Job, deadline: float | None) -> SaveResult | None:
        if deadline is None:
            job.done.wait()
            return job.result
        timeout = max(0.0, deadline - time.time() - DEADLINE_MARGIN_SECONDS)
        if job.done.wait(timeout):
            return job.result
        reason = (f"{job.kind} save of step {job.step} not committed {DEADLINE_MARGIN_SECONDS:.1f} s "
                  "before the preemption deadline; the previous checkpoint will be used on restart")
        log.error(reason)
        self.events.emit("save_failed", step=job.step, kind=job.kind, reason=reason)
        return None

    def _persist(self, job: _Job) -> None:
        snap = job.snapshot
        t0 = time.perf_counter()
        writer = CheckpointWriter(self.store, job.step, job.kind, cancel=job.cancel,
                                  hash_pool=self._hash_pool)
        result: SaveResult
        released = False
        try:
            flat = snap.flat_view()
            writer.put_blobs([(SHARD_BLOB.format(i), flat[a:b])
                              for i, (a, b) in enumerate(shard_ranges(len(flat), self.shard_bytes))])
            del flat
            self.buffers.release()  # the tensor bytes are on the store: the buffer is free
            released = True
            writer.put_blob(STATE_BLOB, snap.header)
            persist = time.perf_counter() - t0
            info = writer.commit(save_seconds=persist, stall_seconds=snap.stall_seconds,
                                 meta={"tensors": snap.tensor_count})
            result = SaveResult(job.step, job.kind, True, info.bytes, snap.stall_seconds,
                                persist, info=info)
            self.last_committed = info
            self.events.emit("save_committed", step=job.step, kind=job.kind, bytes=info.bytes,
                             stall_seconds=snap.stall_seconds, persist_seconds=persist,
                             location=info.location)
            try:
                deleted = apply_retention(self.store, keep_periodic=self.keep_periodic,
                                          keep_insurance=self.keep_insurance)
                if deleted:
                    log.info("retention deleted %s", ", ".join(deleted))
            except Exception as exc:  # retention must never fail a committed save
                log.warning("retention pass failed: %s", exc)
        except SaveAbandoned as exc:
            writer.abort()
            result = SaveResult(job.step, job.kind, False, 0, snap.stall_seconds,
                                time.perf_counter() - t0, error=str(exc), abandoned=True)
            self.events.emit("save_failed", step=job.step, kind=job.kind,
                             reason="abandoned: superseded by an emergency save")
        except Exception as exc:
            writer.abort()
            reason = f"{type(exc).__name__}: {exc}"
            log.error("checkpoint of step %d (%s) failed while persisting: %s", job.step, job.kind, reason)
            result = SaveResult(job.step, job.kind, False, 0, snap.stall_seconds,
                                time.perf_counter() - t0, error=reason)
            self.events.emit("save_failed", step=job.step, kind=job.kind, reason=reason)
        finally:
            if not released:
                self.buffers.release()
        job.result = result
        with self._lock:
            self._results.append(result)
        job.done.set()
        if self.on_result is not None:
            try:
                self.on_result(result)
            except Exception as exc:  # pragma: no cover - user callback
                log.warning("on_result callback failed: %s", exc)

    def close(self, *, wait: bool = True) -> None:
        """Wait for the in-flight save (unless ``wait`` is False) and stop helper threads."""
        if wait:
            self.wait()
        self._hash_pool.shutdown(wait=wait)


def load_checkpoint(store: CheckpointStore, info: CheckpointInfo) -> Any:
    """Read and verify every blob of ``info``; return the nested state.

    Raises ``CorruptCheckpoint`` on a missing blob, wrong size or sha256.
    """
    header = read_blob(store, info, STATE_BLOB)
    _skeleton, _specs, flat_bytes = loads_header(header)
    flat = torch.empty(max(flat_bytes, 1), dtype=torch.uint8)[:flat_bytes]
    view = memoryview(flat.numpy()).cast("B") if flat_bytes else memoryview(b"")
    ranges = [(int(name[len("tensors-"):-len(".bin")]), name) for name in info.blobs
              if name.startswith("tensors-")]
    ranges.sort()
    pos = 0
    for i, name in ranges:
        if SHARD_BLOB.format(i) != name:
            raise CorruptCheckpoint(f"{info.location}: unexpected blob name {name}")
        n = info.blobs[name].bytes
        if pos + n > flat_bytes:
            raise CorruptCheckpoint(f"{info.location}: tensor blobs exceed the {flat_bytes} bytes the header declares")
        read_blob_into(store, info, name, view[pos:pos + n])
        pos += n
    if pos != flat_bytes:
        raise CorruptCheckpoint(f"{info.location}: tensor blobs hold {pos} bytes, header declares {flat_bytes}")
    return load_state(header, flat)


def restore_state(store: CheckpointStore) -> RestoreOutcome | None:
    """Load the latest complete checkpoint's state, falling back on corruption."""
    return restore_latest(store, lambda info: load_checkpoint(store, info))
