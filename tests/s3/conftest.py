"""Fixtures for S3 store tests: a real S3-compatible server (Ceph radosgw) on 127.0.0.1.

The gateway starts once per test session (~15-20 s) and is stopped afterwards. Tests
that need it are marked ``@pytest.mark.s3``; they skip with the reason only when the
Ceph binaries are not installed (``sudo bash scripts/install_test_services.sh``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from s3_radosgw_server import RadosGateway, running_gateway


@pytest.fixture(scope="session")
def radosgw() -> Iterator[RadosGateway]:
    with running_gateway() as gateway:
        yield gateway


@pytest.fixture
def s3_env(radosgw: RadosGateway, monkeypatch: pytest.MonkeyPatch) -> RadosGateway:
    """Credentials and endpoint in the environment, as the fleet sets them on a node."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", radosgw.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", radosgw.secret_key)
    monkeypatch.setenv("AWS_ENDPOINT_URL", radosgw.endpoint_url)
    monkeypatch.setenv("AWS_REGION", radosgw.region)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    return radosgw


@pytest.fixture
def bucket(s3_env: RadosGateway) -> str:
    """A fresh, empty bucket on the gateway."""
    name = f"t-{uuid.uuid4().hex[:16]}"
    s3_env.client().create_bucket(Bucket=name)
    return name
