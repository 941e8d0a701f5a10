"""A lease on a checkpoint prefix: one job writes a prefix at a time.

``LEASE.json`` at the store's root names the holder: job id, a random owner token per
process, node, host, pid, and ``expires`` (unix seconds). It is written with the
store's atomic conditional put (S3: ``If-None-Match: *`` to create, ``If-Match: <ETag>``
to replace; local directory: compare-and-swap under ``flock``), so two processes can
never both believe they hold it.

* **acquire** (before restore): no lease, an expired one, or one of the SAME job id (a
  retry of the run, a relaunch in another zone after a preemption: the previous holder
  is dead or about to be) -> taken over at once, no waiting. A live lease of ANOTHER job
  -> ``LeaseHeld`` naming both jobs and the fix.
* **heartbeat**: a daemon thread renews ``expires`` every ``ttl/3`` seconds. When it
  finds another owner in the file (a successor took over), the lease is *lost*.
* **verify** (before each checkpoint's manifest is written): one small read; a lost
  lease raises ``LeaseLost`` so a superseded process never commits a checkpoint over
  its successor's. The session then stops training.
* **release** (at the end): the record is rewritten as expired (conditionally).

Expiry compares unix clocks of different hosts: keep them NTP-synchronised; the default
TTL (60 s) is far above usual skew. Durations in seconds.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import asdict, dataclass

from checkpointing.runtime_env import MAX_ENV_SECONDS
from checkpointing.stores.base import CheckpointStore, StoreError, StorePreconditionFailed

log = logging.getLogger("checkpointing.lease")

LEASE_KEY = "LEASE.json"
DEFAULT_TTL_SECONDS = 60.0
ENV_LEASE_TTL = "SPOTFLEET_LEASE_TTL_SECONDS"
#: conditional-put races to retry before giving up on acquiring
ACQUIRE_ATTEMPTS = 5


class LeaseHeld(RuntimeError):
    """A live lease of another job holds the checkpoint prefix."""


class LeaseLost(RuntimeError):
    """This process no longer holds the prefix lease (a successor took it over)."""


@dataclass(frozen=True)
class LeaseRecord:
    """The content of LEASE.json. Times are unix seconds."""

    job_id: str
    owner: str
    node_id: str | None
    host: str
    pid: int
    acquired: float
    renewed: float
    expires: float
    ttl_seconds: float

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @staticmethod
    def from_bytes(data: bytes) -> LeaseRecord | None:
        try:
            raw = json.loads(data.decode())
            return LeaseRecord(**{k: raw[k] for k in LeaseRecord.__dataclass_fields__})
        except (ValueError, KeyError, TypeError, UnicodeDecodeError):
            return None

    def describe(self) -> str:
        node = f"node {self.node_id}, " if self.node_id else ""
        return f"job {self.job_id!r} ({node}host {self.host}, pid {self.pid})"


class PrefixLease:
    """The lease of one process on one store. See the module docstring."""

    def __init__(self, store: CheckpointStore, job_id: str, *, ttl_seconds: float = DEFAULT_TTL_SECONDS,
                 node_id: str | None = None):
        if not (0 < ttl_seconds <= MAX_ENV_SECONDS):  # also refuses nan
            raise ValueError(f"lease ttl_seconds must be a finite number of seconds > 0, got "
                             f"{ttl_seconds!r} (from the environment: {ENV_LEASE_TTL}, default 60)")
        self.store = store
        self.job_id = job_id
        self.ttl_seconds = float(ttl_seconds)
        self.node_id = node_id
        self.owner = uuid.uuid4().hex
        self.held = False
        #: why the lease was lost (None while held or never acquired)
        self.lost: str | None = None
        #: the record this process took over from (None when the prefix was free)
        self.previous: LeaseRecord | None = None
        self._version: str | None = None
        self._acquired = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def location(self) -> str:
        return self.store.uri(LEASE_KEY)

    def _record(self, now: float, expires: float | None = None) -> LeaseRecord:
        return LeaseRecord(job_id=self.job_id, owner=self.owner, node_id=self.node_id,
                           host=socket.gethostname(), pid=os.getpid(), acquired=self._acquired or now,
                           renewed=now, expires=now + self.ttl_seconds if expires is None else expires,
                           ttl_seconds=self.ttl_seconds)

    def _read(self) -> tuple[LeaseRecord | None, str | None, bool]:
        """(record, version, exists)."""
        try:
            data, version = self.store.get_versioned(LEASE_KEY)
        except KeyError:
            return None, None, False
        return LeaseRecord.from_bytes(data), version, True

    # -- acquire / renew / release ----------------------------------------------------
    def acquire(self) -> LeaseRecord | None:
        """Take the lease (see the module docstring); returns the record taken over, if any.

        Raises ``LeaseHeld`` for a live lease of another job, ``StoreError`` when the
        store cannot be read or written.
        """
        for _ in range(ACQUIRE_ATTEMPTS):
            current, version, exists = self._read()
            now = time.time()
            self._refuse_if_held(current, now)
            self._acquired = now
            try:
                with self._lock:
                    self._version = self.store.put_if(LEASE_KEY, self._record(now).to_bytes(),
                                                      version if exists else None)
            except StorePreconditionFailed:
                continue  # someone wrote it between our read and our put: look again
            self.held, self.lost = True, None
            self.previous = current if current is not None and current.expires > now else None
            if self.previous is not None and self.previous.owner != self.owner:
                log.warning("took over the checkpoint lease of %s (same job, lease still live: "
                            "a retry or relaunch); that process can no longer commit checkpoints",
                            self.previous.describe())
            return current
        raise LeaseHeld(f"could not acquire the lease {self.location}: {ACQUIRE_ATTEMPTS} conditional "
                        "writes lost to concurrent writers; is another job starting on this prefix?")

    def check_available(self) -> LeaseRecord | None:
        """Read-only: raise ``LeaseHeld`` if another job's live lease holds the prefix;
        returns the current record (None when there is none)."""
        current, _version, _exists = self._read()
        self._refuse_if_held(current, time.time())
        return current

    def _refuse_if_held(self, current: LeaseRecord | None, now: float) -> None:
        if current is not None and current.owner != self.owner and current.job_id != self.job_id \
                and current.expires > now:
            raise LeaseHeld(
                f"checkpoint prefix {self.store.location} is leased by another running job: "
                f"{current.describe()}, lease renewed {now - current.renewed:.0f} s ago, expires in "
                f"{current.expires - now:.0f} s. This process is job {self.job_id!r}. Two jobs must "
                "not write one prefix. Fix: give this job its own SPOTFLEET_CHECKPOINT_URI; or, if "
                f"this run continues that job, set SPOTFLEET_JOB_ID={current.job_id}; or, if that "
                f"job is really gone, wait for its lease to expire or delete {self.location}.")

    def renew(self) -> bool:
        """Extend the lease; False (and ``lost`` set) when another owner holds it now."""
        if not self.held:
            return False
        with self._lock:
            now = time.time()
            try:
                self._version = self.store.put_if(LEASE_KEY, self._record(now).to_bytes(), self._version)
                return True
            except StorePreconditionFailed:
                pass
        current, _version, _exists = self._read()
        self._mark_lost(current)
        return False

    def verify(self) -> None:
        """Raise ``LeaseLost`` unless this process still holds the lease (one small read).

        A store that cannot be read does not count as lost (the commit itself will fail
        or succeed on its own); only another owner in LEASE.json does.
        """
        if not self.held:
            if self.lost:
                raise LeaseLost(self.lost)
            return
        try:
            current, _version, _exists = self._read()
        except StoreError as exc:
            log.warning("could not read the lease %s before a commit: %s", self.location, exc)
            return
        if current is None or current.owner != self.owner:
            self._mark_lost(current)
            raise LeaseLost(self.lost or "lease lost")

    def _mark_lost(self, current: LeaseRecord | None) -> None:
        if not self.held:
            return
        self.held = False
        who = current.describe() if current is not None else "nobody (the lease file was removed)"
        self.lost = (f"the checkpoint lease {self.location} is now held by {who}: a successor took over "
                     "this prefix; this process stops committing checkpoints")
        log.error("%s", self.lost)

    def release(self) -> None:
        """Stop renewing and mark the lease expired (best effort, conditional)."""
        self.stop_heartbeat()
        if not self.held:
            return
        self.held = False
        now = time.time()
        try:
            with self._lock:
                self.store.put_if(LEASE_KEY, self._record(now, expires=now).to_bytes(), self._version)
        except (StoreError, OSError) as exc:
            log.info("lease %s not released (%s); it expires on its own", self.location, exc)

    # -- heartbeat --------------------------------------------------------------------
    def start_heartbeat(self) -> None:
        """Renew every ttl/3 seconds on a daemon thread (never blocks training)."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._beat, name="ckpt-lease", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        interval = self.ttl_seconds / 3.0
        while not self._stop.wait(interval):
            if not self.held:
                return
            try:
                if not self.renew():
                    return
            except (StoreError, OSError) as exc:
                log.warning("could not renew the lease %s: %s (retrying in %.0f s)", self.location,
                            exc, interval)

    def stop_heartbeat(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5.0)
