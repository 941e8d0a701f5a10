"""The blob-store interface that checkpoints are written to.

A store is a flat key -> bytes namespace under one root (a directory or an S3 prefix).
Keys use ``/`` separators. Commit protocol (implemented ONCE, above the stores, in
``checkpointing.manifest``): write every data blob first, then the manifest blob
(sizes + sha256) last; a checkpoint without a valid manifest is never loaded. Stores
only need to make a single ``put`` atomic (local: write temp + fsync + rename; S3:
a PUT or completed multipart upload is atomic by protocol).
"""

from __future__ import annotations

import abc
import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from checkpointing.redact import redact


class StoreError(RuntimeError):
    """A store operation failed (unreachable endpoint, permission, missing key).

    The message names the location and what the user can do about it. ``reason`` is
    one of ``REASONS`` when the store knows the class of the failure (``unreachable``,
    ``no_credentials``, ``no_bucket``, ``access_denied``), else ``""``.
    """

    REASONS = ("unreachable", "no_credentials", "no_bucket", "access_denied")

    def __init__(self, *args: object, reason: str = ""):
        super().__init__(*args)
        self.reason = reason


class StorePreconditionFailed(StoreError):
    """A conditional put lost: the key already exists (create-only put) or it changed
    since it was read (compare-and-swap put). Used by the prefix lease."""


@dataclass(frozen=True)
class PartialUpload:
    """A put that started but never finished (its writer was killed): a local temp file
    or an S3 multipart upload. ``key`` is the key it was writing, ``upload_id`` what
    ``abort_partial`` needs, ``started`` a unix time in seconds (None if unknown)."""

    key: str
    upload_id: str
    started: float | None = None


class CheckpointStore(abc.ABC):
    """Minimal blob store. All sizes are in bytes."""

    #: human-readable location of the root, e.g. ``/data/ckpt`` or ``s3://bucket/run1``
    location: str

    @abc.abstractmethod
    def put_file(self, key: str, src: BinaryIO | str, size: int | None = None) -> None:
        """Atomically store the content of a file object or path under ``key``."""

    @abc.abstractmethod
    def put_bytes(self, key: str, data: bytes) -> None:
        """Atomically store ``data`` under ``key``."""

    @abc.abstractmethod
    def get_bytes(self, key: str) -> bytes:
        """Return the whole blob; raise ``KeyError`` if missing, ``StoreError`` on I/O failure."""

    @abc.abstractmethod
    def open_read(self, key: str) -> BinaryIO:
        """A readable binary stream of the blob (for large tensors)."""

    @abc.abstractmethod
    def list(self, prefix: str = "") -> Iterator[tuple[str, int]]:
        """Yield (key, size_bytes) for every key under ``prefix``."""

    @abc.abstractmethod
    def delete_prefix(self, prefix: str) -> None:
        """Delete every key under ``prefix`` (used by retention)."""

    def uri(self, key: str) -> str:
        return f"{self.location.rstrip('/')}/{key}"

    # -- optional capabilities (defaults: none) ---------------------------------------
    def get_versioned(self, key: str) -> tuple[bytes, str]:
        """(data, version token) of a small blob, for ``put_if``; ``KeyError`` if missing."""
        data = self.get_bytes(key)
        return data, hashlib.sha256(data).hexdigest()

    def put_if(self, key: str, data: bytes, expected_version: str | None) -> str:
        """Atomic conditional put: create only if absent (``expected_version`` None) or
        replace only if the blob is still at ``expected_version``; returns the new
        version. Raises ``StorePreconditionFailed`` when the condition does not hold."""
        raise StoreError(f"{type(self).__name__} at {self.location} does not support conditional "
                         "writes (needed for the prefix lease); pass lease=False to TrainingSession")

    def list_partial(self, prefix: str = "") -> list[PartialUpload]:
        """Puts under ``prefix`` that started and never finished (killed writers)."""
        return []

    def abort_partial(self, upload: PartialUpload) -> None:
        """Discard one unfinished put (delete the temp file / abort the multipart upload)."""
        return None

    def free_bytes(self) -> int | None:
        """Bytes still writable under the root, or None when the store has no such limit."""
        return None

    def check_access(self) -> None:
        """One cheap request that fails the way a save would when the store is unusable
        from here (no such bucket, unreachable endpoint, no credentials, no permission):
        raises ``StoreError``. The pipelines call it before they launch any node."""
        next(iter(self.list("")), None)


def open_store(uri: str, **kwargs) -> CheckpointStore:
    """Open a store from a URI: ``/abs/dir``, ``file:///abs/dir`` or ``s3://bucket/prefix``.

    S3 keyword arguments (endpoint_url, region, part_size_bytes, max_concurrency) are
    passed through; the endpoint defaults to ``AWS_ENDPOINT_URL``.
    """
    if uri.startswith("s3://"):
        from checkpointing.stores.s3 import S3Store

        return S3Store.from_uri(uri, **kwargs)
    if uri.startswith("file://"):
        uri = uri[len("file://"):]
    else:
        _refuse_unknown_scheme(uri)
    if not uri:
        raise StoreError("empty checkpoint location; set SPOTFLEET_CHECKPOINT_URI to a directory or s3://bucket/prefix")
    from checkpointing.stores.local import LocalStore

    return LocalStore(uri, **kwargs)


#: ``scheme:`` at the start of a location (two or more characters, so that a Windows
#: drive letter is not one)
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):")
SUPPORTED_LOCATIONS = "a directory (/abs/dir or rel/dir), file:///abs/dir or s3://bucket/prefix"


def _refuse_unknown_scheme(uri: str) -> None:
    """A location that starts like a URI of a scheme this library has no store for
    (``gs://``, ``ftp://``, ``https://``, ``S3://``, ``s3:/bucket``) must not silently
    become a relative local directory of that name."""
    match = _SCHEME.match(uri)
    if match is None:
        return
    scheme = match.group(1)
    hint = ""
    if scheme.lower() in ("s3", "file"):
        hint = f" (write it as {scheme.lower()}://..., lower case and with two slashes)"
    redacted = redact(uri)
    raise StoreError(
        f"checkpoint location {redacted!r} has the URI scheme {scheme!r}{hint}, which no checkpoint "
        f"store supports. Supported: {SUPPORTED_LOCATIONS}. Fix: set SPOTFLEET_CHECKPOINT_URI (or "
        "store=) to one of those (a local directory whose name contains ':' can be written ./name)")
