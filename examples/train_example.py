"""Example preemption-tolerant training job (the workload the fleet and pipelines run).

A small MLP or transformer trained on deterministic synthetic data with AdamW and a
cosine LR schedule, on CPU (or one CUDA GPU with ``--device cuda``). The batch for step ``s`` is a pure function of
``(seed, s)``, and the session restores model, optimizer, scheduler and every RNG, so a
run that is killed and resumed any number of times ends bit-identical to an
uninterrupted one.

    python examples/train_example.py --steps 300 --checkpoint-uri /tmp/ckpt

Exit codes: 0 when all steps are done, 75 (EXIT_PREEMPTED) after a preemption notice
(SIGTERM by default; see SPOTFLEET_NOTICE_SOURCES). On completion the sha256 of the
final model + optimizer state is printed (``state_sha256=<hex>``) and written into the
``exit`` event. Flags are documented in docs/checkpointing.md; keep them stable.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
import time

# first: a SIGTERM while torch loads is then a notice, not a kill (exit 75, not -15); the
# explicit install() also covers a process forked from one that imported checkpointing
from checkpointing import early_notice

early_notice.install()

# isort: split
import torch  # noqa: E402
from torch import nn  # noqa: E402

from checkpointing.runtime_env import ENV_CHECKPOINT_URI  # noqa: E402
from checkpointing.session import TrainingSession  # noqa: E402
from checkpointing.torch_state import state_sha256  # noqa: E402

SIZES = {  # (width, depth) per model family
    "mlp": {"tiny": (32, 2), "small": (128, 3), "medium": (512, 4), "large": (1024, 6)},
    "transformer": {"tiny": (32, 1), "small": (64, 2), "medium": (128, 4), "large": (256, 6)},
}
IN_DIM, OUT_DIM = 32, 8
VOCAB, SEQ = 64, 32


class MLP(nn.Module):
    def __init__(self, width: int, depth: int):
        super().__init__()
        layers: list[nn.Module] = [nn.Linear(IN_DIM, width), nn.GELU(), nn.Dropout(0.1)]
        for _ in range(depth - 1):
            layers += [nn.Linear(width, width), nn.GELU(), nn.Dropout(0.1)]
        layers.append(nn.Linear(width, OUT_DIM))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class TinyTransformer(nn.Module):
    def __init__(self, width: int, depth: int):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, width)
        self.pos = nn.Parameter(torch.zeros(SEQ, width))
        layer = nn.TransformerEncoderLayer(width, nhead=4, dim_feedforward=4 * width, dropout=0.1,
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.head = nn.Linear(width, VOCAB)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(SEQ), persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens) + self.pos
        return self.head(self.encoder(h, mask=self.mask, is_causal=True))


def say(message: str) -> None:
    """Print one progress line. A full or broken log disk must not stop training: on the
    first failed write, stdout is switched to /dev/null and training goes on."""
    try:
        print(message, flush=True)
    except OSError:
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (lives until exit)


def batch_for_step(kind: str, seed: int, step: int, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch of ``step``: a pure function of (seed, step) (so resume is exact)."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    if kind == "mlp":
        teacher = torch.Generator().manual_seed(seed)
        w = torch.randn(IN_DIM, OUT_DIM, generator=teacher)
        x = torch.randn(batch_size, IN_DIM, generator=g)
        return x, torch.tanh(x @ w) + 0.05 * torch.randn(batch_size, OUT_DIM, generator=g)
    # next-token prediction on sequences that count up from a random start (mod VOCAB)
    start = torch.randint(0, VOCAB, (batch_size, 1), generator=g)
    seq = (start + torch.arange(SEQ + 1)) % VOCAB
    return seq[:, :-1], seq[:, 1:]


def build(args: argparse.Namespace) -> tuple[nn.Module, torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    torch.manual_seed(args.seed)
    width, depth = SIZES[args.model][args.size]
    model = MLP(width, depth) if args.model == "mlp" else TinyTransformer(width, depth)
    # weights drawn on the CPU: the same initial state on any device (callers that build
    # their own args, e.g. train_elastic.py, train on the CPU)
    model.to(getattr(args, "device", "cpu"))
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    warmup = max(1, args.steps // 20)

    def lr_lambda(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * min(1.0, (step - warmup) / max(1, args.steps - warmup))))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda)
    return model, opt, sched


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--steps", type=int, default=300, help="total training steps")
    p.add_argument("--seed", type=int, default=0, help="seed for weights and data")
    p.add_argument("--model", choices=sorted(SIZES), default="mlp")
    p.add_argument("--size", choices=["tiny", "small", "medium", "large"], default="small")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=3e-3, help="peak learning rate")
    p.add_argument("--step-sleep", type=float, default=0.0, metavar="SECONDS",
                   help="extra seconds per step (emulates a slower GPU step)")
    p.add_argument("--periodic-every", type=int, default=50, metavar="STEPS",
                   help="periodic checkpoint every N steps (0: none)")
    p.add_argument("--keep-periodic", type=int, default=3, help="periodic checkpoints to keep")
    p.add_argument("--progress-every", type=int, default=10, metavar="STEPS")
    p.add_argument("--checkpoint-uri", default=os.environ.get(ENV_CHECKPOINT_URI),
                   help=f"directory or s3://bucket/prefix (default ${ENV_CHECKPOINT_URI})")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (fixed for exact resume)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="where the model trains; cuda snapshots from GPU memory into pinned buffers")
    args = p.parse_args(argv)
    if not args.checkpoint_uri:
        p.error(f"no checkpoint location: pass --checkpoint-uri DIR or set {ENV_CHECKPOINT_URI}")
    for name in ("steps", "batch_size", "threads", "progress_every", "keep_periodic"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.step_sleep < 0 or args.periodic_every < 0:
        p.error("--step-sleep and --periodic-every must be >= 0")
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA GPU is visible to torch; train with --device cpu")
    return args


def make_deterministic(device: str) -> None:
    """Exact resume on a GPU needs deterministic kernels: cuBLAS gets a fixed workspace
    (set before CUDA starts) and torch refuses nondeterministic algorithms."""
    if device == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    torch.set_num_threads(args.threads)
    make_deterministic(args.device)
    model, opt, sched = build(args)
    loss_fn = nn.MSELoss() if args.model == "mlp" else nn.CrossEntropyLoss()
    session = TrainingSession.from_env(
        store=args.checkpoint_uri, model=model, optimizer=opt, scheduler=sched,
        periodic_every=args.periodic_every or None, total_steps=args.steps,
        keep_periodic=args.keep_periodic, progress_every=args.progress_every,
        # what must match for a resume to be correct (the job identity's fingerprint)
        job_config={"seed": args.seed, "steps": args.steps, "lr": args.lr,
                    "data": {"task": args.model, "batch_size": args.batch_size}},
    )
    with session:
        start = session.restore()
        say(f"{'resuming at' if start else 'starting at'} step {start}/{args.steps} "
            f"({args.model}/{args.size}, {sum(p.numel() for p in model.parameters())} parameters "
            f"on {args.device})")
        model.train()
        t_last = time.perf_counter()
        for step in range(start, args.steps):
            with session.step() as st:
                x, y = batch_for_step(args.model, args.seed, step, args.batch_size)
                x, y = x.to(args.device), y.to(args.device)
                opt.zero_grad(set_to_none=True)
                out = model(x)
                loss = loss_fn(out.reshape(-1, out.shape[-1]), y.reshape(-1)) if args.model != "mlp" \
                    else loss_fn(out, y)
                loss.backward()
                opt.step()
                sched.step()
                if args.step_sleep:
                    time.sleep(args.step_sleep)
                st.loss = float(loss.detach())
            if (step + 1) % args.progress_every == 0:
                now = time.perf_counter()
                say(f"step {step + 1}/{args.steps} loss {st.loss:.5f} "
                    f"({(now - t_last) / args.progress_every:.4f} s/step)")
                t_last = now
            if session.should_stop():
                say(f"preemption notice: stopping at step {session.step_count} "
                    f"(exit {75}); resume continues from the latest checkpoint")
                break
        if session.should_stop():
            return session.finish()
        digest = state_sha256(model, opt)
        code = session.finish(state_sha256=digest)
        say(f"done: {args.steps} steps; state_sha256={digest}")
        return code


if __name__ == "__main__":
    sys.exit(main())
