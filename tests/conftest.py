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
