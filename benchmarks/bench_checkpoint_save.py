"""Checkpoint save cost for ~100M / ~350M-parameter models with AdamW.

Two ratios, each against a physical limit measured in the SAME run:

* stall ratio = training-loop stall per save (snapshot into the reusable CPU buffer)
  / time of a plain memcpy of the same number of bytes (goal <= 1.2);
* save throughput ratio = checkpoint bytes / persist seconds (blobs + sha256 +
  fsync + manifest, on a LocalStore) / raw disk write bandwidth of ``dd
  bs=16M conv=fsync`` writing the same number of bytes to the same filesystem
  (goal >= 0.8).

The checkpointed state is params + AdamW's two moments (+ step counters), i.e.
~12 bytes per parameter. ``--device cuda`` snapshots from GPU memory into pinned
buffers and compares with a device-to-host copy of the same bytes into pinned memory
(the PCIe limit); it also times the same snapshot into a pageable (unpinned) buffer, the
peer that shows what pinning buys (skipped, exit 0, without a GPU).

    nice python benchmarks/bench_checkpoint_save.py --params 100M [--saves 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

from checkpointing.saver import AsyncSaver  # noqa: E402
from checkpointing.snapshot import SnapshotBuffers  # noqa: E402
from checkpointing.stores.local import LocalStore  # noqa: E402
from checkpointing.torch_state import TrainingState  # noqa: E402

WIDTH = 1024  # block: Linear(d, 4d) + Linear(4d, d) ~ 8.4M parameters at d=1024
SAVE_TIMEOUT_SECONDS = 600.0  # a 12 GB checkpoint persists for longer than the loop's 10 s wait limit
CHUNK = 256 << 20  # memcpy baseline chunk (bytes): far larger than any CPU cache


def parse_params(text: str) -> int:
    text = text.strip().upper()
    mult = {"K": 10**3, "M": 10**6, "B": 10**9}.get(text[-1:], 1)
    return int(float(text.rstrip("KMB")) * mult)


def build(params: int, device: str) -> tuple[nn.Module, torch.optim.Optimizer]:
    """A transformer-MLP-like stack with about ``params`` parameters, AdamW state populated."""
    per_block = 2 * WIDTH * 4 * WIDTH + 5 * WIDTH
    blocks = max(1, round(params / per_block))
    layers: list[nn.Module] = []
    with torch.device(device):  # the layers themselves are made on ``device`` (not just the container)
        for _ in range(blocks):
            layers += [nn.Linear(WIDTH, 4 * WIDTH), nn.Linear(4 * WIDTH, WIDTH)]
        model = nn.Sequential(*layers)
    assert next(model.parameters()).device.type == device, "model is not on the requested device"
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for p in model.parameters():  # one step with zero grads creates exp_avg / exp_avg_sq
        p.grad = torch.zeros_like(p)
    opt.step()
    for p in model.parameters():
        p.grad = None
    return model, opt


def memcpy_seconds(src: torch.Tensor) -> float:
    """Time to memcpy every byte of ``src`` (a uint8 tensor) into host memory, in CHUNK
    pieces: ``np.copyto`` (glibc memcpy) on the CPU, a device-to-host copy into pinned
    memory from the GPU."""
    n = src.numel()
    if src.is_cuda:
        dst = torch.empty(min(n, CHUNK), dtype=torch.uint8, pin_memory=True)
        dst.zero_()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for off in range(0, n, CHUNK):
            m = min(CHUNK, n - off)
            dst[:m].copy_(src[off:off + m], non_blocking=True)
        torch.cuda.synchronize()
        return time.perf_counter() - t0
    dst_np = np.empty(min(n, CHUNK), dtype=np.uint8)
    dst_np.fill(1)  # touch the pages: no page faults inside the timed copy
    src_np = src.numpy()
    t0 = time.perf_counter()
    for off in range(0, n, CHUNK):
        m = min(CHUNK, n - off)
        np.copyto(dst_np[:m], src_np[off:off + m])
    return time.perf_counter() - t0


def pageable_snapshot_seconds(buffers: SnapshotBuffers, state: TrainingState) -> float:
    """Seconds to snapshot ``state`` into ``buffers`` (a pageable buffer, reused between
    rounds so its pages are touched), the same call the saver times as its stall."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    buffers.capture(state.capture())
    seconds = time.perf_counter() - t0
    buffers.release()
    return seconds


def dd_bytes_per_second(directory: Path, nbytes: int) -> float:
    """Raw write bandwidth (bytes/s) of ``dd if=/dev/zero bs=16M conv=fsync``."""
    target = directory / "dd-probe.bin"
    count = max(1, nbytes // (16 << 20))
    t0 = time.perf_counter()
    subprocess.run(["dd", "if=/dev/zero", f"of={target}", "bs=16M", f"count={count}", "conv=fsync"],
                   check=True, capture_output=True)
    seconds = time.perf_counter() - t0
    target.unlink()
    return count * (16 << 20) / seconds


def run(args: argparse.Namespace) -> dict:
    if args.device == "cuda" and not torch.cuda.is_available():
        print("skipped: --device cuda needs a CUDA GPU (none visible)")
        return {"skipped": "no CUDA"}
    torch.manual_seed(0)
    params = parse_params(args.params)
    t0 = time.perf_counter()
    model, opt = build(params, args.device)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params / 1e6:.1f}M parameters on {args.device}, built in "
          f"{time.perf_counter() - t0:.1f} s", flush=True)
    state = TrainingState(model=model, optimizer=opt, step=1)
    workdir = Path(tempfile.mkdtemp(prefix="bench-ckpt-", dir=args.dir))
    gpu_src = None
    pageable = SnapshotBuffers(pin_memory=False) if args.device == "cuda" else None
    try:
        saver = AsyncSaver(LocalStore(workdir / "store"), pin_memory=args.device == "cuda",
                           keep_periodic=1)
        saver.buffers.reserve(state.capture())
        rounds = []
        for i in range(args.saves):
            # interleave the limits with the saves so that noise from other tenants of
            # the machine hits both sides alike
            state.step = i + 1
            result = saver.save(state.capture, i + 1, "periodic", block=True, timeout=SAVE_TIMEOUT_SECONDS)
            assert result is not None and result.ok, result
            nbytes = result.bytes
            flat = saver.buffers._flat
            assert flat is not None
            if args.device == "cuda":
                if gpu_src is None:
                    gpu_src = torch.ones(nbytes, dtype=torch.uint8, device="cuda")
                copy_s = memcpy_seconds(gpu_src)
            else:
                copy_s = memcpy_seconds(flat[:nbytes])
            disk_bps = dd_bytes_per_second(workdir, nbytes)
            rounds.append({"stall_seconds": result.stall_seconds, "memcpy_seconds": copy_s,
                           "persist_seconds": result.persist_seconds,
                           "save_bytes_per_second": nbytes / result.persist_seconds,
                           "dd_bytes_per_second": disk_bps})
            if pageable is not None:
                rounds[-1]["pageable_stall_seconds"] = pageable_snapshot_seconds(pageable, state)
            print(f"round {i + 1}: {nbytes / 1e9:.2f} GB; stall {result.stall_seconds:.3f} s vs memcpy "
                  f"{copy_s:.3f} s; persist {nbytes / result.persist_seconds / 1e6:.0f} MB/s vs dd "
                  f"{disk_bps / 1e6:.0f} MB/s"
                  + (f"; unpinned snapshot {rounds[-1]['pageable_stall_seconds']:.3f} s"
                     if pageable is not None else ""), flush=True)
        saver.close()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    def best(key: str, high: bool = False) -> float:
        values = [r[key] for r in rounds]
        return max(values) if high else min(values)

    def median(key: str) -> float:
        values = sorted(r[key] for r in rounds)
        return values[len(values) // 2]

    out = {
        "params": n_params, "device": args.device, "checkpoint_bytes": nbytes, "rounds": rounds,
        "stall_ratio_best": best("stall_seconds") / best("memcpy_seconds"),
        "stall_ratio_median": median("stall_seconds") / median("memcpy_seconds"),
        "throughput_ratio_best": best("save_bytes_per_second", True) / best("dd_bytes_per_second", True),
        "throughput_ratio_median": median("save_bytes_per_second") / median("dd_bytes_per_second"),
        # each round's ratio pairs measurements taken seconds apart (least exposed to noise)
        "stall_ratio_per_round_median": sorted(r["stall_seconds"] / r["memcpy_seconds"]
                                               for r in rounds)[len(rounds) // 2],
        "throughput_ratio_per_round_median": sorted(r["save_bytes_per_second"] / r["dd_bytes_per_second"]
                                                    for r in rounds)[len(rounds) // 2],
        "machine": f"{os.cpu_count()} cores, {platform.machine()}, torch {torch.__version__}",
    }
    print(f"stall per save / memcpy of the same {nbytes / 1e9:.2f} GB: best {best('stall_seconds'):.3f} s / "
          f"{best('memcpy_seconds'):.3f} s = {out['stall_ratio_best']:.2f}; median ratio "
          f"{out['stall_ratio_median']:.2f}; per-round median {out['stall_ratio_per_round_median']:.2f}  (goal <= 1.2)")
    print(f"save throughput / dd raw write: best {best('save_bytes_per_second', True) / 1e6:.0f} / "
          f"{best('dd_bytes_per_second', True) / 1e6:.0f} MB/s = {out['throughput_ratio_best']:.2f}; "
          f"median ratio {out['throughput_ratio_median']:.2f}; per-round median "
          f"{out['throughput_ratio_per_round_median']:.2f}  (goal >= 0.8)")
    if pageable is not None:
        out["pageable_over_pinned_median"] = median("pageable_stall_seconds") / median("stall_seconds")
        print(f"snapshot into an unpinned buffer / into the pinned one: median "
              f"{median('pageable_stall_seconds'):.3f} s / {median('stall_seconds'):.3f} s = "
              f"{out['pageable_over_pinned_median']:.2f}  (what pinning buys)")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--params", default="100M", help="model size, e.g. 100M or 350M")
    p.add_argument("--saves", type=int, default=3, help="saves to time (median reported)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--dir", default=None, help="directory on the disk to test (default: $TMPDIR)")
    p.add_argument("--json", default=None, help="also write the figures to this JSON file")
    args = p.parse_args(argv)
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    out = run(args)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
