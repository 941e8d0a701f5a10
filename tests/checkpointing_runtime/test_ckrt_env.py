"""Bad SPOTFLEET_* values and checkpoint locations are refused when the session is built,
with the variable, the value and a fix in the message (never a silently skipped save,
a disabled lease or a wrong exit code later)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from checkpointing.session import TrainingSession
from checkpointing.stores.base import StoreError, open_store
from checkpointing.stores.local import LocalStore

BAD_VALUES = [
    ("SPOTFLEET_SAVE_WAIT_SECONDS", "nan"),
    ("SPOTFLEET_SAVE_WAIT_SECONDS", "0"),
    ("SPOTFLEET_SAVE_WAIT_SECONDS", "inf"),
    ("SPOTFLEET_FINAL_SAVE_TIMEOUT_SECONDS", "-1"),
    ("SPOTFLEET_FINAL_SAVE_TIMEOUT_SECONDS", "nan"),
    ("SPOTFLEET_LEASE_TTL_SECONDS", "nan"),
    ("SPOTFLEET_LEASE_TTL_SECONDS", "inf"),
    ("SPOTFLEET_LEASE_TTL_SECONDS", "0"),
    ("SPOTFLEET_LEASE_TTL_SECONDS", "1e300"),
    ("SPOTFLEET_GRACE_SECONDS", "nan"),
    ("SPOTFLEET_GRACE_SECONDS", "-5"),
    ("SPOTFLEET_MTTP_SECONDS", "0"),
    ("SPOTFLEET_MTTP_SECONDS", "nan"),
    ("SPOTFLEET_RESTART_SECONDS", "-1"),
    ("SPOTFLEET_CHECKPOINT_SECONDS", "nan"),
    ("SPOTFLEET_CHECKPOINT_SECONDS", "inf"),
    ("SPOTFLEET_CHECKPOINT_PRIOR_WEIGHT", "0"),
]


@pytest.mark.parametrize(("var", "value"), BAD_VALUES)
def test_bad_number_is_refused_naming_the_variable_and_the_fix(tmp_path: Path, monkeypatch,
                                                              var: str, value: str) -> None:
    monkeypatch.setenv("SPOTFLEET_CHECKPOINT_URI", str(tmp_path / "ckpt"))
    monkeypatch.setenv(var, value)
    with pytest.raises(ValueError) as err:
        TrainingSession.from_env(model=torch.nn.Linear(2, 2), guard=None)
    msg = str(err.value)
    assert f"{var}={value!r}" in msg and f"e.g. {var}=" in msg


def test_prior_weight_that_is_not_a_number_is_not_called_seconds(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("SPOTFLEET_CHECKPOINT_URI", str(tmp_path / "ckpt"))
    monkeypatch.setenv("SPOTFLEET_CHECKPOINT_PRIOR_WEIGHT", "ten")
    with pytest.raises(ValueError, match=r"SPOTFLEET_CHECKPOINT_PRIOR_WEIGHT='ten' is not a number of "
                                         r"pseudo-saves; set it to e\.g\. SPOTFLEET_CHECKPOINT_PRIOR_WEIGHT=10"):
        TrainingSession.from_env(model=torch.nn.Linear(2, 2), guard=None)


def test_good_values_still_configure_the_session(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("SPOTFLEET_CHECKPOINT_URI", str(tmp_path / "ckpt"))
    monkeypatch.setenv("SPOTFLEET_SAVE_WAIT_SECONDS", "2.5")
    monkeypatch.setenv("SPOTFLEET_FINAL_SAVE_TIMEOUT_SECONDS", "30")
    monkeypatch.setenv("SPOTFLEET_LEASE_TTL_SECONDS", "9")
    monkeypatch.setenv("SPOTFLEET_RESTART_SECONDS", "0")
    session = TrainingSession.from_env(model=torch.nn.Linear(2, 2), guard=None)
    assert session.saver.wait_limit_seconds == 2.5
    assert session.final_save_timeout_seconds == 30.0
    assert session.lease_ttl_seconds == 9.0 and session.restart_seconds == 0.0
    session.finish()


@pytest.mark.parametrize("uri", ["ftp://host/x", "gs://bucket/run", "S3://bucket/run", "s3:/bucket/run",
                                 "https://example.com/ckpt"])
def test_unknown_location_scheme_is_refused_not_made_a_local_dir(tmp_path: Path, monkeypatch,
                                                                 uri: str) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StoreError) as err:
        open_store(uri)
    msg = str(err.value)
    assert repr(uri) in msg and "s3://bucket/prefix" in msg and "file:///abs/dir" in msg
    assert "SPOTFLEET_CHECKPOINT_URI" in msg
    assert list(tmp_path.iterdir()) == []  # no directory named after the URI


def test_directories_and_file_uris_still_open_a_local_store(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    for uri, where in ((str(tmp_path / "abs"), tmp_path / "abs"), ("rel/dir", tmp_path / "rel" / "dir"),
                       (f"file://{tmp_path / 'f'}", tmp_path / "f"),
                       ("file://frel/dir", tmp_path / "frel" / "dir")):
        store = open_store(uri)
        assert isinstance(store, LocalStore) and Path(store.location) == where


@pytest.mark.parametrize("keep", [0, -1])
def test_keep_periodic_below_one_is_refused_at_construction(tmp_path: Path, keep: int) -> None:
    with pytest.raises(ValueError, match=rf"keep_periodic must be >= 1 .*got {keep}"):
        TrainingSession(store=str(tmp_path / "ckpt"), model=torch.nn.Linear(2, 2), guard=None,
                        keep_periodic=keep)
    assert not (tmp_path / "ckpt").exists()  # refused before anything touched the store
