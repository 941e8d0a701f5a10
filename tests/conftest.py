"""Shared fixtures. Real data lives in ../shared/data (never copied into the repo)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("SPOTFLEET_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """Path to ../shared/data; skips (with the reason) when the folder is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data folder {SHARED_DATA} is absent; set SPOTFLEET_SHARED_DATA")
    return SHARED_DATA


@pytest.fixture
def moto_s3(monkeypatch: pytest.MonkeyPatch):
    """moto's in-process S3 mock (us-east-1) with no real endpoint, profile or key in reach.

    Yields a boto3 S3 client inside the mock; for fast unit checks only (the real
    S3-compatible server is tests/s3/s3_radosgw_server.py).
    """
    import boto3
    from moto import mock_aws

    for var in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        yield boto3.client("s3", region_name="us-east-1")
