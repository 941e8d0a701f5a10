"""Training script for tests: saves at every multiple of --save-every, exits 3 at --crash-at.

Deterministic: the saves are explicit (``auto_save=False``: no insurance or periodic save of
the policy's choosing), so a node that resumes from the last save before --crash-at crashes
again without committing anything.
"""

import argparse
import sys

import torch

from checkpointing import TrainingSession

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=60)
ap.add_argument("--save-every", type=int, default=10)
ap.add_argument("--crash-at", type=int, default=25)
a = ap.parse_args()
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
session = TrainingSession.from_env(model=model, optimizer=opt, total_steps=a.steps, auto_save=False)
start = session.restore()
for step in range(start, a.steps):
    if step == a.crash_at:
        print(f"crash_after_restore: deliberate crash at step {step}", file=sys.stderr, flush=True)
        sys.exit(3)
    x = torch.randn(8, 4, generator=torch.Generator().manual_seed(step))
    with session.step() as st:
        loss = (model(x) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        st.loss = float(loss.detach())
    if (step + 1) % a.save_every == 0:
        session.save(block=True)
sys.exit(session.finish())
