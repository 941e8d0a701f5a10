"""Per-step cost of checking ``guard.notice`` in a training loop.

Measures, in the same run (best of several repeats, ``time.perf_counter_ns``):
  * an empty Python loop iteration (the floor of any per-step work),
  * the same loop with ``if guard.notice is not None`` against an ARMED guard
    (SIGTERM handler + an AWS IMDSv2 poller hitting a local emulator),
  * a tiny real torch training step (MLP, CPU), to put the figure in proportion.

Prints the check's cost as a ratio against the empty iteration and as a fraction of
the tiny step.   Run: python benchmarks/bench_guard_notice.py [--iterations N]
"""

from __future__ import annotations

import argparse
import platform
import time

from checkpointing.guard import PreemptionGuard
from checkpointing.notices import AwsImdsWatcher, SignalSource
from fleet.emulation.metadata_servers import AwsImdsEmulator


def _best_ns_per_iter(fn, iterations: int, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        fn(iterations)
        best = min(best, (time.perf_counter_ns() - t0) / iterations)
    return best


def empty_loop(n: int) -> None:
    for _ in range(n):
        pass


def make_checked_loop(guard: PreemptionGuard):
    def checked_loop(n: int) -> None:
        for _ in range(n):
            if guard.notice is not None:
                break
    return checked_loop


def tiny_steps(steps: int, rounds: int, guard: PreemptionGuard) -> tuple[float, float]:
    """Best seconds per step without and with the check, rounds interleaved (noise on a
    shared machine hits both alike)."""
    import torch

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))

    def run(check: bool) -> float:
        t0 = time.perf_counter()
        for _ in range(steps):
            opt.zero_grad(set_to_none=True)
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            if check and guard.notice is not None:
                break
        return (time.perf_counter() - t0) / steps

    run(False)  # warm-up (allocator, kernels)
    plain = checked = float("inf")
    for _ in range(rounds):
        plain = min(plain, run(False))
        checked = min(checked, run(True))
    return plain, checked


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iterations", type=int, default=2_000_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()

    with AwsImdsEmulator() as emu:
        guard = PreemptionGuard([SignalSource(), AwsImdsWatcher(emu.base_url, poll_seconds=1.0)])
        with guard:
            empty = _best_ns_per_iter(empty_loop, args.iterations, args.repeats)
            checked = _best_ns_per_iter(make_checked_loop(guard), args.iterations, args.repeats)
            step_plain, step_checked = tiny_steps(args.steps, 5, guard)
    check_ns = max(checked - empty, 0.0)
    print(f"machine: {platform.machine()} {platform.processor() or ''} python {platform.python_version()}")
    print(f"empty loop iteration           : {empty:7.1f} ns")
    print(f"loop + guard.notice check      : {checked:7.1f} ns  "
          f"(ratio vs empty iteration: {checked / empty:.2f}x)")
    print(f"cost of the check itself       : {check_ns:7.1f} ns")
    print(f"tiny torch step (MLP, 1 thread): {step_plain * 1e6:7.1f} us plain, "
          f"{step_checked * 1e6:7.1f} us with the check")
    print(f"check / tiny step              : {check_ns * 1e-9 / step_plain:.2e} "
          f"(step-to-step difference {100 * (step_checked - step_plain) / step_plain:+.2f} %, noise)")


if __name__ == "__main__":
    main()
