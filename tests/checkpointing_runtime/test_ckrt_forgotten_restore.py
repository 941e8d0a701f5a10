"""A loop that forgets ``session.restore()`` (user audit, session 20).

Before: a second run over the same prefix that skipped ``restore()`` trained from step 0
without a word, exited 0, and its final checkpoint (step 12) lay under the first run's
newest (step 20), which a restart or the next stage then loaded. Now its first step fails
with ``RestoreNotCalled`` naming the newest checkpoint and the fix; a fresh prefix still
trains without ``restore()``; a loop that ignores what ``restore()`` returned is warned.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

from checkpointing import RestoreNotCalled
from checkpointing.events import EventLog
from checkpointing.manifest import list_checkpoints
from checkpointing.session import TrainingSession


def _objects():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    return model, opt


def _train(session: TrainingSession, model, opt, start: int, stop: int) -> None:
    for step in range(start, stop):
        with session.step():
            g = torch.Generator().manual_seed(step)
            loss = model(torch.randn(2, 4, generator=g)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()


def _session(tmp: Path, model, opt, total: int) -> TrainingSession:
    return TrainingSession(store=str(tmp / "ckpt"), model=model, optimizer=opt, periodic_every=5,
                           total_steps=total, events=EventLog(tmp / "events.jsonl"))


def test_a_loop_without_restore_over_saved_checkpoints_fails_with_the_fix(tmp_path: Path) -> None:
    model, opt = _objects()
    first = _session(tmp_path, model, opt, 20)
    assert first.restore() == 0
    _train(first, model, opt, 0, 20)
    assert first.finish() == 0
    before = sorted(c.name for c in list_checkpoints(first.store))

    model, opt = _objects()
    second = _session(tmp_path, model, opt, 12)
    with pytest.raises(RestoreNotCalled) as err:  # forgot: start = second.restore()
        _train(second, model, opt, 0, 12)
    text = str(err.value)
    assert "without session.restore()" in text and "newest at step 20" in text
    assert "start = session.restore()" in text and "fresh location" in text
    assert sorted(c.name for c in list_checkpoints(second.store)) == before  # nothing written


def test_a_fresh_prefix_needs_no_restore_and_ignoring_its_step_is_warned(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    model, opt = _objects()
    session = _session(tmp_path, model, opt, 10)
    _train(session, model, opt, 0, 10)  # nothing saved before: no restore() needed
    assert session.finish() == 0

    model, opt = _objects()
    again = _session(tmp_path, model, opt, 10)
    assert again.restore() == 10
    with caplog.at_level(logging.WARNING, logger="checkpointing"):
        _train(again, model, opt, 0, 3)  # ignores the returned step
    assert any("past total_steps=10" in r.getMessage() and "start = session.restore()" in r.getMessage()
               for r in caplog.records)
    again.finish()
