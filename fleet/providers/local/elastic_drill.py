"""Drills for elastic multi-node stages on the local fleet (tests, benchmark, demos).

``always_up`` is a market in which every zone keeps capacity, so that reclaims come only
from the drill (``ElasticStageRun.reclaim_zone`` / ``regain_zone``); ``drill_run`` builds
an ``ElasticStageRun`` of ``examples/train_elastic.py``; ``EventWatch`` collects the
stage's events and waits on conditions over them (never on timing).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from checkpointing.events import Event
from fleet.contract import RunPriors
from fleet.emulation.injector import CapacitySchedule, TimeScale
from fleet.market.traces import Trace
from fleet.providers.base import StageSpec
from fleet.providers.local.multinode import ElasticConfig, ElasticStageRun
from fleet.providers.local.provider import LocalFleetConfig, LocalFleetProvider

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "examples" / "train_elastic.py"
ZONES = ("us-east-1a", "us-east-1b", "us-west-2a")


def always_up(zones=ZONES, hours: float = 48.0, gap_seconds: float = 300.0) -> CapacitySchedule:
    """A market where every zone always has capacity."""
    n = int(hours * 3600 / gap_seconds)
    return CapacitySchedule([Trace(zone=z, accelerator="V100", count=1, gap_seconds=gap_seconds,
                                   available=np.ones(n, dtype=np.int32), source="always-up")
                             for z in zones])


def train_args(steps: int, *, step_sleep: float = 0.02, periodic_every: int = 50,
               batch_size: int = 32, seed: int = 3, size: str = "tiny") -> list[str]:
    """Arguments of ``examples/train_elastic.py`` (the checkpoint URI comes from the spec)."""
    return ["--steps", str(steps), "--seed", str(seed), "--size", size, "--batch-size",
            str(batch_size), "--step-sleep", str(step_sleep), "--periodic-every",
            str(periodic_every), "--progress-every", "10"]


def drill_run(workdir: Path, ckpt: Path, *, nodes: int = 4, zones=ZONES[:2], steps: int = 400,
              on_event: Callable[[Event], None] | None = None, grace_seconds: float = 5.0,
              cloud: str = "signal", elastic: ElasticConfig | None = None,
              args: list[str] | None = None, digests: bool = True,
              priors: RunPriors | None = None) -> ElasticStageRun:
    """An elastic stage of ``nodes`` nodes over ``zones`` on an always-up market (wall s;
    ``TimeScale(3600)``: a market second lasts a wall second). ``priors``: the plan's
    statistics, in market seconds (default none: no MTTP, so rank 0 takes no insurance
    save but its bootstrap one)."""
    cfg = LocalFleetConfig(schedule=always_up(), time_scale=TimeScale(3600.0), cloud=cloud,
                           grace_seconds=grace_seconds, workdir=workdir,
                           allocation_seconds=0.2, preparation_seconds=0.3,
                           max_capacity_wait_seconds=300.0)
    spec = StageSpec(name="elastic", command=[sys.executable, str(SCRIPT),
                                              *(args or train_args(steps))],
                     checkpoint_uri=str(ckpt), num_nodes=nodes, zones=tuple(zones),
                     env={"SPOTFLEET_ELASTIC_DIGESTS": "1"} if digests else {},
                     priors=priors or RunPriors())
    return ElasticStageRun(LocalFleetProvider(cfg), spec, 1, on_event,
                           elastic=elastic or ElasticConfig())


class EventWatch:
    """Collects a stage's events; ``wait(pred)`` blocks until ``pred(events)`` holds."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self._cv = threading.Condition()

    def __call__(self, ev: Event) -> None:
        with self._cv:
            self.events.append(ev)
            self._cv.notify_all()

    def wait(self, pred: Callable[[list[Event]], bool], timeout: float = 300.0) -> bool:
        end = time.monotonic() + timeout
        with self._cv:
            while not pred(self.events):
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._cv.wait(left)
            return True

    def groups(self) -> list[dict]:
        """Rank 0's membership events (one per group formed), in order."""
        return [dict(e.data, time=e.time, node_id=e.node_id) for e in list(self.events)
                if e.kind == "membership" and e.data.get("rank") == 0]

    def world_sizes(self) -> list[int]:
        return [g["world_size"] for g in self.groups()]

    def of(self, kind: str) -> list[Event]:
        return [e for e in list(self.events) if e.kind == kind]

    def max_step(self) -> int:
        return max((int(e.data["step"]) for e in list(self.events)
                    if e.kind in ("progress", "membership") and "step" in e.data), default=0)


def run_in_thread(run: ElasticStageRun) -> tuple[threading.Thread, dict]:
    """Start ``run.execute()`` on a thread; the dict gets ``result`` or ``error``."""
    box: dict = {}

    def target() -> None:
        try:
            box["result"] = run.execute()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            box["error"] = exc

    t = threading.Thread(target=target, daemon=True, name="elastic-stage")
    t.start()
    return t, box


def join_or_cancel(run: ElasticStageRun, t: threading.Thread, timeout_s: float = 400.0) -> bool:
    """Wait up to ``timeout_s`` for the stage's thread; if it is still running, cancel the
    stage and give it 60 s more. True when the thread ended (a hung stage is then a test
    failure, never a hung test)."""
    t.join(timeout_s)
    if t.is_alive():
        run.cancel()
        t.join(60)
    return not t.is_alive()
