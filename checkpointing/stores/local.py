"""A checkpoint store in a local directory.

Every ``put`` is atomic: the blob is written to a temporary file in the same
directory, flushed with ``fsync``, renamed over the final name, and the directory is
fsynced so the rename itself survives a power cut. A reader therefore sees either the
whole blob or nothing. (The multi-blob commit protocol lives in
``checkpointing.manifest``.)
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from checkpointing.stores.base import (
    CheckpointStore,
    PartialUpload,
    StoreError,
    StorePreconditionFailed,
)

#: bytes per ``write`` call when streaming a blob to disk
CHUNK_BYTES = 8 << 20
_TMP_MARK = ".tmp-"
#: suffix of the lock file beside a blob written with ``put_if`` (hidden from ``list``)
_LOCK_MARK = ".tmp-lock"
#: the longest ``put_if`` waits for that lock, seconds
LOCK_WAIT_SECONDS = 10.0


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


class LocalStore(CheckpointStore):
    """Blobs as files under ``root``; keys map to relative paths (``/`` separated)."""

    def __init__(self, root: str | os.PathLike[str], *, fsync: bool = True):
        self.root = Path(root).expanduser().absolute()
        self.fsync = fsync
        self.location = str(self.root)
        self._deferred: list[Path] | None = None
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(
                f"cannot create checkpoint directory {self.root}: {exc}; "
                "point SPOTFLEET_CHECKPOINT_URI at a writable directory"
            ) from exc

    # -- batching --------------------------------------------------------------------
    @contextlib.contextmanager
    def deferred_sync(self) -> Iterator[None]:
        """Puts inside this block skip their own fsyncs; on leaving it, every file written
        and each directory touched is fsynced once. A put is then not durable until the
        block ends. The commit protocol wraps the data blobs in one, and writes the
        manifest after it, so a crash inside leaves no manifest. One flush for the whole
        checkpoint instead of two per blob.
        """
        if self._deferred is not None:  # nested: the outer block syncs
            yield
            return
        self._deferred = []
        try:
            yield
            paths, self._deferred = self._deferred, None
            if self.fsync:
                for path in paths:
                    with contextlib.suppress(FileNotFoundError):
                        fd = os.open(path, os.O_RDONLY)
                        try:
                            os.fsync(fd)
                        finally:
                            os.close(fd)
                for parent in dict.fromkeys(p.parent for p in paths):
                    _fsync_dir(parent)
        finally:
            self._deferred = None

    # -- helpers ---------------------------------------------------------------------
    def _path(self, key: str) -> Path:
        key = key.strip("/")
        if not key or any(part in ("", ".", "..") for part in key.split("/")):
            raise StoreError(f"invalid store key {key!r}: use non-empty '/'-separated names")
        return self.root / key

    def _atomic_write(self, key: str, write_body) -> None:
        final = self._path(key)
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = final.with_name(f"{final.name}{_TMP_MARK}{uuid.uuid4().hex[:8]}")
        try:
            deferred = self._deferred
            with open(tmp, "wb") as fh:
                write_body(fh)
                fh.flush()
                if self.fsync and deferred is None:
                    os.fsync(fh.fileno())
                elif self.fsync and hasattr(os, "posix_fadvise"):
                    # start writeback of this blob now (asynchronously), so the disk
                    # works while the next blob is hashed and written
                    with contextlib.suppress(OSError):
                        os.posix_fadvise(fh.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
            os.replace(tmp, final)
            if deferred is not None:
                deferred.append(final)
            elif self.fsync:
                _fsync_dir(final.parent)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise StoreError(f"writing {final} failed: {exc}; check free space and permissions") from exc
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise

    # -- CheckpointStore -------------------------------------------------------------
    def put_bytes(self, key: str, data: bytes) -> None:
        """Atomically store ``data`` (anything supporting the buffer protocol)."""
        view = memoryview(data).cast("B")

        def body(fh) -> None:
            for off in range(0, len(view), CHUNK_BYTES):
                fh.write(view[off:off + CHUNK_BYTES])

        self._atomic_write(key, body)

    def put_file(self, key: str, src: BinaryIO | str, size: int | None = None) -> None:
        """Atomically store a file (path) or a readable stream.

        A stream that offers ``getbuffer()`` (``io.BytesIO``,
        ``checkpointing.snapshot.BufferReader``) is written straight from its memory
        without an extra copy.
        """
        if isinstance(src, (str, os.PathLike)):
            with open(src, "rb") as fh:
                self.put_file(key, fh, size)
            return
        getbuffer = getattr(src, "getbuffer", None)
        if getbuffer is not None:
            self.put_bytes(key, getbuffer())
            return

        def body(fh) -> None:
            shutil.copyfileobj(src, fh, CHUNK_BYTES)

        self._atomic_write(key, body)

    def get_bytes(self, key: str) -> bytes:
        path = self._path(key)
        try:
            return path.read_bytes()
        except FileNotFoundError:
            raise KeyError(key) from None
        except OSError as exc:
            raise StoreError(f"reading {path} failed: {exc}") from exc

    def open_read(self, key: str) -> BinaryIO:
        path = self._path(key)
        try:
            return open(path, "rb")
        except FileNotFoundError:
            raise KeyError(key) from None
        except OSError as exc:
            raise StoreError(f"opening {path} failed: {exc}") from exc

    def list(self, prefix: str = "") -> Iterator[tuple[str, int]]:
        prefix = prefix.lstrip("/")
        base = self.root
        if not base.is_dir():
            return
        for dirpath, _dirs, files in os.walk(base):
            for name in files:
                if _TMP_MARK in name:
                    continue  # an unfinished put: invisible by design
                full = Path(dirpath) / name
                key = full.relative_to(base).as_posix()
                if not key.startswith(prefix):
                    continue
                try:
                    size = full.stat().st_size
                except FileNotFoundError:  # deleted while listing
                    continue
                yield key, size

    # -- conditional puts, partial uploads, free space ------------------------------
    def get_versioned(self, key: str) -> tuple[bytes, str]:
        data = self.get_bytes(key)
        return data, hashlib.sha256(data).hexdigest()

    def put_if(self, key: str, data: bytes, expected_version: str | None) -> str:
        """Compare-and-swap under an exclusive ``flock`` on a lock file beside the blob
        (works between processes of one host and on NFSv4); the put itself stays atomic."""
        final = self._path(key)
        final.parent.mkdir(parents=True, exist_ok=True)
        lock_path = final.with_name(final.name + _LOCK_MARK)
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StoreError(f"cannot open lock file {lock_path}: {exc}; check permissions") from exc
        try:
            end = time.monotonic() + LOCK_WAIT_SECONDS
            while True:  # bounded: a process frozen inside its (tiny) critical section
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= end:
                        raise StoreError(f"{lock_path} stayed locked for {LOCK_WAIT_SECONDS:.0f} s "
                                         "(a writer frozen mid-update?); retry later") from None
                    time.sleep(0.01)
            try:
                current = hashlib.sha256(final.read_bytes()).hexdigest()
            except FileNotFoundError:
                current = None
            except OSError as exc:
                raise StoreError(f"reading {final} failed: {exc}") from exc
            if current != expected_version:
                state = "exists" if expected_version is None else (
                    "is gone" if current is None else "changed since it was read")
                raise StorePreconditionFailed(f"conditional write of {final} refused: it {state}")
            self.put_bytes(key, data)
            return hashlib.sha256(bytes(data)).hexdigest()
        finally:
            os.close(fd)  # releases the flock

    def list_partial(self, prefix: str = "") -> list[PartialUpload]:
        """Temp files of puts whose writer died before the rename (invisible to ``list``)."""
        prefix = prefix.lstrip("/")
        out: list[PartialUpload] = []
        if not self.root.is_dir():
            return out
        for dirpath, _dirs, files in os.walk(self.root):
            for name in files:
                if _TMP_MARK not in name or name.endswith(_LOCK_MARK):
                    continue
                full = Path(dirpath) / name
                rel = full.relative_to(self.root).as_posix()
                key = rel.rsplit(_TMP_MARK, 1)[0]
                if not key.startswith(prefix):
                    continue
                try:
                    started = full.stat().st_mtime
                except FileNotFoundError:
                    continue
                out.append(PartialUpload(key=key, upload_id=rel, started=started))
        return out

    def abort_partial(self, upload: PartialUpload) -> None:
        path = self.root / upload.upload_id
        if _TMP_MARK not in path.name or not path.resolve().is_relative_to(self.root.resolve()):
            raise StoreError(f"{upload.upload_id!r} is not a temp file of {self.root}")
        with contextlib.suppress(FileNotFoundError):
            path.unlink()

    def free_bytes(self) -> int | None:
        """Bytes an unprivileged writer can still use on the root's filesystem."""
        try:
            st = os.statvfs(self.root)
        except OSError:
            return None
        return st.f_bavail * st.f_frsize

    def check_access(self) -> None:
        """The root exists (made at construction) and this process may write to it."""
        if not os.access(self.root, os.W_OK | os.X_OK):
            raise StoreError(f"checkpoint directory {self.root} is not writable by this process; "
                             "point SPOTFLEET_CHECKPOINT_URI at a writable directory",
                             reason="access_denied")

    def delete_prefix(self, prefix: str) -> None:
        prefix = prefix.strip("/")
        if not prefix:
            raise StoreError("refusing to delete the whole store: give a non-empty prefix")
        target = self.root / prefix
        if target.is_dir():
            shutil.rmtree(target, ignore_errors=True)
            return
        # a plain key prefix (not a directory): delete matching files
        for key, _size in list(self.list(prefix)):
            with contextlib.suppress(FileNotFoundError):
                self._path(key).unlink()
