"""Shared fixtures of the fault tests: ONE real radosgw S3 server per test session
(``s3_gateway``; modules that need their own lifecycle start theirs) (helpers: fault_s3.py)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "s3"))
from s3_radosgw_server import RadosGateway, running_gateway  # noqa: E402


@pytest.fixture(scope="session")
def s3_gateway() -> Iterator[RadosGateway]:
    """A real S3 server (Ceph radosgw on 127.0.0.1) for the whole session; skips with the
    reason when Ceph is not installed."""
    with running_gateway("faults-shared-radosgw-") as gw:
        yield gw


@pytest.fixture(autouse=True)
def _no_attempt_left_running() -> Iterator[None]:
    """Kill training processes a failing test left running (they would keep pytest alive)."""
    yield
    if "example_procs" in sys.modules:
        sys.modules["example_procs"].ExampleLauncher.close_all()
