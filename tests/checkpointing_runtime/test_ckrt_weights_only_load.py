"""docs/checkpointing.md's "One call, no session" snippet, as written: a finetune stage loads
the pretrain weights with ``load_training_state(uri, model=model)`` ("weights only").

Before (user audit, session 20) that call also restored the pretrain's global RNG states,
so the finetune's own ``torch.manual_seed`` was silently replaced (two finetune seeds drew
the same dropout masks / shuffles). Now a weights-only load leaves the RNGs alone; a load
that resumes (optimizer passed) still restores them.
"""

from __future__ import annotations

from pathlib import Path

import torch

from checkpointing import load_training_state, save_training_state


def _pretrain(uri: str) -> torch.nn.Module:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, 1)
    torch.manual_seed(123)  # the pretrain's RNG at its save
    save_training_state(uri, step=5, model=model, optimizer=opt, scheduler=sched)
    return model


def test_a_weights_only_load_keeps_the_new_stage_s_seed(tmp_path: Path) -> None:
    uri = str(tmp_path / "pretrain")
    pre = _pretrain(uri)
    torch.manual_seed(2)
    expected = torch.rand(3)
    torch.manual_seed(2)  # the finetune's own seed
    model = torch.nn.Linear(4, 2)
    torch.manual_seed(2)
    state = load_training_state(uri, model=model)  # weights only; None if nothing saved
    assert state is not None and state.step == 5
    assert torch.equal(model.weight, pre.weight)
    assert torch.equal(torch.rand(3), expected)  # the seed of this stage, not the pretrain's


def test_a_resuming_load_still_restores_the_rngs(tmp_path: Path) -> None:
    uri = str(tmp_path / "pretrain")
    _pretrain(uri)
    torch.manual_seed(123)
    at_save = torch.rand(3)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.manual_seed(7)
    load_training_state(uri, model=model, optimizer=opt)
    assert torch.equal(torch.rand(3), at_save)
