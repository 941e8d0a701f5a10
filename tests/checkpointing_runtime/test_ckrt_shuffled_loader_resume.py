"""The data-order recipe of docs/checkpointing.md ("The data order is yours to make resumable").

User audit 2026-11-28: the README said `restore()` brings back the "RNG and data position", and
a researcher's loop over a plain `DataLoader(shuffle=True)` resumed without an error but on
other batches (the final weights differed from an uninterrupted run). The docs now show a loop
whose batches are a function of (seed, step); this test keeps that snippet true: a shuffled,
gradient-accumulating loop stopped mid-epoch and resumed in fresh objects from the store ends
bit-identical (model, optimizer, scheduler), while the plain loader does not.
"""

from __future__ import annotations

import itertools

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from checkpointing import TrainingSession

SEED, MICRO, ACCUM, TOTAL = 3, 8, 4, 30
N = 256  # 32 micro-batches = 8 optimizer steps per epoch: TOTAL spans 3+ epochs


def _objects():
    torch.manual_seed(SEED)
    x = torch.randn(N, 8)
    ds = TensorDataset(x, x[:, :2].sum(1, keepdim=True))
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-2, total_steps=TOTAL)
    return ds, model, opt, sched


def _train(store, stop_at: int | None, recipe: bool):
    """Train from whatever the store holds up to TOTAL, or save and stop at ``stop_at``."""
    ds, model, opt, sched = _objects()
    steps_per_epoch = (N // MICRO) // ACCUM
    session = TrainingSession(store=store, model=model, optimizer=opt, scheduler=sched, guard=None,
                              lease=False, total_steps=TOTAL)
    start = session.restore()

    def batches_from(step):  # the docs' recipe
        epoch, within = divmod(step, steps_per_epoch)
        while True:
            g = torch.Generator().manual_seed(SEED * 100003 + epoch)
            loader = DataLoader(ds, batch_size=MICRO, shuffle=True, drop_last=True, generator=g)
            yield from itertools.islice(loader, within * ACCUM, None)
            epoch, within = epoch + 1, 0

    def plain(_step):  # what the README's wording invited
        loader = DataLoader(ds, batch_size=MICRO, shuffle=True, drop_last=True)
        while True:
            yield from loader

    it = (batches_from if recipe else plain)(start)
    for step in range(start, TOTAL):
        with session.step():
            for _ in range(ACCUM):
                xb, yb = next(it)
                (nn.functional.mse_loss(model(xb), yb) / ACCUM).backward()
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
        if stop_at is not None and step + 1 == stop_at:
            assert session.finish() == 0  # saves the state at this step, like a stop after a notice
            return None
    session.finish()
    return model.state_dict(), opt.state_dict(), sched.state_dict()


def _identical(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_identical(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_identical(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def test_the_documented_loop_resumes_mid_epoch_bit_identical_and_a_plain_loader_does_not(tmp_path):
    for recipe in (True, False):
        ref = _train(str(tmp_path / f"ref-{recipe}"), None, recipe)
        stopped = str(tmp_path / f"stopped-{recipe}")
        assert _train(stopped, 11, recipe) is None  # step 11: inside the second epoch (8 steps each)
        resumed = _train(stopped, None, recipe)
        assert _identical(resumed, ref) is recipe, f"recipe={recipe}"
