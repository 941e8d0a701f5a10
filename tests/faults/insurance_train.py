"""The example's model and data, trained through ``TrainingSession`` with INSURANCE saves
only (``insurance="always"``, no periodic save) -- what a node gets when the emergency
save is judged infeasible -- for test_fault_notice_mid_insurance.py.

    python insurance_train.py CHECKPOINT_URI STEPS

Exit codes as the example: 0 completed (prints ``state_sha256=<hex>``), 75 after a notice.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from checkpointing import early_notice

early_notice.install()

# isort: split
import torch  # noqa: E402
from torch import nn  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import train_example as ex  # noqa: E402

from checkpointing.session import TrainingSession  # noqa: E402
from checkpointing.torch_state import state_sha256  # noqa: E402

SEED = 5
#: MTTP and R (seconds) small enough that tau is a few steps: insurance saves follow each other
MTTP_SECONDS, RESTART_SECONDS = 3.0, 0.5


def main() -> int:
    uri, steps = sys.argv[1], int(sys.argv[2])
    args = ex.parse_args(["--steps", str(steps), "--seed", str(SEED), "--model", "mlp", "--size", "medium",
                          "--checkpoint-uri", uri])
    torch.set_num_threads(1)
    model, opt, sched = ex.build(args)
    loss_fn = nn.MSELoss()
    session = TrainingSession.from_env(
        store=uri, model=model, optimizer=opt, scheduler=sched, periodic_every=None, total_steps=steps,
        insurance="always", mttp_seconds=MTTP_SECONDS, restart_seconds=RESTART_SECONDS, progress_every=10,
        job_config={"seed": SEED, "steps": steps})
    with session:
        for step in range(session.restore(), steps):
            with session.step() as st:
                x, y = ex.batch_for_step("mlp", SEED, step, 32)
                opt.zero_grad(set_to_none=True)
                loss = loss_fn(model(x), y)
                loss.backward()
                opt.step()
                sched.step()
                time.sleep(0.03)
                st.loss = float(loss.detach())
            if session.should_stop():
                break
        if session.should_stop():
            return session.finish()
        digest = state_sha256(model, opt)
        code = session.finish(state_sha256=digest)
        print(f"state_sha256={digest}", flush=True)
        return code


if __name__ == "__main__":
    sys.exit(main())
