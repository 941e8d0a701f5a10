"""Training-side library: runs INSIDE the training process on a (spot) node.

It must never import Dagster, SkyPilot or anything from ``fleet/``, ``assets/``,
``pipelines/`` or ``infra/`` (see docs/architecture.md). Dependencies: torch, numpy,
boto3, pydantic, pyyaml.

Public API (imported lazily, so ``import checkpointing.events`` stays light)::

    from checkpointing import TrainingSession          # the few-lines loop API
    from checkpointing import AsyncSaver, restore_state, list_checkpoints, CheckpointInfo
    from checkpointing import TrainingState, state_sha256, LocalStore, open_store
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "TrainingSession": "checkpointing.session",
    "StepHandle": "checkpointing.session",
    "RestoreNotCalled": "checkpointing.session",
    "save_training_state": "checkpointing.session",
    "load_training_state": "checkpointing.session",
    "CheckpointMismatch": "checkpointing.torch_state",
    "AsyncSaver": "checkpointing.saver",
    "SaveResult": "checkpointing.saver",
    "load_checkpoint": "checkpointing.saver",
    "restore_state": "checkpointing.saver",
    "CheckpointInfo": "checkpointing.manifest",
    "CorruptCheckpoint": "checkpointing.manifest",
    "CheckpointTooNew": "checkpointing.manifest",
    "RestoreOutcome": "checkpointing.manifest",
    "list_checkpoints": "checkpointing.manifest",
    "latest_checkpoint": "checkpointing.manifest",
    "apply_retention": "checkpointing.manifest",
    "restore_latest": "checkpointing.manifest",
    "SnapshotBuffers": "checkpointing.snapshot",
    "TrainingState": "checkpointing.torch_state",
    "capture_rng": "checkpointing.torch_state",
    "restore_rng": "checkpointing.torch_state",
    "state_sha256": "checkpointing.torch_state",
    "LocalStore": "checkpointing.stores.local",
    "CheckpointStore": "checkpointing.stores.base",
    "open_store": "checkpointing.stores.base",
    "EventLog": "checkpointing.events",
    "EXIT_PREEMPTED": "checkpointing.runtime_env",
    "AdaptivePolicy": "checkpointing.policy",
    "SaveKind": "checkpointing.policy",
    "PreemptionGuard": "checkpointing.guard",
}

__all__ = sorted(_EXPORTS)

# A SIGTERM that arrives while the process is still importing torch / building the
# model (before the session arms its PreemptionGuard) is recorded and handled as a
# notice once the guard is armed, instead of killing the process (checkpointing.early_notice).
from checkpointing import early_notice as _early_notice  # noqa: E402

_early_notice.install()


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'checkpointing' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
