"""Quick unit tests of S3Store on moto's in-process mock (the real-server tests are in
test_s3_store_radosgw.py; moto only backs these fast checks)."""

from __future__ import annotations

import boto3
import pytest

from checkpointing.stores import StoreError
from checkpointing.stores.s3 import MIN_PART_SIZE_BYTES, S3Store


@pytest.fixture
def mocked(moto_s3):
    moto_s3.create_bucket(Bucket="unit")


def test_prefix_mapping_and_sizes(mocked) -> None:
    store = S3Store.from_uri("s3://unit/a/b/", region="us-east-1")
    store.put_bytes("/c/d", b"12345")
    assert list(store.list()) == [("c/d", 5)]
    raw = boto3.client("s3", region_name="us-east-1").list_objects_v2(Bucket="unit")["Contents"]
    assert [o["Key"] for o in raw] == ["a/b/c/d"]
    assert store.uri("c/d") == "s3://unit/a/b/c/d"


def test_multipart_threshold_is_part_size(mocked) -> None:
    store = S3Store("unit", part_size_bytes=MIN_PART_SIZE_BYTES, max_concurrency=2, region="us-east-1")
    store.put_bytes("small", b"x" * 100)
    store.put_bytes("big", b"y" * (2 * MIN_PART_SIZE_BYTES + 1))
    head = boto3.client("s3", region_name="us-east-1").head_object
    assert "-" not in head(Bucket="unit", Key="small")["ETag"]
    assert head(Bucket="unit", Key="big")["ETag"].strip('"').endswith("-3")


def test_missing_bucket_and_empty_key(mocked) -> None:
    store = S3Store("no-such-bucket", region="us-east-1")
    with pytest.raises(StoreError, match="'no-such-bucket' does not exist"):
        store.put_bytes("k", b"v")
    with pytest.raises(StoreError, match="empty key"):
        S3Store("unit", region="us-east-1").put_bytes("/", b"v")
