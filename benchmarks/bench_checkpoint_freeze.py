"""How long can checkpointing block the training loop while S3 is frozen?

A real training loop (``TrainingSession``, an MLP on CPU, periodic saves every few
steps) checkpoints to a REAL S3 server (Ceph radosgw on 127.0.0.1, started for the run)
through a loopback proxy. Mid-run the proxy is frozen for ``--freeze`` seconds: it stops
forwarding bytes, so uploads hang exactly as on a stalled endpoint. Every call into
checkpointing from the loop (``session.end_step``: policy, saves, back-pressure) is
timed. Printed:

* phase 1 (freeze, no notice): the worst block of the loop, as a ratio to the bound
  docs/checkpointing.md states: ``wait_limit_seconds`` (``SPOTFLEET_SAVE_WAIT_SECONDS``)
  plus the snapshot copy (delta, measured from the committed saves of the same run);
* phase 2 (freeze, then a notice with a ``--grace`` window): the time from the notice
  to ``should_stop()`` and to ``finish()`` returning, as ratios to the window; what the
  emergency save wrote where.

    python benchmarks/bench_checkpoint_freeze.py [--freeze 25] [--grace 10] [--size medium]
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "s3"))
sys.path.insert(0, str(ROOT / "tests" / "faults"))

import torch  # noqa: E402
from torch import nn  # noqa: E402

from checkpointing.guard import PreemptionGuard  # noqa: E402
from checkpointing.notices.signals import SignalSource  # noqa: E402
from checkpointing.saver import DEFAULT_WAIT_LIMIT_SECONDS  # noqa: E402
from checkpointing.session import TrainingSession  # noqa: E402
from checkpointing.stores.s3 import S3Store  # noqa: E402

WIDTH = {"small": 128, "medium": 512, "large": 1024}


def _model(width: int) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, width), nn.GELU(), nn.Linear(width, width), nn.GELU(),
                         nn.Linear(width, 8))


def _loop(session: TrainingSession, model: nn.Module, opt: torch.optim.Optimizer, steps: int,
          step_seconds: float, on_step=None) -> list[tuple[float, float, int]]:
    """Run ``steps`` steps; returns (unix time, seconds inside end_step, step) per step."""
    out = []
    g = torch.Generator().manual_seed(1)
    for i in range(steps):
        t0 = time.perf_counter()
        x = torch.randn(32, 64, generator=g)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        rest = step_seconds - (time.perf_counter() - t0)
        if rest > 0:
            time.sleep(rest)
        t1 = time.perf_counter()
        session.end_step(t1 - t0, loss=float(loss.detach()))
        out.append((time.time(), time.perf_counter() - t1, session.step_count))
        if on_step is not None:
            on_step(i)
        if session.should_stop():
            break
    return out


def run(endpoint: str, access: str, secret: str, args: argparse.Namespace) -> None:
    from fault_kit import FreezableProxy

    os.environ.update({"AWS_ACCESS_KEY_ID": access, "AWS_SECRET_ACCESS_KEY": secret,
                       "AWS_REGION": "us-east-1"})
    spill_dir = tempfile.mkdtemp(prefix="bench-freeze-spill-")
    os.environ["SPOTFLEET_SPILL_DIR"] = spill_dir
    os.environ.setdefault("SPOTFLEET_NODE_ID", "bench-freeze")  # behave as a fleet process
    proxy = FreezableProxy.for_url(endpoint)
    bucket = f"bench-freeze-{uuid.uuid4().hex[:10]}"
    S3Store(bucket, "", endpoint_url=endpoint).ensure_bucket()
    nbytes = 0
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}, "
          f"torch {torch.__version__}; radosgw {endpoint} behind a freezable proxy", flush=True)

    # ---- phase 1: freeze, no notice ------------------------------------------------------
    model = _model(WIDTH[args.size])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    nbytes = sum(p.numel() * 4 for p in model.parameters()) * 3
    store = S3Store(bucket, "phase1", endpoint_url=proxy.endpoint_url)
    session = TrainingSession(store=store, model=model, optimizer=opt, periodic_every=args.every,
                              guard=None, progress_every=10_000)
    wait_limit = session.saver.wait_limit_seconds
    freeze_at = args.warmup_steps
    timeline: dict[str, float] = {}

    def freezer(i: int) -> None:
        if i == freeze_at:
            proxy.freeze()
            timeline["frozen"] = time.time()
            threading.Timer(args.freeze, lambda: (proxy.thaw(), timeline.__setitem__("thawed", time.time()))).start()

    steps_total = freeze_at + int((args.freeze + 5) / args.step_seconds)
    rec = _loop(session, model, opt, steps_total, args.step_seconds, freezer)
    while "thawed" not in timeline:
        time.sleep(0.1)
    session.finish()
    results = [e for e in _committed(session)]
    delta = max((r for r in results), default=0.0)
    worst = max(rec, key=lambda r: r[1])
    in_freeze = [r for r in rec if timeline["frozen"] <= r[0] <= timeline["thawed"]]
    bound = wait_limit + delta
    print(f"\nphase 1: state {nbytes / 1e6:.1f} MB, periodic save every {args.every} steps of "
          f"{args.step_seconds:.2f} s, S3 frozen for {args.freeze:.0f} s")
    outside = [r for r in rec if r not in in_freeze]
    span = (outside[-1][0] - outside[0][0]) / max(1, len(outside) - 1) if len(outside) > 1 else 0.0
    print(f"  steps taken while frozen: {len(in_freeze)} in {args.freeze:.0f} s "
          f"(steps took ~{span:.3f} s each outside the freeze on this loaded machine)")
    print(f"  snapshot copy delta (max over committed saves): {delta * 1e3:.1f} ms")
    print(f"  worst block of the loop: {worst[1]:.3f} s at step {worst[2]}")
    print(f"  bound (docs): wait_limit_seconds {wait_limit:.1f} s + delta {delta:.3f} s = {bound:.3f} s")
    print(f"  RATIO worst block / bound = {worst[1] / bound:.3f}")

    # ---- phase 2: freeze, then a notice ---------------------------------------------------
    model = _model(WIDTH[args.size])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    store = S3Store(bucket, "phase2", endpoint_url=proxy.endpoint_url)
    guard = PreemptionGuard([SignalSource(signal.SIGUSR1)], grace_seconds=args.grace)
    session = TrainingSession(store=store, model=model, optimizer=opt, periodic_every=args.every,
                              guard=guard, progress_every=10_000)
    marks: dict[str, float] = {}

    def noticer(i: int) -> None:
        if i == freeze_at:
            proxy.freeze()
        if i == freeze_at + 2 * args.every - 1:  # a save is stuck in the frozen store by now
            marks["notice"] = time.time()
            os.kill(os.getpid(), signal.SIGUSR1)

    rec = _loop(session, model, opt, 10_000, args.step_seconds, noticer)
    marks["stopped"] = time.time()
    code = session.finish()
    marks["finished"] = time.time()
    ex = session.saver
    spilled = ex.last_spilled
    print(f"\nphase 2: notice (grace {args.grace:.0f} s) while S3 is frozen and a save is stuck")
    print(f"  notice -> should_stop(): {marks['stopped'] - marks['notice']:.3f} s  "
          f"RATIO to grace = {(marks['stopped'] - marks['notice']) / args.grace:.3f}")
    print(f"  notice -> finish() returned (exit {code}): {marks['finished'] - marks['notice']:.3f} s  "
          f"RATIO to grace = {(marks['finished'] - marks['notice']) / args.grace:.3f}")
    where = f"step {spilled.step} on LOCAL disk {spilled.location}" if spilled else "no spill"
    print(f"  saved before the deadline: {where}; newest on S3: "
          f"{ex.last_committed.step if ex.last_committed else None}")
    proxy.thaw()
    proxy.close()


def _committed(session: TrainingSession) -> list[float]:
    """Stall (snapshot copy) seconds of the committed checkpoints of this session."""
    from checkpointing.manifest import list_checkpoints

    return [c.stall_seconds for c in list_checkpoints(session.store)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--freeze", type=float, default=25.0, help="seconds S3 stays frozen (> the wait limit)")
    p.add_argument("--grace", type=float, default=10.0, help="notice window in phase 2, seconds")
    p.add_argument("--size", choices=sorted(WIDTH), default="medium")
    p.add_argument("--every", type=int, default=10, help="periodic save every N steps")
    p.add_argument("--step-seconds", type=float, default=0.05)
    p.add_argument("--warmup-steps", type=int, default=40)
    args = p.parse_args()
    print(f"wait_limit default {DEFAULT_WAIT_LIMIT_SECONDS} s; SPOTFLEET_SAVE_WAIT_SECONDS="
          f"{os.environ.get('SPOTFLEET_SAVE_WAIT_SECONDS', '(unset)')}", flush=True)
    from s3_radosgw_server import RadosGateway

    with tempfile.TemporaryDirectory(prefix="bench-freeze-rgw-") as work, RadosGateway(work) as gw:
        run(gw.endpoint_url, gw.access_key, gw.secret_key, args)


if __name__ == "__main__":
    main()
