"""Run ``examples/train_example.py`` as real OS processes, quickly, for the kill tests.

``ExampleLauncher`` keeps a multiprocessing *forkserver* that imported torch and the
checkpointing library once; every attempt is a fresh process forked from it (tens of
milliseconds instead of seconds of interpreter + torch start-up on a busy 2-core box).
Each attempt is a real process with its own pid, signal handlers, files and exit code:
SIGKILL and SIGTERM hit it exactly as they would hit ``python train_example.py``.
Its stdout/stderr go to ``<log_dir>/<name>.log``.
"""

from __future__ import annotations

import importlib.util
import multiprocessing
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from checkpointing.events import Event, read_events

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "train_example.py"
PRELOAD = ["torch", "torch._dynamo", "torch.optim", "numpy", "boto3", "botocore.client",
           "checkpointing.session", "checkpointing.saver", "checkpointing.stores.local",
           "checkpointing.stores.s3"]


def _child(argv: list[str], env: dict[str, str], log_path: str) -> None:
    """Body of one attempt (runs in the forked process)."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 (process lifetime)
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    os.environ.clear()
    os.environ.update(env)
    spec = importlib.util.spec_from_file_location("train_example_attempt", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    code = module.main(list(argv))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(int(code or 0))


class ExampleLauncher:
    """Start attempts of the example on one checkpoint prefix; see the module docstring."""

    #: every launcher created (``close_all`` kills what a failed test left running)
    _instances: list[ExampleLauncher] = []

    @classmethod
    def close_all(cls) -> None:
        for launcher in cls._instances:
            launcher.close()
        cls._instances.clear()

    def __init__(self, flags: Sequence[str], env: dict[str, str], events_file: Path, log_dir: Path):
        self.flags = list(flags)
        self.env = dict(env)
        self.events_file = Path(events_file)
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._procs: list[multiprocessing.Process] = []
        ExampleLauncher._instances.append(self)
        self.ctx = multiprocessing.get_context("forkserver")
        self.ctx.set_forkserver_preload(PRELOAD)

    def start(self, name: str, extra_env: dict[str, str] | None = None,
              flags: Sequence[str] | None = None) -> multiprocessing.Process:
        """Fork attempt ``name`` (its SPOTFLEET_NODE_ID); ``flags`` replace the default flags."""
        env = dict(self.env)
        env["SPOTFLEET_NODE_ID"] = name
        env.update(extra_env or {})
        argv = list(self.flags if flags is None else flags)
        proc = self.ctx.Process(target=_child, args=(argv, env, str(self.log_dir / f"{name}.log")),
                                name=name, daemon=True)
        proc.start()
        self._procs.append(proc)
        return proc

    def close(self) -> None:
        """SIGKILL every attempt still running (a failed test must not leave them)."""
        for proc in self._procs:
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=10)
        self._procs.clear()

    def log(self, name: str) -> str:
        path = self.log_dir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def events(self, name: str | None = None) -> list[Event]:
        return [e for e in read_events(self.events_file) if name is None or e.node_id == name]

    def wait_for(self, name: str, predicate: Callable[[list[Event]], bool], proc=None,
                 timeout: float = 60.0) -> bool:
        """Poll the events file until ``predicate(events of name)``; False on timeout or if
        ``proc`` ended first."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if predicate(self.events(name)):
                return True
            if proc is not None and not proc.is_alive():
                return predicate(self.events(name))
            time.sleep(0.003)
        return False
