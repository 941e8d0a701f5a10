"""Checkpointing from GPU memory (needs a CUDA GPU; skipped, with the reason, without one).

* A snapshot of CUDA tensors goes through the pinned host buffer (``copy_(non_blocking)``
  + one synchronize): the committed checkpoint holds exactly the state at the save, even
  when the GPU tensors are overwritten the moment ``save`` returns and the upload is
  still running, and restoring it into a fresh model on the GPU is bit-identical.
* The example job trained with ``--device cuda`` (dropout draws from the CUDA RNG):
  SIGTERM -> emergency save -> exit 75 -> resume ends bit-identical to an uninterrupted
  run, with zero steps lost; a SIGKILL after a periodic save resumes bit-identical too.

CI has no GPU: these run on a GPU machine (docs/benchmarks.md records where they ran).
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_ckrt_exact_resume import EXAMPLE, FLAGS, _env, _events, _final_sha, _wait_for
from torch import nn

from checkpointing.manifest import list_checkpoints
from checkpointing.runtime_env import EXIT_PREEMPTED
from checkpointing.saver import AsyncSaver, restore_state
from checkpointing.stores.local import LocalStore
from checkpointing.torch_state import TrainingState, state_sha256

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="needs a CUDA GPU (run on a GPU machine; CI has none)")
CUDA_FLAGS = [*FLAGS, "--device", "cuda"]


def _gpu_model(seed: int) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 256)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(64, 256, device="cuda")).pow(2).mean().backward()
        opt.step()
    return model, opt


def test_gpu_snapshot_is_pinned_and_holds_the_state_at_the_save(tmp_path: Path) -> None:
    model, opt = _gpu_model(0)
    expected = state_sha256(model, opt)
    store = LocalStore(tmp_path / "ckpt")
    saver = AsyncSaver(store)  # pin_memory defaults to True where CUDA is present
    state = TrainingState(model=model, optimizer=opt, step=3)
    try:
        saver.save(state.capture, 3, "periodic")  # returns after the snapshot; upload runs on
        with torch.no_grad():  # queued the moment save returns, while the upload may still run
            for p in model.parameters():
                p.add_(1.0)
        assert saver.buffers.pin_memory and saver.buffers._flat is not None
        assert saver.buffers._flat.is_pinned()
        result = saver.wait(timeout=60)
        assert result is not None and result.ok, result
    finally:
        saver.close()
    assert state_sha256(model, opt) != expected  # the live state did move on

    fresh_model, fresh_opt = _gpu_model(1)
    outcome = restore_state(store)
    assert outcome is not None and not outcome.fell_back
    assert TrainingState(model=fresh_model, optimizer=fresh_opt).apply(outcome.value) == 3
    assert next(fresh_model.parameters()).is_cuda
    assert state_sha256(fresh_model, fresh_opt) == expected


def _start(tmp: Path, attempt: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(EXAMPLE), *CUDA_FLAGS], env=_env(tmp, attempt),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _run_to_end(tmp: Path, attempt: str) -> str:
    proc = _start(tmp, attempt)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    assert "on cuda" in out, out
    return _final_sha(tmp, attempt)


@pytest.fixture(scope="module")
def cuda_reference_sha(tmp_path_factory) -> str:
    """The uninterrupted GPU run, in its own process (as every resumed attempt is)."""
    return _run_to_end(tmp_path_factory.mktemp("cuda-reference"), "ref")


@pytest.mark.slow
def test_cuda_sigterm_emergency_save_resumes_bit_identical(tmp_path: Path, cuda_reference_sha: str) -> None:
    proc = _start(tmp_path, "t0")
    assert _wait_for(tmp_path, "t0", lambda evs: any(e.kind == "progress" and e.data["step"] >= 30
                                                      for e in evs), timeout=120)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == EXIT_PREEMPTED, out
    evs = _events(tmp_path, "t0")
    stopped_at = [e for e in evs if e.kind == "exit"][-1].data["step"]
    assert stopped_at in [e.data["step"] for e in evs if e.kind == "save_committed"]

    assert _run_to_end(tmp_path, "t1") == cuda_reference_sha
    restore = [e for e in _events(tmp_path, "t1") if e.kind == "restore"]
    assert restore and restore[0].data["step"] == stopped_at  # zero steps lost


@pytest.mark.slow
def test_cuda_sigkill_after_a_periodic_save_resumes_bit_identical(tmp_path: Path,
                                                                  cuda_reference_sha: str) -> None:
    proc = _start(tmp_path, "k0")
    assert _wait_for(tmp_path, "k0", lambda evs: any(e.kind == "save_committed" and e.data["step"] >= 24
                                                      for e in evs), timeout=120)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    committed = list_checkpoints(LocalStore(tmp_path / "ckpt"))[-1].step  # the newest complete one

    assert _run_to_end(tmp_path, "k1") == cuda_reference_sha
    restore = [e for e in _events(tmp_path, "k1") if e.kind == "restore"]
    assert restore and restore[0].data["step"] == committed
