"""Helpers for the elastic multi-node tests (not a conftest): the drill tools plus the
single-process reference run and checkpoint comparison."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from fleet.providers.local.elastic_drill import (  # noqa: F401 - re-exported for the tests
    SCRIPT,
    EventWatch,
    drill_run,
    run_in_thread,
    train_args,
)

Watcher = EventWatch
make_run = drill_run


def reference_run(tmp: Path, args: list[str]) -> Path:
    """The single-process run of the same global batch sequence (no torch elastic env)."""
    ckpt = tmp / "reference-ckpt"
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK")}
    env["SPOTFLEET_EVENTS_FILE"] = str(tmp / "reference-events.jsonl")
    subprocess.run([sys.executable, str(SCRIPT), *args, "--checkpoint-uri", str(ckpt)],
                   env=env, check=True, capture_output=True, timeout=600)
    return ckpt


def final_state(ckpt: Path) -> dict:
    from checkpointing.saver import restore_state
    from checkpointing.stores.base import open_store

    out = restore_state(open_store(str(ckpt)))
    assert out is not None, f"no checkpoint in {ckpt}"
    return out.value


def max_param_diff(a: dict, b: dict) -> float:
    """Largest absolute difference between two checkpoints' model parameters."""
    return max(float((a["model"][k].double() - b["model"][k].double()).abs().max())
               for k in a["model"])
