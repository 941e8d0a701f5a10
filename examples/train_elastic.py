"""Elastic multi-node version of the example workload (``examples/train_example.py``).

The same model, data and optimizer, trained data-parallel by every node of a stage
(one worker per node under ``checkpointing.elastic_run`` / torchrun). The global batch
of step ``s`` is the example's ``batch_for_step(seed, s)`` at every world size; each
rank trains on its contiguous share, and ``ElasticSession.sync_gradients`` makes the
update the gradient of the mean loss over the whole global batch. Dropout is switched
off: its masks would depend on how the batch is split, so runs at different world sizes
would not be the same computation.

Without torch elastic's environment it runs as one process (world size 1): that is the
reference run the elastic runs are compared with.

    python -m checkpointing.elastic_run --nnodes 1:4 --rdzv-endpoint 127.0.0.1:29400 \\
        --rdzv-id demo -- examples/train_elastic.py --steps 300 --checkpoint-uri /tmp/ckpt

Exit codes: 0 done, 75 this node left after a preemption notice, 76 the worker handed
its state off for a membership change (its agent restarts it). On completion every rank
prints ``state_sha256=<hex>`` (identical on all ranks: the replicas are bit-identical).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from train_example import SIZES, batch_for_step, build  # noqa: E402

from checkpointing.elastic import ElasticSession  # noqa: E402
from checkpointing.runtime_env import ENV_CHECKPOINT_URI  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--steps", type=int, default=300, help="total training steps")
    p.add_argument("--seed", type=int, default=0, help="seed for weights and data")
    p.add_argument("--model", choices=sorted(SIZES), default="mlp")
    p.add_argument("--size", choices=["tiny", "small", "medium", "large"], default="small")
    p.add_argument("--batch-size", type=int, default=32, help="GLOBAL batch (all ranks together)")
    p.add_argument("--lr", type=float, default=3e-3, help="peak learning rate")
    p.add_argument("--step-sleep", type=float, default=0.0, metavar="SECONDS",
                   help="extra seconds per step (emulates a slower GPU step)")
    p.add_argument("--periodic-every", type=int, default=50, metavar="STEPS",
                   help="rank 0 checkpoints every N steps (0: none)")
    p.add_argument("--keep-periodic", type=int, default=3)
    p.add_argument("--progress-every", type=int, default=10, metavar="STEPS")
    p.add_argument("--checkpoint-uri", default=os.environ.get(ENV_CHECKPOINT_URI))
    p.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = p.parse_args(argv)
    if not args.checkpoint_uri:
        p.error(f"no checkpoint location: pass --checkpoint-uri DIR or set {ENV_CHECKPOINT_URI}")
    for name in ("steps", "batch_size", "threads", "progress_every", "keep_periodic"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    torch.set_num_threads(args.threads)
    model, opt, sched = build(args)
    for m in model.modules():  # same computation at every world size (see docstring)
        if isinstance(m, nn.Dropout):
            m.p = 0.0
    dtype = getattr(torch, args.dtype)
    model.to(dtype)  # in place: the optimizer keeps the same parameters
    loss_fn = nn.MSELoss() if args.model == "mlp" else nn.CrossEntropyLoss()
    el = ElasticSession.from_env(model=model, optimizer=opt, scheduler=sched, total_steps=args.steps,
                                 periodic_every=args.periodic_every or None,
                                 keep_periodic=args.keep_periodic, progress_every=args.progress_every,
                                 store=args.checkpoint_uri)
    start = el.start()
    print(f"rank {el.rank}/{el.world_size}: {'resuming at' if start else 'starting at'} step "
          f"{start}/{args.steps} (state from {el.state_from})", flush=True)
    model.train()
    t_last = time.perf_counter()
    for step in range(start, args.steps):
        x, y = batch_for_step(args.model, args.seed, step, args.batch_size)
        if x.is_floating_point():
            x, y = x.to(dtype), y.to(dtype)
        part = el.shard(len(x))
        opt.zero_grad(set_to_none=True)
        out = model(x[part])
        yp = y[part]
        loss = loss_fn(out, yp) if args.model == "mlp" else \
            loss_fn(out.reshape(-1, out.shape[-1]), yp.reshape(-1))
        loss.backward()
        if not el.sync_gradients(len(yp), len(y)):
            break
        opt.step()
        sched.step()
        if args.step_sleep:
            time.sleep(args.step_sleep)
        loss_value = float(loss.detach())
        el.end_step(loss=loss_value)
        if el.rank == 0 and (step + 1) % args.progress_every == 0:
            now = time.perf_counter()
            print(f"step {step + 1}/{args.steps} world {el.world_size} loss {loss_value:.5f} "
                  f"({(now - t_last) / args.progress_every:.4f} s/step)", flush=True)
            t_last = now
        if el.should_stop():
            break
    code = el.finish()
    if code == 0:
        print(f"done: {args.steps} steps; rank {el.rank}; state_sha256="
              f"{el.final_sha256}", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
