"""Rank 0 of an elastic stage insures against losing the whole group: the training side
of the contract (``SPOTFLEET_LOSS_UNITS``, the stats file's ``loss_units``), in-process.

Before: a session had no notion of failure units; an elastic stage's rank 0 got the
per-node MTTP at best and its tau insured against losing one node, which a shrink
survives without any restore (docs/elastic.md).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import torch

from checkpointing.elastic import ElasticSession
from checkpointing.events import EventLog, read_events
from checkpointing.intervals import group_loss_mttp_seconds, thesis_optimum_seconds
from checkpointing.session import TrainingSession, read_stats_fields


def _model():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def _steps(session: TrainingSession, model, opt, start: int, stop: int) -> None:
    for step in range(start, stop):
        with session.step():
            opt.zero_grad()
            model(torch.full((2, 4), float(step))).pow(2).mean().backward()
            opt.step()


def _intervals(path: Path) -> list[dict]:
    return [e.data for e in read_events(path) if e.kind == "interval"]


def test_group_mttp_drives_tau_and_the_interval_event(tmp_path: Path) -> None:
    model, opt = _model()
    ev = tmp_path / "events.jsonl"
    session = TrainingSession(store=str(tmp_path / "ckpt"), model=model, optimizer=opt,
                              events=EventLog(ev), mttp_seconds=600.0, restart_seconds=40.0,
                              ckpt_seconds=0.5, loss_units=2, insurance="always")
    group = group_loss_mttp_seconds(600.0, 40.0, 2)  # (3 lam + mu) / (2 lam^2) = 5400 s
    assert group == pytest.approx(5400.0)
    assert session.policy.mttp_seconds == pytest.approx(group)
    assert session.policy.tau_seconds == pytest.approx(thesis_optimum_seconds(0.5, group, 40.0))
    session.restore()
    _steps(session, model, opt, 0, 3)
    session.finish()
    first = _intervals(ev)[0]
    assert first["mttp_seconds"] == pytest.approx(group)
    assert first["node_mttp_seconds"] == 600.0 and first["loss_units"] == 2
    assert first["restart_seconds"] == 40.0
    assert first["tau_seconds"] == pytest.approx(thesis_optimum_seconds(0.5, group, 40.0))


def test_one_unit_is_the_single_node_interval(tmp_path: Path) -> None:
    model, opt = _model()
    session = TrainingSession(store=str(tmp_path / "ckpt"), model=model, optimizer=opt,
                              events=EventLog(tmp_path / "e.jsonl"), mttp_seconds=600.0,
                              restart_seconds=40.0, ckpt_seconds=0.5)
    assert session.loss_units == 1 and session.policy.mttp_seconds == 600.0
    session.finish()


def test_stats_file_units_and_rates_move_the_group_interval(tmp_path: Path) -> None:
    """The provider rewrites the file when a node is launched or ends: a new per-unit MTTP,
    R or number of units reaches the running rank 0 (a new ``interval`` event)."""
    stats = tmp_path / "stats.json"
    stats.write_text(json.dumps({"mttp_seconds": 600.0, "restart_seconds": 40.0, "loss_units": 2}))
    model, opt = _model()
    ev = tmp_path / "events.jsonl"
    session = TrainingSession(store=str(tmp_path / "ckpt"), model=model, optimizer=opt,
                              events=EventLog(ev), stats_file=stats, ckpt_seconds=0.5,
                              insurance="always")
    assert session.loss_units == 2
    assert session.policy.mttp_seconds == pytest.approx(group_loss_mttp_seconds(600.0, 40.0, 2))
    session.restore()
    _steps(session, model, opt, 0, 2)
    # one zone's node is gone and not replaced: one unit left; its MTTP was refined
    stats.write_text(json.dumps({"mttp_seconds": 500.0, "restart_seconds": 40.0, "loss_units": 1}))
    os.utime(stats, (time.time() + 5, time.time() + 5))
    session._stats_checked = 0.0  # do not wait for the 1 s poll interval
    _steps(session, model, opt, 2, 3)
    assert session.policy.mttp_seconds == 500.0
    # only R changes (a measured relaunch): the group's MTTP depends on R, so it moves too
    stats.write_text(json.dumps({"restart_seconds": 20.0, "loss_units": 2}))
    os.utime(stats, (time.time() + 10, time.time() + 10))
    session._stats_checked = 0.0
    _steps(session, model, opt, 3, 4)
    assert session.policy.mttp_seconds == pytest.approx(group_loss_mttp_seconds(500.0, 20.0, 2))
    session.finish()
    got = [(d["loss_units"], d["node_mttp_seconds"], d["restart_seconds"]) for d in _intervals(ev)]
    # (finish's final save measures delta: one more event with the same inputs may follow)
    assert got[:3] == [(2, 600.0, 40.0), (1, 500.0, 40.0), (2, 500.0, 20.0)], got


def test_stats_file_rejects_a_bad_unit_count(tmp_path: Path) -> None:
    stats = tmp_path / "s.json"
    stats.write_text(json.dumps({"mttp_seconds": 60.0, "loss_units": 0}))
    with pytest.raises(ValueError, match="loss_units=0 must be an integer >= 1"):
        read_stats_fields(stats)


def test_elastic_session_reads_the_units_from_the_environment(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("SPOTFLEET_STATS_FILE", raising=False)
    monkeypatch.setenv("SPOTFLEET_CHECKPOINT_URI", str(tmp_path / "ckpt"))
    monkeypatch.setenv("SPOTFLEET_MTTP_SECONDS", "600")
    monkeypatch.setenv("SPOTFLEET_RESTART_SECONDS", "40")
    monkeypatch.setenv("SPOTFLEET_LOSS_UNITS", "3")
    model, opt = _model()
    el = ElasticSession.from_env(model=model, optimizer=opt, total_steps=5, guard=None,
                                 events=EventLog(tmp_path / "e.jsonl"))
    assert el._session_kwargs["loss_units"] == 3 and el._session_kwargs["mttp_seconds"] == 600.0
    monkeypatch.setenv("SPOTFLEET_LOSS_UNITS", "two")
    with pytest.raises(ValueError, match="SPOTFLEET_LOSS_UNITS='two' must be an integer >= 1"):
        ElasticSession.from_env(model=model, optimizer=opt, total_steps=5, guard=None)
