"""S3Store against a real S3-compatible server (Ceph radosgw on 127.0.0.1)."""

from __future__ import annotations

import hashlib
import io
import os

import pytest

from checkpointing.stores import StoreError, open_store
from checkpointing.stores.s3 import MIN_PART_SIZE_BYTES, S3Store

pytestmark = pytest.mark.s3
PART = MIN_PART_SIZE_BYTES  # 5 MiB: smallest legal part, so multipart needs little data


def _blob(nbytes: int, seed: int = 0) -> bytes:
    return hashlib.sha256(str(seed).encode()).digest() * (nbytes // 32) + b"x" * (nbytes % 32)


def test_round_trip_and_listing(bucket: str) -> None:
    store = S3Store.from_uri(f"s3://{bucket}/run1")  # endpoint from AWS_ENDPOINT_URL
    assert store.location == f"s3://{bucket}/run1"
    store.put_bytes("ckpt-000010/manifest.json", b'{"step": 10}')
    store.put_bytes("ckpt-000010/model.bin", _blob(1000))
    store.put_bytes("ckpt-000020/model.bin", _blob(2000, 1))
    S3Store.from_uri(f"s3://{bucket}/other").put_bytes("x", b"not mine")
    assert store.get_bytes("ckpt-000010/manifest.json") == b'{"step": 10}'
    assert sorted(store.list()) == [("ckpt-000010/manifest.json", 12), ("ckpt-000010/model.bin", 1000),
                                    ("ckpt-000020/model.bin", 2000)]
    assert [k for k, _ in store.list("ckpt-000020/")] == ["ckpt-000020/model.bin"]
    with pytest.raises(KeyError):
        store.get_bytes("ckpt-000030/manifest.json")


def test_multipart_upload_with_concurrency(bucket: str, s3_env, tmp_path) -> None:
    store = S3Store(bucket, "big", part_size_bytes=PART, max_concurrency=4)
    data = _blob(3 * PART + 12345, 7)
    path = tmp_path / "model.bin"
    path.write_bytes(data)
    store.put_file("from-path.bin", str(path))
    with open(path, "rb") as fh:
        store.put_file("from-fileobj.bin", fh)
    store.put_bytes("from-bytes.bin", data)
    client = s3_env.client()
    for key in ("from-path.bin", "from-fileobj.bin", "from-bytes.bin"):
        head = client.head_object(Bucket=bucket, Key=f"big/{key}")
        assert head["ContentLength"] == len(data)
        assert head["ETag"].strip('"').endswith("-4")  # S3: multipart ETag = md5-of-md5s "-<parts>"
        with store.open_read(key) as stream:
            stream.seek(PART)  # seekable (torch.load needs it)
            assert stream.read(10) == data[PART:PART + 10]
            stream.seek(0)
            assert hashlib.sha256(stream.read()).digest() == hashlib.sha256(data).digest()
    assert store.get_bytes("from-bytes.bin") == data


class _FailingReader(io.RawIOBase):
    """A file object that breaks after ``limit`` bytes (a crash mid-upload)."""

    def __init__(self, data: bytes, limit: int):
        self._buf = io.BytesIO(data)
        self._limit = limit

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        if self._buf.tell() >= self._limit:
            raise OSError("disk read error (injected)")
        chunk = self._buf.read(min(len(b), self._limit - self._buf.tell()))
        b[: len(chunk)] = chunk
        return len(chunk)


def test_failed_multipart_upload_leaves_nothing(bucket: str, s3_env) -> None:
    store = S3Store(bucket, "torn", part_size_bytes=PART, max_concurrency=2)
    data = _blob(3 * PART, 3)
    with pytest.raises(StoreError, match="upload"):
        store.put_file("model.bin", io.BufferedReader(_FailingReader(data, 2 * PART + 100)))
    assert list(store.list()) == []  # no partial object is ever visible
    uploads = s3_env.client().list_multipart_uploads(Bucket=bucket).get("Uploads", [])
    assert uploads == []  # and the multipart upload was aborted, not left to accrue storage


def test_delete_prefix_only_under_prefix(bucket: str) -> None:
    store = S3Store.from_uri(f"s3://{bucket}/r")
    for step in (1, 2):
        for name in ("a", "b", "manifest.json"):
            store.put_bytes(f"ckpt-{step}/{name}", b"x" * step)
    store.delete_prefix("ckpt-1/")
    assert sorted(k for k, _ in store.list()) == ["ckpt-2/a", "ckpt-2/b", "ckpt-2/manifest.json"]


def test_open_store_and_ensure_bucket(s3_env) -> None:
    store = open_store("s3://fresh-bucket-for-spotfleet/p", part_size_bytes=PART, max_concurrency=2)
    assert isinstance(store, S3Store) and store.endpoint_url == s3_env.endpoint_url
    with pytest.raises(StoreError, match="does not exist") as info:
        store.put_bytes("k", b"v")
    assert "fresh-bucket-for-spotfleet" in str(info.value) and s3_env.endpoint_url in str(info.value)
    store.ensure_bucket()
    store.ensure_bucket()  # idempotent
    store.put_bytes("k", b"v")
    assert store.get_bytes("k") == b"v"


def test_wrong_secret_is_a_clear_error(bucket: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    store = S3Store.from_uri(f"s3://{bucket}/x", max_attempts=1)
    with pytest.raises(StoreError) as info:
        store.put_bytes("k", b"v")
    message = str(info.value)
    assert "access denied" in message and bucket in message and os.environ["AWS_ENDPOINT_URL"] in message


def test_torch_state_round_trip_bit_identical(bucket: str) -> None:
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = torch.nn.Linear(1024, 1536)  # ~6.3 MB of float32: crosses the 5 MiB part size
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    store = S3Store.from_uri(f"s3://{bucket}/torch", part_size_bytes=PART, max_concurrency=3)
    buf.seek(0)
    store.put_file("model.pt", buf)
    with store.open_read("model.pt") as stream:
        loaded = torch.load(stream, weights_only=True)
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded[name], tensor) and loaded[name].dtype == tensor.dtype
