"""S3Store failure paths that need no server: an unreachable endpoint, bad arguments."""

from __future__ import annotations

import socket

import pytest

from checkpointing.stores import StoreError
from checkpointing.stores.s3 import S3Store, parse_s3_uri


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again when the block ends: nothing listens


@pytest.fixture
def creds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")


@pytest.mark.parametrize("op", ["put_bytes", "get_bytes", "list", "open_read"])
def test_unreachable_endpoint_fails_with_what_to_check(creds, op: str) -> None:
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    store = S3Store.from_uri("s3://ckpt-bucket/run7", endpoint_url=endpoint)
    with pytest.raises(StoreError) as info:
        if op == "put_bytes":
            store.put_bytes("k", b"v")
        elif op == "list":
            list(store.list())
        else:
            getattr(store, op)("k")
    message = str(info.value)
    assert endpoint in message and "ckpt-bucket" in message
    assert "unreachable" in message and "AWS_ENDPOINT_URL" in message


def test_uri_and_argument_errors() -> None:
    assert parse_s3_uri("s3://b/p/q/") == ("b", "p/q")
    with pytest.raises(StoreError, match="no bucket name"):
        parse_s3_uri("s3:///prefix")
    with pytest.raises(StoreError, match="5 MiB"):
        S3Store("b", part_size_bytes=1 << 20)
    with pytest.raises(StoreError, match="max_concurrency"):
        S3Store("b", max_concurrency=0)


def test_endpoint_defaults_to_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    store = S3Store.from_uri("s3://b/p")
    assert store.endpoint_url == "http://127.0.0.1:9" and store.location == "s3://b/p"
    assert S3Store.from_uri("s3://b", endpoint_url="http://h:1").endpoint_url == "http://h:1"
