"""One rank of a re-formed group, for ``test_elastic_resume_source.py`` (not a test).

    RANK=r WORLD_SIZE=w MASTER_ADDR=127.0.0.1 MASTER_PORT=p TORCHELASTIC_RUN_ID=run \\
        python resume_worker.py HANDOFF_STEP CKPT_DIR HANDOFF_ROOT NODE_ID

Before joining, this "node" holds a hand-off of the example model trained
``HANDOFF_STEP`` plain steps (-1: no hand-off), as a survivor that missed some rounds
would. Then it runs ``ElasticSession.start()`` in the group (gloo, env://) and prints one
JSON line: the step it resumes at, where the state came from, and its sha256.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]


def plain_objects(steps: int, seed: int = 0):  # noqa: ANN201
    """The example MLP, AdamW and schedule after ``steps`` plain steps (one thread: the
    same bits in every process)."""
    sys.path.insert(0, str(ROOT / "examples"))
    from train_example import batch_for_step, build

    torch.set_num_threads(1)
    model, opt, sched = build(argparse.Namespace(seed=seed, model="mlp", size="tiny", lr=3e-3,
                                                 steps=20))
    for step in range(steps):
        x, y = batch_for_step("mlp", 1, step, 8)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        sched.step()
    return model, opt, sched


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(ROOT))
    from checkpointing.elastic import ElasticSession
    from checkpointing.elastic_state import HandoffFile
    from checkpointing.torch_state import TrainingState, state_sha256

    handoff_step, ckpt, root, node = int(argv[0]), argv[1], argv[2], argv[3]
    run_id = os.environ["TORCHELASTIC_RUN_ID"]
    if handoff_step >= 0:
        m, o, s = plain_objects(handoff_step)
        HandoffFile(run_id, node, root).write(
            TrainingState(model=m, optimizer=o, scheduler=s, rng=False, step=handoff_step).capture(),
            handoff_step)
    model, opt, sched = plain_objects(0, seed=7)  # a fresh worker: other initial weights
    el = ElasticSession(model=model, optimizer=opt, scheduler=sched, store=ckpt, total_steps=20,
                        handoff_root=root, node_id=node, timeout_seconds=120)
    start = el.start()
    print(json.dumps({"rank": el.rank, "start": start, "state_from": el.state_from,
                      "sha": state_sha256(model, opt)}), flush=True)
    import torch.distributed as dist

    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
