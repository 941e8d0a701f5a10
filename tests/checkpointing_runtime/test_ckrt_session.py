"""TrainingSession in-process: restore, policy saves, notices, stats file, explicit control."""

from __future__ import annotations

import json
import math
import os
import signal
import time
from pathlib import Path

import pytest
import torch

from checkpointing.events import EventLog, read_events
from checkpointing.guard import PreemptionGuard
from checkpointing.notices.signals import SignalSource
from checkpointing.policy import SaveKind
from checkpointing.runtime_env import EXIT_PREEMPTED
from checkpointing.session import TrainingSession, read_stats_file
from checkpointing.torch_state import state_sha256


def _objects(seed: int = 0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Dropout(0.2), torch.nn.Linear(16, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.99)
    return model, opt, sched


def _step(model, opt, sched, step: int) -> float:
    g = torch.Generator().manual_seed(step)
    x = torch.randn(4, 8, generator=g)
    opt.zero_grad()
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
    sched.step()
    return float(loss.detach())


def _session(tmp: Path, model, opt, sched, **kw) -> TrainingSession:
    kw.setdefault("events", EventLog(tmp / "events.jsonl"))
    return TrainingSession(store=str(tmp / "ckpt"), model=model, optimizer=opt, scheduler=sched, **kw)


def _loop(session: TrainingSession, objs, start: int, stop: int) -> None:
    for step in range(start, stop):
        with session.step() as st:
            st.loss = _step(*objs, step)
        if session.should_stop():
            break


def test_session_saves_restores_and_reports(tmp_path: Path) -> None:
    objs = _objects()
    session = _session(tmp_path, *objs, periodic_every=5, progress_every=4, total_steps=12)
    assert session.restore() == 0
    _loop(session, objs, 0, 12)
    assert session.finish(note="x") == 0
    want = state_sha256(objs[0], objs[1])
    evs = read_events(tmp_path / "events.jsonl")
    kinds = [e.kind for e in evs]
    assert kinds[0] == "start" and kinds[-1] == "exit"
    assert {k: evs[-1].data[k] for k in ("reason", "step", "note", "saved_step")} == \
        {"reason": "completed", "step": 12, "note": "x", "saved_step": 12}
    progress = [e.data for e in evs if e.kind == "progress"]
    assert [p["step"] for p in progress] == [4, 8, 12]
    assert all(p["loss"] is not None and p["mean_step_seconds"] > 0 for p in progress)
    saved = [(e.data["step"], e.data["kind"]) for e in evs if e.kind == "save_committed"]
    assert (5, "periodic") in saved and (10, "periodic") in saved and saved[-1] == (12, "periodic")
    assert [c.step for c in session.checkpoints()][-1] == 12

    objs2 = _objects(seed=7)
    s2 = _session(tmp_path, *objs2)
    assert s2.restore() == 12
    assert state_sha256(objs2[0], objs2[1]) == want
    restore = [e for e in read_events(tmp_path / "events.jsonl") if e.kind == "restore"]
    assert restore[-1].data["step"] == 12 and restore[-1].data["fell_back"] is False
    s2.finish()


def test_explicit_control_should_save(tmp_path: Path) -> None:
    objs = _objects()
    session = _session(tmp_path, *objs, periodic_every=3, auto_save=False, save_on_finish=False)
    session.restore()
    asked = []
    for step in range(7):
        with session.step():
            _step(*objs, step)
        kind = session.should_save()
        if kind is not None:
            asked.append((session.step_count, kind))
            session.save(kind, block=True)
            assert session.should_save() is None
    assert (3, SaveKind.PERIODIC) in asked and (6, SaveKind.PERIODIC) in asked
    session.finish()
    assert {c.step for c in session.checkpoints()} >= {3, 6}


def test_stats_file_updates_tau_and_emits_interval(tmp_path: Path) -> None:
    stats = tmp_path / "stats.json"
    stats.write_text(json.dumps({"mttp_seconds": 100.0, "restart_seconds": 5.0}))
    objs = _objects()
    session = _session(tmp_path, *objs, stats_file=stats, insurance="always")
    assert session.policy.mttp_seconds == 100.0
    session.restore()
    _loop(session, objs, 0, 12)  # the bootstrap insurance save measures delta -> tau
    session.saver.wait()
    _loop(session, objs, 12, 13)
    tau_before = session.policy.tau_seconds
    assert tau_before is not None
    stats.write_text(json.dumps({"mttp_seconds": 400.0, "restart_seconds": 5.0}))
    os.utime(stats, (time.time() + 5, time.time() + 5))
    session._stats_checked = 0.0  # do not wait for the 1 s poll interval
    _loop(session, objs, 13, 14)
    assert session.policy.mttp_seconds == 400.0
    assert session.policy.tau_seconds > tau_before
    session.finish()
    intervals = [e.data for e in read_events(tmp_path / "events.jsonl") if e.kind == "interval"]
    assert intervals[-1]["mttp_seconds"] == 400.0 and intervals[-1]["restart_seconds"] == 5.0
    assert intervals[-1]["tau_steps"] >= 1


def test_bad_stats_file_names_the_fix(tmp_path: Path) -> None:
    stats = tmp_path / "s.json"
    stats.write_text('{"mttp_seconds": -3}')
    with pytest.raises(ValueError, match="mttp_seconds=-3 must be a number of seconds"):
        read_stats_file(stats)
    stats.write_text("{not json")
    with pytest.raises(ValueError, match="SPOTFLEET_STATS_FILE"):
        read_stats_file(stats)


def test_notice_triggers_emergency_save_and_stop(tmp_path: Path) -> None:
    objs = _objects()
    guard = PreemptionGuard([SignalSource("SIGUSR1")], grace_seconds=30.0)
    session = _session(tmp_path, *objs, guard=guard, save_on_finish=False)
    session.restore()
    stopped_at = None
    for step in range(100):
        with session.step():
            _step(*objs, step)
            if step == 6:
                os.kill(os.getpid(), signal.SIGUSR1)
        if session.should_stop():
            stopped_at = session.step_count
            break
    assert stopped_at == 7
    want = state_sha256(objs[0], objs[1])
    assert session.finish() == EXIT_PREEMPTED
    evs = read_events(tmp_path / "events.jsonl")
    notice = [e.data for e in evs if e.kind == "notice"]
    assert notice and notice[0]["source"] == "signal" and notice[0]["deadline_unix"] > time.time()
    assert ("emergency", 7) in [(e.data["kind"], e.data["step"]) for e in evs if e.kind == "save_committed"]
    assert evs[-1].data["reason"] == "preempted"
    objs2 = _objects(seed=1)
    s2 = _session(tmp_path, *objs2)
    assert s2.restore() == 7
    assert state_sha256(objs2[0], objs2[1]) == want
    s2.finish()


def test_from_env_requires_a_location(monkeypatch) -> None:
    monkeypatch.delenv("SPOTFLEET_CHECKPOINT_URI", raising=False)
    with pytest.raises(ValueError, match="SPOTFLEET_CHECKPOINT_URI is not set"):
        TrainingSession.from_env(model=torch.nn.Linear(1, 1))


def test_one_call_helpers_save_and_load(tmp_path: Path) -> None:
    from checkpointing import load_training_state, save_training_state
    from checkpointing.torch_state import CheckpointMismatch

    assert load_training_state(str(tmp_path), model=torch.nn.Linear(8, 16)) is None
    model, opt, sched = _objects()
    _step(model, opt, sched, 0)
    info = save_training_state(str(tmp_path), step=1, model=model, optimizer=opt, scheduler=sched,
                               extras={"stage": "pretrain"})
    assert info.step == 1 and info.kind == "periodic"
    model2, _opt2, _sched2 = _objects(seed=3)
    state = load_training_state(str(tmp_path), model=model2, rng=False)  # weights only
    assert state is not None and state.step == 1 and state.extras == {"stage": "pretrain"}
    assert state_sha256(model2) == state_sha256(model)
    with pytest.raises(CheckpointMismatch, match="different model"):
        load_training_state(str(tmp_path), model=torch.nn.Linear(3, 3))


def test_notice_when_emergency_cannot_fit_says_so_and_stops(tmp_path: Path) -> None:
    from checkpointing.policy import AdaptivePolicy

    objs = _objects()
    guard = PreemptionGuard([SignalSource("SIGUSR2")], grace_seconds=2.0)
    # measured priors: a save needs ~200 s, far more than the 2 s window
    policy = AdaptivePolicy(grace_seconds=2.0, ckpt_seconds=100.0, persist_seconds=100.0,
                            insurance="off")
    session = _session(tmp_path, *objs, guard=guard, policy=policy, save_on_finish=False)
    session.restore()
    for step in range(50):
        with session.step():
            _step(*objs, step)
            if step == 3:
                os.kill(os.getpid(), signal.SIGUSR2)
        if session.should_stop():
            break
    assert session.step_count == 4
    assert session.finish() == EXIT_PREEMPTED
    evs = read_events(tmp_path / "events.jsonl")
    failed = [e.data for e in evs if e.kind == "save_failed"]
    assert failed and failed[0]["kind"] == "emergency" and "no emergency save" in failed[0]["reason"]
    assert not [e for e in evs if e.kind == "save_committed"]


def test_from_env_takes_the_plans_checkpoint_time_as_delta_prior(tmp_path: Path, monkeypatch) -> None:
    from checkpointing.intervals import thesis_optimum_seconds

    monkeypatch.setenv("SPOTFLEET_CHECKPOINT_URI", str(tmp_path / "ckpt"))
    monkeypatch.setenv("SPOTFLEET_EVENTS_FILE", str(tmp_path / "events.jsonl"))
    monkeypatch.setenv("SPOTFLEET_MTTP_SECONDS", "600")
    monkeypatch.setenv("SPOTFLEET_RESTART_SECONDS", "40")
    monkeypatch.setenv("SPOTFLEET_CHECKPOINT_SECONDS", "0.5")
    monkeypatch.delenv("SPOTFLEET_STATS_FILE", raising=False)
    monkeypatch.delenv("SPOTFLEET_CHECKPOINT_PRIOR_WEIGHT", raising=False)
    objs = _objects()
    session = TrainingSession.from_env(model=objs[0], optimizer=objs[1], scheduler=objs[2],
                                       guard=None, insurance="always")
    plan_tau = thesis_optimum_seconds(0.5, 600.0, 40.0)  # 25.3 s
    assert session.policy.ckpt_prior_seconds == 0.5
    assert session.policy.tau_seconds == pytest.approx(plan_tau)
    session.restore()
    _loop(session, objs, 0, 15)  # 15 short steps: far less than tau, and no bootstrap save
    session.saver.wait()
    assert session.checkpoints() == []
    session.finish()
    first = next(e.data for e in read_events(tmp_path / "events.jsonl") if e.kind == "interval")
    assert first["tau_seconds"] == pytest.approx(plan_tau)
    assert first["delta_seconds"] == 0.5 and first["delta_prior_seconds"] == 0.5
    assert first["measured_saves"] == 0 and first["restart_seconds"] == 40.0


def test_restart_cost_defaults_to_the_contracts_prior_not_zero(tmp_path: Path, monkeypatch) -> None:
    from checkpointing.runtime_env import DEFAULT_RESTART_SECONDS

    monkeypatch.setenv("SPOTFLEET_CHECKPOINT_URI", str(tmp_path / "ckpt"))
    for var in ("SPOTFLEET_RESTART_SECONDS", "SPOTFLEET_STATS_FILE", "SPOTFLEET_CHECKPOINT_SECONDS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("SPOTFLEET_MTTP_SECONDS", "3600")
    monkeypatch.setenv("SPOTFLEET_CHECKPOINT_PRIOR_WEIGHT", "3")
    objs = _objects()
    session = TrainingSession.from_env(model=objs[0], guard=None, events=EventLog(tmp_path / "e.jsonl"),
                                       ckpt_seconds=2.0)
    assert DEFAULT_RESTART_SECONDS == 360.0
    assert session.restart_seconds == session.policy.restart_seconds == DEFAULT_RESTART_SECONDS
    assert session.policy.tau_seconds == pytest.approx(math.sqrt(2 * 2.0 * (3600 + 360)))
    assert session.policy.ckpt_prior_weight == 3.0  # SPOTFLEET_CHECKPOINT_PRIOR_WEIGHT
    session.finish()


def test_relaunch_on_a_node_whose_clock_lags_keeps_its_own_checkpoints(tmp_path: Path, monkeypatch) -> None:
    import types

    import checkpointing.manifest as manifest

    objs = _objects()
    first = _session(tmp_path, *objs, periodic_every=10, keep_periodic=3, job_id="j")
    first.restore()
    _loop(first, objs, 0, 30)
    assert first.finish() == 0
    # the relaunch runs on a node whose wall clock is 10 minutes behind
    lagging = types.SimpleNamespace(time=lambda: time.time() - 600, sleep=time.sleep)
    monkeypatch.setattr(manifest, "time", lagging)
    objs = _objects(seed=1)
    second = _session(tmp_path, *objs, periodic_every=10, keep_periodic=3, job_id="j", total_steps=60)
    assert second.restore() == 30
    _loop(second, objs, 30, 60)
    assert second.finish() == 0
    assert [(c.step, c.kind) for c in second.checkpoints()] == [(40, "periodic"), (50, "periodic"),
                                                                (60, "periodic")]
    exit_event = read_events(tmp_path / "events.jsonl")[-1].data
    assert exit_event["reason"] == "completed" and exit_event["saved_step"] == 60
    assert Path(exit_event["saved_location"], "MANIFEST.json").exists()
    third = _session(tmp_path, *_objects(seed=2), job_id="j")
    assert third.restore() == 60
    third.finish()
