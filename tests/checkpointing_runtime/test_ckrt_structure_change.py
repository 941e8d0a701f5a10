"""A model / optimizer / scheduler that changed between runs on one prefix: the refusal
names the changed fields (user audit, session 20).

Before, a widened layer was refused with "differs in: model structure" (same job id) or
with no difference at all (job ids derived from the configuration: "belongs to another
job"), so the user had to guess what changed. Now the checkpoint's state header (names,
shapes, dtypes, hyperparameters; no tensor data) is compared with this process's objects.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from checkpointing.events import EventLog
from checkpointing.identity import JobConflict
from checkpointing.manifest import list_checkpoints
from checkpointing.session import TrainingSession


def _run(tmp: Path, width: int = 8, weight_decay: float = 0.01, step_lr: bool = True,
         job_id: str | None = None, steps: int = 6) -> TrainingSession:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, width), torch.nn.ReLU(), torch.nn.Linear(width, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=weight_decay)
    sched = (torch.optim.lr_scheduler.StepLR(opt, 2) if step_lr
             else torch.optim.lr_scheduler.ExponentialLR(opt, 0.9))
    session = TrainingSession(store=str(tmp / "ckpt"), model=model, optimizer=opt, scheduler=sched,
                              periodic_every=3, total_steps=steps, job_id=job_id,
                              events=EventLog(tmp / "events.jsonl"))
    start = session.restore()
    for step in range(start, steps):
        with session.step():
            loss = model(torch.randn(2, 4, generator=torch.Generator().manual_seed(step))).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
    assert session.finish() == 0
    return session


def test_a_widened_model_is_refused_naming_the_changed_tensors(tmp_path: Path) -> None:
    first = _run(tmp_path)
    before = sorted(c.name for c in list_checkpoints(first.store))
    with pytest.raises(JobConflict) as err:  # no job id: both derived from the configuration
        _run(tmp_path, width=16)
    text = str(err.value)
    assert "0.weight: [8, 4] in the checkpoint, [16, 4] now" in text, text
    assert "0.bias: [8] in the checkpoint, [16] now" in text
    assert "2.weight: [1, 8] in the checkpoint, [1, 16] now" in text
    assert "SPOTFLEET_CHECKPOINT_URI" in text  # the fix
    with pytest.raises(JobConflict) as err:  # the fleet's way: one job id per stage
        _run(tmp_path, width=16, job_id=first.identity.job_id)
    assert "another configuration" in str(err.value)
    assert "0.weight: [8, 4] in the checkpoint, [16, 4] now" in str(err.value)
    assert sorted(c.name for c in list_checkpoints(first.store)) == before  # untouched


def test_a_changed_hyperparameter_or_scheduler_is_named(tmp_path: Path) -> None:
    first = _run(tmp_path, job_id="job-a")
    with pytest.raises(JobConflict, match=r"group 0: weight_decay 0\.01 in the checkpoint, 0\.1 now"):
        _run(tmp_path, weight_decay=0.1, job_id=first.identity.job_id)
    with pytest.raises(JobConflict, match="scheduler: StepLR in the checkpoint, ExponentialLR now"):
        _run(tmp_path, step_lr=False, job_id="job-a")
    assert _run(tmp_path, job_id="job-a", steps=9).step_count == 9  # the same configuration resumes
