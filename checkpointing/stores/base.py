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
from collections.abc import Iterator
from typing import BinaryIO


class StoreError(RuntimeError):
    """A store operation failed (unreachable endpoint, permission, missing key).

    The message names the location and what the user can do about it.
    """


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
    if not uri:
        raise StoreError("empty checkpoint location; set SPOTFLEET_CHECKPOINT_URI to a directory or s3://bucket/prefix")
    from checkpointing.stores.local import LocalStore

    return LocalStore(uri, **kwargs)
