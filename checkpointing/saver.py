"""Asynchronous checkpoint saver: snapshot now, persist in the background.

``AsyncSaver.save(state, step, kind)`` copies every tensor into the reusable CPU buffer
(``SnapshotBuffers``; this copy is the only time the training loop stalls) and hands
the buffer to a background thread that writes the blobs and commits the manifest
(``checkpointing.manifest``), then applies retention.

Concurrency rules (at most one save in flight):

* periodic save while another save is in flight: waits for it, then saves
  (back-pressure; the wait is counted in the stall) -- at most ``wait_limit_seconds``;
  if the save in flight is still running then (store frozen or very slow), the new
  save is skipped with a ``save_failed`` event and later saves skip at once until it
  ends, so a frozen store never holds the training loop longer than that bound;
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
say so, and that the previous checkpoint will be used. With a ``spill_store`` (local
disk; ``checkpointing.spill``) the emergency save goes there instead when the primary
store is in trouble or too slow for the window, or when the primary write has not
committed by ``deadline - margin - spill estimate``; the spilled checkpoint is then
uploaded to the primary store in the time left (``save_spilled``, then
``save_committed`` with ``promoted_from`` once uploaded).

Completion of every save is signalled in a ``finally`` (the waiting side never hangs on
a dead persist thread), events are best-effort, and after the manifest write started
nothing deletes the checkpoint.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import pickle
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch

from checkpointing.events import EventLog
from checkpointing.manifest import (
    ROOM_SLACK_BYTES,
    CheckpointInfo,
    CheckpointWriter,
    CorruptCheckpoint,
    RestoreOutcome,
    SaveAbandoned,
    apply_retention,
    collect_garbage,
    make_room,
    read_blob,
    read_blob_into,
    restore_latest,
)
from checkpointing.outcome import ENV_SAVE_WAIT_SECONDS
from checkpointing.runtime_env import MAX_ENV_SECONDS
from checkpointing.snapshot import Snapshot, SnapshotBuffers, load_state, loads_header
from checkpointing.spill import Promotion, newer_spill
from checkpointing.stores.base import CheckpointStore

log = logging.getLogger("checkpointing.saver")

STATE_BLOB = "state.pkl"
SHARD_BLOB = "tensors-{:05d}.bin"
DEFAULT_SHARD_BYTES = 64 << 20
#: garbage collection runs before the first save of a process and then every N saves
GC_EVERY_SAVES = 10
#: how long before the notice deadline an unfinished emergency save is declared failed
DEADLINE_MARGIN_SECONDS = 0.5
#: the longest the training loop waits for a save in flight (back-pressure) or for a
#: blocking save, seconds; beyond it the new save is skipped / reported failed
DEFAULT_WAIT_LIMIT_SECONDS = 10.0
#: how long an emergency save waits for an abandoned save's thread to stop, seconds
ABANDON_WAIT_SECONDS = 1.0
#: waits that an ``interrupt`` callable can end are sliced this fine, seconds
WAIT_SLICE_SECONDS = 0.05
#: local-disk speed (bytes/s) and fixed cost (s) assumed when planning a spill
SPILL_BYTES_PER_SECOND = 200e6
SPILL_FIXED_SECONDS = 0.5


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
    #: written to the local spill area instead of the primary store (``checkpointing.spill``)
    spilled: bool = False


class _SharedSnapshot:
    """A snapshot that one or two jobs read (the emergency save and its local spill).
    The buffer is released for reuse when the last reader is done."""

    def __init__(self, snapshot: Snapshot, buffers: SnapshotBuffers):
        self.snapshot = snapshot
        self._buffers = buffers
        self._users = 1  # the creator's reference; _start() drops it
        self._lock = threading.Lock()

    def acquire(self) -> None:
        with self._lock:
            self._users += 1

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            last = self._users == 0
        if last:
            self._buffers.release()


class _Job:
    def __init__(self, step: int, kind: str, shared: _SharedSnapshot, store: CheckpointStore):
        self.step = step
        self.kind = kind
        self.shared = shared
        self.snapshot = shared.snapshot
        self.store = store
        self.cancel = threading.Event()
        self.done = threading.Event()
        self.result: SaveResult | None = None
        self.thread: threading.Thread | None = None
        self.started = time.monotonic()
        #: the training thread gave up waiting for it (store frozen or very slow)
        self.stuck = False
        self._released = False
        shared.acquire()

    def release_snapshot(self) -> None:
        if not self._released:
            self._released = True
            self.shared.release()


def shard_ranges(total: int, shard_bytes: int) -> list[tuple[int, int]]:
    """Byte ranges [start, end) that split ``total`` bytes into shards."""
    if total == 0:
        return []
    return [(s, min(total, s + shard_bytes)) for s in range(0, total, shard_bytes)]


def _wait(event: threading.Event, timeout: float, interrupt: Callable[[], bool] | None) -> bool:
    """Wait up to ``timeout`` seconds for ``event``; stop early when ``interrupt()`` is true."""
    end = time.monotonic() + max(0.0, timeout)
    while True:
        left = end - time.monotonic()
        if event.wait(min(max(0.0, left), WAIT_SLICE_SECONDS) if interrupt else max(0.0, left)):
            return True
        if left <= 0 or (interrupt is not None and interrupt()):
            return event.is_set()


class AsyncSaver:
    """Background checkpoint persistence with at most one save in flight.

    wait_limit_seconds: the longest the caller (the training loop) waits for a save in
        flight before a new periodic save is skipped, or for a blocking save
        (``block=True``) to commit; see docs/checkpointing.md "Failure modes".
    spill_store: a local store the emergency save falls back to when the primary store
        cannot take it before the deadline (``checkpointing.spill``); None: no spill.
    """

    def __init__(self, store: CheckpointStore, *, events: EventLog | None = None,
                 keep_periodic: int = 3, keep_insurance: int = 2,
                 shard_bytes: int = DEFAULT_SHARD_BYTES, pin_memory: bool | None = None,
                 on_result: Callable[[SaveResult], None] | None = None,
                 wait_limit_seconds: float = DEFAULT_WAIT_LIMIT_SECONDS,
                 spill_store: CheckpointStore | None = None):
        if shard_bytes <= 0:
            raise ValueError(f"shard_bytes must be > 0, got {shard_bytes}")
        if not (0 < wait_limit_seconds <= MAX_ENV_SECONDS):  # also refuses nan
            raise ValueError(f"wait_limit_seconds must be a finite number of seconds > 0, got "
                             f"{wait_limit_seconds!r} (from the environment: {ENV_SAVE_WAIT_SECONDS}, "
                             "default 10)")
        if keep_periodic < 1:
            raise ValueError(f"keep_periodic must be >= 1 (periodic checkpoints to keep), got "
                             f"{keep_periodic!r}; pass e.g. keep_periodic=3")
        self.store = store
        self.events = events or EventLog()
        self.keep_periodic = keep_periodic
        self.keep_insurance = keep_insurance
        self.shard_bytes = shard_bytes
        self.wait_limit_seconds = float(wait_limit_seconds)
        self.spill_store = spill_store
        self.buffers = SnapshotBuffers(pin_memory=pin_memory)
        self._spare: SnapshotBuffers | None = None
        self.on_result = on_result
        self._lock = threading.Lock()
        self._job: _Job | None = None
        self._results: list[SaveResult] = []
        # sha256 runs on up to 2 threads, overlapping the store writes
        self._hash_pool = ThreadPoolExecutor(max(1, min(2, os.cpu_count() or 1)),
                                             thread_name_prefix="ckpt-hash")
        #: newest checkpoint committed to the PRIMARY store (set by restore too)
        self.last_committed: CheckpointInfo | None = None
        #: newest emergency checkpoint written to the spill area (local disk) instead
        self.last_spilled: CheckpointInfo | None = None
        #: upload of the spilled checkpoint to the primary store, if one was started
        self.promotion: Promotion | None = None
        #: every upload started (``start_promotion``); GC and retention spare the prefix
        #: of each one still running
        self._promotions: list[Promotion] = []
        #: why the primary store is considered unhealthy (None: healthy)
        self.store_trouble: str | None = None
        #: saves the loop gave up waiting for (their threads may still be in the store)
        self.abandoned: list[_Job] = []
        #: persist seconds of the last successful primary save (spill-or-not estimate)
        self._last_persist_seconds: float | None = None
        #: job identity written into every manifest's meta["job"] (checkpointing.identity)
        self.job_meta: dict[str, Any] | None = None
        #: the loop's progress written into every manifest's meta["progress"]
        #: ({"total_steps", "mean_step_seconds"}): what a controller that sees only the
        #: store (the SkyPilot provider) learns of the training's progress
        self.progress_meta: dict[str, Any] | None = None
        #: the prefix lease (checkpointing.lease): verified before GC and before each commit
        self.lease: Any = None
        #: committed checkpoints known to be corrupt (restore fell back past them): deleted
        #: by the next pre-write garbage collection
        self.discard: set[str] = set()
        #: run garbage collection before the next write (first save, after a failed save)
        self._gc_due = True
        self._saves_prepared = 0

    # -- state ------------------------------------------------------------------------
    @property
    def in_flight(self) -> tuple[int, str] | None:
        job = self._job
        if job is None or job.done.is_set():
            return None
        return job.step, job.kind

    @property
    def stuck(self) -> bool:
        """True while a save the loop gave up waiting for is still running."""
        job = self._job
        return job is not None and job.stuck and not job.done.is_set()

    def poll_results(self) -> list[SaveResult]:
        """Results completed since the last call (for the policy), oldest first."""
        with self._lock:
            out, self._results = self._results, []
        return out

    def wait(self, timeout: float | None = None,
             interrupt: Callable[[], bool] | None = None) -> SaveResult | None:
        """Wait for the in-flight save; returns its result (None if none, timed out, or
        ``interrupt()`` became true, e.g. a preemption notice came).

        ``timeout=None`` waits at most ``wait_limit_seconds`` (seconds)."""
        job = self._job
        if job is None:
            return None
        if not _wait(job.done, self.wait_limit_seconds if timeout is None else timeout, interrupt):
            return None
        return job.result

    def _emit(self, kind: str, /, **data: Any) -> None:
        try:
            self.events.emit(kind, **data)
        except Exception as exc:  # event logging must never fail a save
            log.warning("could not record a %s event: %s", kind, exc)

    # -- saving -----------------------------------------------------------------------
    def save(self, state: Any, step: int, kind: str = "periodic", *, block: bool = False,
             deadline: float | None = None, interrupt: Callable[[], bool] | None = None,
             timeout: float | None = None) -> SaveResult | None:
        """Snapshot ``state`` (a nested dict of tensors/values, or a zero-arg callable
        returning one) and persist it in the background.

        Returns the result when ``block`` (or ``deadline``) is given, else ``None``; a
        blocking save that did not finish in time returns a failed result (``ok`` False).
        ``deadline`` is a unix time in seconds. ``interrupt`` (called every 50 ms while
        waiting for the save in flight) ends that wait early, e.g. when a notice came.
        ``timeout`` bounds the wait of a ``block`` save without a deadline (default
        ``wait_limit_seconds``). No call blocks longer than ``wait_limit_seconds`` for the
        save in flight plus the snapshot copy plus (blocking saves) ``timeout`` or the
        time to ``deadline``.
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
                if current.step == step and not current.stuck:
                    log.info("emergency save: the in-flight save already holds step %d; waiting for it", step)
                    if deadline is not None and self.spill_store is not None:
                        return self._await_emergency(current, deadline)
                    return self._await(current, deadline, timeout) if (block or deadline) else None
                log.warning("emergency save at step %d supersedes the in-flight %s save of step %d (abandoned)",
                            step, current.kind, current.step)
                current.cancel.set()
                left = self.wait_limit_seconds if deadline is None else deadline - time.time()
                if not current.done.wait(max(0.0, min(ABANDON_WAIT_SECONDS, left / 4))):
                    self._mark_stuck(current, "still running after it was abandoned")
            else:
                # a blocking save (the final one) waits up to its own timeout, even for a
                # save already known to be stuck; a loop save at most wait_limit_seconds
                limit = timeout if (block and timeout is not None) else self.wait_limit_seconds
                reason = None
                if current.stuck and not block:
                    reason = (f"skipped: the {current.kind} save of step {current.step} is still "
                              f"in flight ({time.monotonic() - current.started:.0f} s; "
                              f"{self.store_trouble})")
                elif not _wait(current.done, limit, interrupt):
                    if interrupt is not None and interrupt():
                        log.info("%s save at step %d not started: a notice came while waiting "
                                 "for the save of step %d", kind, step, current.step)
                        return None
                    self._mark_stuck(current, f"not finished after the training loop waited "
                                              f"{limit:.0f} s for it")
                    reason = (f"skipped: the {current.kind} save of step {current.step} is still in "
                              f"flight after waiting {limit:.0f} s (store slow or unreachable?); "
                              "training continues and the next save tries again")
                if reason is not None:
                    log.warning("%s save at step %d %s", kind, step, reason)
                    self._emit("save_failed", step=step, kind=kind, reason=reason)
                    if block:
                        return SaveResult(step, kind, False, 0, time.perf_counter() - t0, 0.0,
                                          error=reason)
                    return None
        buffers = self.buffers
        if not buffers.wait_free(0):  # still read by a stuck, abandoned save
            if self._spare is None:
                self._spare = SnapshotBuffers(pin_memory=self.buffers.pin_memory)
            buffers = self._spare
        self._emit("save_started", step=step, kind=kind)
        try:
            snap = buffers.capture(state() if callable(state) else state,
                                   timeout=self.wait_limit_seconds)
        except Exception as exc:
            reason = f"snapshot failed: {type(exc).__name__}: {exc}"
            log.error("checkpoint of step %d (%s) failed: %s", step, kind, reason)
            self._emit("save_failed", step=step, kind=kind, reason=reason)
            if isinstance(exc, TimeoutError):
                return SaveResult(step, kind, False, 0, time.perf_counter() - t0, 0.0, error=reason)
            raise
        snap.stall_seconds = time.perf_counter() - t0
        shared = _SharedSnapshot(snap, buffers)
        target = self.store
        if kind == "emergency" and deadline is not None and self._spill_first(snap, deadline):
            target = self.spill_store
        job = self._start(step, kind, shared, target)
        if kind == "emergency" and deadline is not None and self.spill_store is not None:
            return self._await_emergency(job, deadline)
        if block or deadline is not None:
            return self._await(job, deadline, timeout, interrupt)
        return None

    def _start(self, step: int, kind: str, shared: _SharedSnapshot, store: CheckpointStore) -> _Job:
        job = _Job(step, kind, shared, store)
        job.thread = threading.Thread(target=self._persist, args=(job,),
                                      name=f"ckpt-persist-{step}", daemon=True)
        self._job = job
        job.thread.start()
        shared.release()  # the job holds its own reference now
        return job

    def _mark_stuck(self, job: _Job, why: str) -> None:
        job.stuck = True
        if job not in self.abandoned:
            self.abandoned.append(job)
        self.store_trouble = (f"the {job.kind} save of step {job.step} to {job.store.location} "
                              f"is {why}")
        log.warning("%s", self.store_trouble)

    def _spill_first(self, snap: Snapshot, deadline: float) -> bool:
        """Write the emergency snapshot straight to the spill area (not the primary)?"""
        if self.spill_store is None:
            return False
        if self.store_trouble is not None:
            log.warning("emergency save goes to local disk first (%s): %s",
                        self.spill_store.location, self.store_trouble)
            return True
        estimate = self._last_persist_seconds
        left = deadline - time.time() - DEADLINE_MARGIN_SECONDS - _spill_estimate(snap)
        if estimate is not None and estimate > left:
            log.warning("emergency save goes to local disk first (%s): the last save to %s took "
                        "%.1f s, only %.1f s are left", self.spill_store.location,
                        self.store.location, estimate, max(0.0, left))
            return True
        return False

    def _await(self, job: _Job, deadline: float | None, timeout: float | None = None,
               interrupt: Callable[[], bool] | None = None) -> SaveResult:
        """Wait for ``job`` until ``deadline`` (unix s) or for ``timeout`` seconds. Without
        a deadline, ``interrupt()`` becoming true (a preemption notice) ends the wait: the
        save keeps running and the result says so (``ok`` False); the caller decides
        (the session turns it into the emergency save, awaited until the deadline)."""
        if deadline is None:
            timeout = self.wait_limit_seconds if timeout is None else timeout
            why = f"not committed within {timeout:.0f} s"
        else:
            timeout = max(0.0, deadline - time.time() - DEADLINE_MARGIN_SECONDS)
            why = (f"not committed {DEADLINE_MARGIN_SECONDS:.1f} s before the preemption deadline; "
                   "the previous checkpoint will be used on restart")
            interrupt = None
        if _wait(job.done, timeout, interrupt) and job.result is not None:
            return job.result
        if interrupt is not None and not job.done.is_set() and interrupt():
            reason = (f"{job.kind} save of step {job.step} still in flight when a preemption "
                      "notice came")
            log.warning("%s", reason)
            return SaveResult(job.step, job.kind, False, 0, job.snapshot.stall_seconds,
                              time.monotonic() - job.started, error=reason)
        self._mark_stuck(job, why)
        reason = f"{job.kind} save of step {job.step} {why}"
        log.error("%s", reason)
        self._emit("save_failed", step=job.step, kind=job.kind, reason=reason)
        return SaveResult(job.step, job.kind, False, 0, job.snapshot.stall_seconds,
                          time.monotonic() - job.started, error=reason)

    def _await_emergency(self, job: _Job, deadline: float) -> SaveResult:
        """Emergency save with a spill area: primary first while it can still make it, the
        local spill otherwise; then, in the time left, upload the spill to the primary."""
        spill = self.spill_store
        assert spill is not None
        if job.store is not spill:
            cutoff = deadline - DEADLINE_MARGIN_SECONDS - _spill_estimate(job.snapshot)
            if job.done.wait(max(0.0, cutoff - time.time())) and job.result is not None \
                    and job.result.ok:
                return job.result
            if job.done.is_set():
                why = f"failed ({job.result.error if job.result else 'no result'})"
                self.store_trouble = f"the emergency save to {self.store.location} {why}"
            else:
                job.cancel.set()
                self._mark_stuck(job, f"not committed {max(0.0, deadline - time.time()):.1f} s "
                                      "before the deadline")
            self._emit("save_failed", step=job.step, kind=job.kind,
                       reason=f"not committed to {self.store.location} in time "
                              f"({self.store_trouble}); writing it to local disk instead")
            job = self._start(job.step, job.kind, _reuse(job), spill)
        result = self._await(job, deadline)
        if result.ok and result.info is not None:
            self.start_promotion(result.info)
        return result

    def start_promotion(self, info: CheckpointInfo) -> Promotion:
        """Upload the spilled checkpoint ``info`` to the primary store in the background.
        Until the upload ends, garbage collection and retention leave its prefix alone."""
        assert self.spill_store is not None
        promotion = Promotion(self.spill_store, self.store, info, on_done=self._promoted,
                              before_manifest=self._before_promotion)
        self._promotions = [p for p in self._promotions if not p.done.is_set()] + [promotion]
        self.promotion = promotion
        return promotion.start()

    def _spared(self, *names: str) -> set[str]:
        """``names`` plus the prefixes of uploads still running: never deleted by GC,
        ``make_room`` or retention."""
        return {*names, *(p.info.name for p in self._promotions if not p.done.is_set())}

    def _before_promotion(self) -> None:
        """A deposed process must not promote its spill over its successor's prefix."""
        if getattr(self, "lease", None) is not None:
            self.lease.verify()

    def _promoted(self, promotion: Promotion) -> None:
        if promotion.ok:
            info = promotion.info
            location = self.store.uri(info.name)
            with self._lock:  # an upload ending after a newer save must not hide that save
                last = self.last_committed
                if last is None or (info.step, info.created) >= (last.step, last.created):
                    self.last_committed = dataclasses.replace(info, location=location)
            self._emit("save_committed", step=info.step, kind=info.kind, bytes=info.bytes,
                       stall_seconds=info.stall_seconds, persist_seconds=info.save_seconds,
                       location=location, promoted_from=info.location)

    def _persist(self, job: _Job) -> None:
        snap = job.snapshot
        t0 = time.perf_counter()
        result: SaveResult | None = None
        info: CheckpointInfo | None = None
        writer: CheckpointWriter | None = None
        manifest_attempted = False
        spilled = job.store is not self.store
        try:
            writer = CheckpointWriter(job.store, job.step, job.kind, cancel=job.cancel,
                                      hash_pool=self._hash_pool,
                                      before_commit=None if spilled else self._before_commit)
            if not spilled:
                self._prepare_store(writer, snap)  # lease, GC, room before writing (H9b)
            flat = snap.flat_view()
            writer.put_blobs([(SHARD_BLOB.format(i), flat[a:b])
                              for i, (a, b) in enumerate(shard_ranges(len(flat), self.shard_bytes))])
            del flat
            job.release_snapshot()  # the tensor bytes are on the store: the buffer is free
            writer.put_blob(STATE_BLOB, snap.header)
            persist = time.perf_counter() - t0
            manifest_attempted = True
            info = writer.commit(save_seconds=persist, stall_seconds=snap.stall_seconds,
                                 meta={"tensors": snap.tensor_count,
                                       **({"job": self.job_meta} if self.job_meta else {}),
                                       **({"progress": self.progress_meta}
                                          if self.progress_meta else {})})
            # from here on the checkpoint is committed: nothing below may delete it
            result = SaveResult(job.step, job.kind, True, info.bytes, snap.stall_seconds,
                                persist, info=info, spilled=spilled)
            if not spilled:
                self._retention(info.name)
        except SaveAbandoned as exc:
            result = SaveResult(job.step, job.kind, False, 0, snap.stall_seconds,
                                time.perf_counter() - t0, error=str(exc), abandoned=True)
        except Exception as exc:
            reason = f"{type(exc).__name__}: {exc}"
            result = SaveResult(job.step, job.kind, False, 0, snap.stall_seconds,
                                time.perf_counter() - t0, error=reason)
        finally:
            job.release_snapshot()
            if result is None:  # a BaseException escaped; report it and still complete
                result = SaveResult(job.step, job.kind, False, 0, snap.stall_seconds,
                                    time.perf_counter() - t0, error="persist thread interrupted")
            job.result = result
            try:
                self._report(job, result)
            finally:
                with self._lock:
                    self._results.append(result)
                job.done.set()
        # completion is signalled; what follows is best-effort housekeeping
        if self.on_result is not None:
            try:
                self.on_result(result)
            except Exception as exc:  # pragma: no cover - user callback
                log.warning("on_result callback failed: %s", exc)
        if info is None and writer is not None:
            if not manifest_attempted:
                writer.abort()  # no manifest was ever sent: the partial prefix is garbage
            else:
                writer.close()  # the manifest put failed midway: leave it (it may be valid)

    def _prepare_store(self, writer: CheckpointWriter, snap: Snapshot) -> None:
        """Before the first blob of a save to the primary store (persist thread):

        1. the prefix lease must still be ours (``LeaseLost`` otherwise: nothing written);
        2. garbage collection (``collect_garbage``) on the first save of the process and
           every ``GC_EVERY_SAVES`` saves: torn / invalid prefixes, orphan temp files and
           multipart uploads, checkpoints restore found corrupt -- never this save's prefix;
        3. room: when the store reports less free space than this checkpoint needs, GC,
           then delete ahead of time what retention would delete after this commit
           (``make_room``; never the newest complete checkpoint), else ``NoRoom``.

        Neither step touches the prefix of a spilled checkpoint being uploaded
        (``start_promotion``).
        """
        if self.lease is not None:
            self.lease.verify()
        self._saves_prepared += 1
        if self._gc_due or self._saves_prepared % GC_EVERY_SAVES == 0:
            self._collect_garbage(writer.name)
        needed = len(snap.flat_view()) + len(snap.header)
        free = self.store.free_bytes()
        if free is not None and free < needed + ROOM_SLACK_BYTES:
            if not self._gc_due:
                self._collect_garbage(writer.name)
            make_room(self.store, needed, writer.kind, keep_periodic=self.keep_periodic,
                      keep_insurance=self.keep_insurance, keep=self._spared(writer.name))
        self._gc_due = False

    def _collect_garbage(self, in_flight: str) -> None:
        try:
            collect_garbage(self.store, keep=self._spared(in_flight), discard=tuple(self.discard))
            self.discard.clear()
        except Exception as exc:  # GC is best effort: never fail a save because of it
            log.warning("garbage collection in %s failed: %s", self.store.location, exc)

    def _before_commit(self) -> None:
        """Right before the manifest: a superseded process must not commit (lease check)."""
        if self.lease is not None:
            self.lease.verify()

    def _retention(self, committed: str) -> None:
        """Retention pass after a commit (best-effort: never fails the committed save);
        never deletes ``committed``, the checkpoint this save just wrote."""
        try:
            deleted = apply_retention(self.store, keep_periodic=self.keep_periodic,
                                      keep_insurance=self.keep_insurance,
                                      keep=self._spared(committed))
            if deleted:
                log.info("retention deleted %s", ", ".join(deleted))
        except Exception as exc:
            log.warning("retention pass failed: %s", exc)

    def _report(self, job: _Job, result: SaveResult) -> None:
        """Record the outcome (state + events). Never raises."""
        try:
            if result.ok and result.info is not None:
                info = result.info
                if result.spilled:
                    self.last_spilled = info
                    log.warning("emergency checkpoint of step %d written to LOCAL disk %s "
                                "(not yet on %s)", job.step, info.location, self.store.location)
                    self._emit("save_spilled", step=job.step, kind=job.kind, bytes=info.bytes,
                               stall_seconds=result.stall_seconds,
                               persist_seconds=result.persist_seconds, location=info.location,
                               primary=self.store.location)
                    return
                with self._lock:
                    self.last_committed = info
                self.store_trouble = None
                self._last_persist_seconds = result.persist_seconds
                self._emit("save_committed", step=job.step, kind=job.kind, bytes=info.bytes,
                           stall_seconds=result.stall_seconds,
                           persist_seconds=result.persist_seconds, location=info.location)
            elif result.abandoned:
                self._emit("save_failed", step=job.step, kind=job.kind,
                           reason="abandoned: superseded by an emergency save")
            else:
                log.error("checkpoint of step %d (%s) to %s failed while persisting: %s",
                          job.step, job.kind, job.store.location, result.error)
                if not result.spilled and job.store is self.store:
                    self.store_trouble = f"the last save to {self.store.location} failed: {result.error}"
                self._emit("save_failed", step=job.step, kind=job.kind, reason=result.error)
        except Exception as exc:  # pragma: no cover - logging itself failed
            with contextlib.suppress(Exception):
                log.warning("could not report the outcome of the save of step %d: %s", job.step, exc)

    def close(self, *, wait: bool = True, timeout: float | None = None) -> None:
        """Wait for the in-flight save (unless ``wait`` is False; at most ``timeout``,
        default ``wait_limit_seconds``) and stop helper threads. A save that is still
        running afterwards (store frozen) is left to its daemon thread."""
        if wait:
            self.wait(timeout)
        if any(job is not None and not job.done.is_set() for job in (self._job, *self.abandoned)):
            return  # a running save still needs the hash pool; its threads end at exit
        self._hash_pool.shutdown(wait=wait)


def _spill_estimate(snap: Snapshot) -> float:
    """Seconds to write ``snap`` to local disk (assumed speed; see SPILL_BYTES_PER_SECOND)."""
    return SPILL_FIXED_SECONDS + snap.nbytes / SPILL_BYTES_PER_SECOND


def _reuse(job: _Job) -> _SharedSnapshot:
    """The snapshot of ``job`` for a second writer (the spill): one more reader."""
    shared = job.shared
    shared.acquire()  # _start() drops this once the new job holds its own reference
    return shared


def load_checkpoint(store: CheckpointStore, info: CheckpointInfo) -> Any:
    """Read and verify every blob of ``info``; return the nested state.

    Raises ``CorruptCheckpoint`` on a missing blob, wrong size or sha256.
    """
    header = read_blob(store, info, STATE_BLOB)
    try:
        _skeleton, _specs, flat_bytes = loads_header(header)
    except (pickle.UnpicklingError, AttributeError, ImportError, IndexError, TypeError) as exc:
        # e.g. a state.pkl naming a forbidden global under a consistent manifest: not
        # loadable, so fall back to the previous checkpoint instead of crashing restore
        raise CorruptCheckpoint(f"{info.location}: {STATE_BLOB} is not a loadable state "
                                f"header ({type(exc).__name__}: {exc})") from exc
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


def restore_preferring_spill(store: CheckpointStore, spill: CheckpointStore | None
                             ) -> tuple[RestoreOutcome | None, CheckpointInfo | None, bool]:
    """(outcome, the store's newest checkpoint, loaded from the spill area?).

    A checkpoint in this node's local spill area (``checkpointing.spill``: an emergency or
    final save the store could not take) that is newer than the store's newest is loaded
    from there, and the caller uploads it; otherwise the store's latest complete one."""
    if spill is not None:
        candidate, primary_newest = newer_spill(store, spill)
        if candidate is not None:
            outcome = restore_state(spill)
            newest = primary_newest.step if primary_newest is not None else -1
            if outcome is not None and outcome.info.step > newest:
                log.warning("restoring step %d from the local spill area %s (the store %s "
                            "has step %s); uploading it to the store", outcome.info.step,
                            outcome.info.location, store.location,
                            newest if newest >= 0 else "none")
                return outcome, primary_newest, True
    return restore_state(store), None, False
