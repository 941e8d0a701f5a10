"""The commit protocol is store-agnostic: the same saver/restore/retention on S3Store
(moto's in-process mock here, for speed; the S3 store itself is tested against a real
radosgw server in tests/s3)."""

from __future__ import annotations

import pytest
import torch

from checkpointing.manifest import list_checkpoints
from checkpointing.saver import AsyncSaver, restore_state
from checkpointing.stores.s3 import S3Store
from checkpointing.torch_state import TrainingState, state_sha256


@pytest.fixture
def s3(moto_s3) -> S3Store:
    moto_s3.create_bucket(Bucket="ckpt")
    return S3Store.from_uri("s3://ckpt/run1", region="us-east-1")


def test_save_restore_fallback_retention_on_s3(s3: S3Store) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 64)
    opt = torch.optim.AdamW(model.parameters())
    state = TrainingState(model=model, optimizer=opt)
    saver = AsyncSaver(s3, keep_periodic=2, shard_bytes=8192)
    hashes = {}
    for step, kind in [(1, "periodic"), (2, "insurance"), (3, "periodic"), (4, "periodic")]:
        model(torch.randn(2, 64)).sum().backward()
        opt.step()
        state.step = step
        result = saver.save(state.capture, step, kind, block=True)
        assert result is not None and result.ok
        assert result.info.location.startswith("s3://ckpt/run1/ckpt-")
        hashes[step] = state_sha256(model, opt)
    saver.close()
    assert [(c.step, c.kind) for c in list_checkpoints(s3)] == [(3, "periodic"), (4, "periodic")]

    newest = list_checkpoints(s3)[-1]
    s3.put_bytes(f"{newest.name}/tensors-00000.bin", b"torn")  # corrupt the newest
    outcome = restore_state(s3)
    assert outcome is not None and outcome.fell_back and outcome.info.step == 3
    model2 = torch.nn.Linear(64, 64)
    opt2 = torch.optim.AdamW(model2.parameters())
    TrainingState(model=model2, optimizer=opt2).apply(outcome.value)
    assert state_sha256(model2, opt2) == hashes[3]
