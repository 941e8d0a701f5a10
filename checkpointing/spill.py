"""Local spill area: where an emergency checkpoint goes when the primary store cannot
take it before the notice deadline (S3 frozen or failing, or simply too slow).

On a notice, the saver writes the emergency snapshot to the primary store when that
store is healthy and fast enough for the window; otherwise (or when the primary write
has not committed by ``deadline - margin - spill estimate``) it writes the SAME snapshot
to a ``LocalStore`` on this machine's disk -- the spill area -- with the same commit
protocol (data blobs, then the manifest). In the time left it tries to upload
("promote") the spilled checkpoint to the primary store.

The next process on this machine (a restart, the next node of the local fleet, or a
VM whose disk survived) finds the spilled checkpoint in ``restore``: when it is newer
than the primary store's newest, it is loaded from the spill area and then promoted to
the primary store (blobs first, manifest last) in the background; spilled checkpoints
that the primary already holds (or has newer) are deleted.

The spill directory is ``SPOTFLEET_SPILL_DIR`` when set, else
``<tempdir>/spotfleet-spill/<sha256(primary location)[:16]>`` (one area per checkpoint
location, so two jobs never share one). Set ``SPOTFLEET_SPILL_DIR=off`` to disable.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import os
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

from checkpointing.manifest import (
    MANIFEST_NAME,
    CheckpointInfo,
    CorruptCheckpoint,
    check_blob_sizes,
    list_checkpoints,
    verify_blobs,
)
from checkpointing.stores.base import CheckpointStore, StoreError
from checkpointing.stores.local import LocalStore

log = logging.getLogger("checkpointing.spill")

ENV_SPILL_DIR = "SPOTFLEET_SPILL_DIR"


def default_spill_dir(primary: CheckpointStore) -> Path | None:
    """The spill directory for ``primary`` (None when spilling is off or pointless)."""
    raw = os.environ.get(ENV_SPILL_DIR, "").strip()
    if raw.lower() in ("off", "0", "none", "false"):
        return None
    if raw:
        return Path(raw).expanduser().absolute()
    if isinstance(primary, LocalStore):
        return None  # already on local disk: a spill would not be faster
    digest = hashlib.sha256(primary.location.encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / "spotfleet-spill" / digest


def open_spill(primary: CheckpointStore) -> LocalStore | None:
    """A ``LocalStore`` for the spill area of ``primary``, or None (off / not creatable)."""
    path = default_spill_dir(primary)
    if path is None:
        return None
    try:
        return LocalStore(path)
    except StoreError as exc:
        log.warning("no local spill area for %s: %s", primary.location, exc)
        return None


def copy_checkpoint(src: CheckpointStore, dst: CheckpointStore, info: CheckpointInfo,
                    cancel: threading.Event | None = None,
                    before_manifest: Callable[[], None] | None = None) -> None:
    """Copy a committed checkpoint from ``src`` to ``dst`` under the same name: every data
    blob first, then a check that ``dst`` holds each blob with the manifest's size and
    sha256, the manifest LAST (the commit protocol), so ``dst`` never holds a manifest
    without its data; then one more listing confirms that manifest and blobs are all
    there. ``before_manifest`` runs right before the manifest put and may raise to stop
    it (the prefix-lease check). Raises ``StoreError`` / ``KeyError`` /
    ``CorruptCheckpoint`` (the copy in ``dst`` is incomplete or wrong)."""
    check_blob_sizes(src, info)
    for blob, meta in info.blobs.items():
        if cancel is not None and cancel.is_set():
            raise StoreError(f"copy of {info.name} to {dst.location} cancelled")
        with src.open_read(f"{info.name}/{blob}") as fh:
            dst.put_file(f"{info.name}/{blob}", fh, size=meta.bytes)
    copied = dataclasses.replace(info, location=dst.uri(info.name))
    verify_blobs(dst, copied)
    if before_manifest is not None:
        before_manifest()
    manifest = src.get_bytes(f"{info.name}/{MANIFEST_NAME}")
    dst.put_bytes(f"{info.name}/{MANIFEST_NAME}", manifest)
    try:
        committed = dst.get_bytes(f"{info.name}/{MANIFEST_NAME}")
    except KeyError:
        committed = b""
    if committed != manifest:
        raise CorruptCheckpoint(f"{copied.location}: the manifest read back differs from the one written")
    check_blob_sizes(dst, copied)


def prune_spill(spill: CheckpointStore, primary_newest_step: int | None) -> list[str]:
    """Delete spilled checkpoints the primary already covers (step <= its newest), and
    all but the newest spilled one. Best effort; returns the deleted names."""
    try:
        infos = list_checkpoints(spill)
    except (StoreError, OSError) as exc:
        log.warning("cannot list the spill area %s: %s", spill.location, exc)
        return []
    doomed = [i.name for i in infos[:-1]]
    if infos and primary_newest_step is not None and infos[-1].step <= primary_newest_step:
        doomed.append(infos[-1].name)
    for name in doomed:
        with contextlib.suppress(StoreError, OSError):
            spill.delete_prefix(f"{name}/")
    return doomed


class Promotion:
    """Upload one spilled checkpoint to the primary store on a daemon thread.

    ``done`` is set when the thread ends; ``ok`` says whether the primary now holds it,
    complete and verified (``copy_checkpoint``). Only then is the spilled copy deleted:
    an upload that failed or does not verify leaves the spill in place (and a copy that
    committed but does not verify is removed from the primary, so that the spill stays
    the newest and the next process uploads it again). The saver's garbage collection
    and retention spare the prefix while ``done`` is not set. A frozen primary leaves
    the thread blocked in the store (bounded by the store's own timeouts); being a
    daemon thread it never keeps the process alive.
    """

    def __init__(self, spill: CheckpointStore, primary: CheckpointStore, info: CheckpointInfo,
                 on_done: Callable[[Promotion], None] | None = None,
                 before_manifest: Callable[[], None] | None = None):
        self.spill = spill
        self.primary = primary
        self.info = info
        self.ok = False
        self.error: str | None = None
        self.done = threading.Event()
        self._on_done = on_done
        self._before_manifest = before_manifest
        self.thread = threading.Thread(target=self._run, daemon=True,
                                       name=f"ckpt-promote-{info.step}")

    def start(self) -> Promotion:
        self.thread.start()
        return self

    def _run(self) -> None:
        try:
            try:
                copy_checkpoint(self.spill, self.primary, self.info,
                                before_manifest=self._before_manifest)
                self.ok = True
                log.info("spilled checkpoint of step %d uploaded to %s", self.info.step,
                         self.primary.location)
            except Exception as exc:
                self.error = f"{type(exc).__name__}: {exc}"
                log.warning("upload of the spilled checkpoint of step %d (%s) to %s failed: %s; "
                            "the local copy is kept", self.info.step, self.info.location,
                            self.primary.location, self.error)
                if isinstance(exc, CorruptCheckpoint):  # our own copy is unusable: remove it
                    with contextlib.suppress(StoreError, OSError):
                        self.primary.delete_prefix(f"{self.info.name}/")
            if self.ok:  # the primary holds it, verified: the local copy is redundant
                with contextlib.suppress(StoreError, OSError):
                    self.spill.delete_prefix(f"{self.info.name}/")
            if self._on_done is not None:
                with contextlib.suppress(Exception):
                    self._on_done(self)
        finally:
            self.done.set()  # last: whoever waits for it sees the outcome fully recorded


def newer_spill(primary: CheckpointStore, spill: CheckpointStore
                ) -> tuple[CheckpointInfo | None, CheckpointInfo | None]:
    """(the newest spilled checkpoint when it is newer than the primary store's newest,
    else None; the primary's newest). Spilled checkpoints the primary covers are pruned.
    A primary-store error propagates (``restore`` must not guess)."""
    primary_infos = list_checkpoints(primary)
    primary_newest = primary_infos[-1] if primary_infos else None
    try:
        spilled = list_checkpoints(spill)
    except (StoreError, OSError) as exc:
        log.warning("cannot list the spill area %s: %s", spill.location, exc)
        return None, primary_newest
    if spilled and (primary_newest is None or spilled[-1].step > primary_newest.step):
        return spilled[-1], primary_newest
    if spilled:
        prune_spill(spill, primary_newest.step if primary_newest is not None else None)
    return None, primary_newest
