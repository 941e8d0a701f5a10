"""A tiny torch-free training stand-in for provider tests (fast to start).

It speaks the same contract as examples/train_example.py: reads SPOTFLEET_* env,
writes checkpointing events, arms the notice sources from SPOTFLEET_NOTICE_SOURCES,
saves an emergency checkpoint on notice and exits 75, exits 0 when done with an
``exit`` event carrying ``state_sha256``. Its "model" is a sha256 chain over steps,
so an exact resume gives the same final digest as an uninterrupted run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

from checkpointing.events import Event
from checkpointing.notices import parse_sources


class _Log:
    """Appends events (built directly: data may hold a ``kind`` key, e.g. save kinds)."""

    def __init__(self, path: str | None, node_id: str | None):
        self.path, self.node_id = path, node_id

    def emit(self, event_kind: str, **data) -> None:
        if self.path:
            ev = Event(kind=event_kind, time=time.time(), node_id=self.node_id, data=data)
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(ev.to_json() + "\n")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--step-sleep", type=float, default=0.02)
    ap.add_argument("--periodic-every", type=int, default=0)
    ap.add_argument("--stall", type=float, default=0.0, help="stall_seconds reported per save")
    ap.add_argument("--ignore-notice", action="store_true",
                    help="arm no notice source; just run (the injector must SIGKILL it)")
    ap.add_argument("--notice-only", action="store_true",
                    help="wait for a notice, report it, exit 75 (no training)")
    ap.add_argument("--hang-in-emergency-save", action="store_true",
                    help="on a notice: report it and save_started, then SIGSTOP itself before "
                         "writing anything (a save that hangs; deterministic, unlike a SIGSTOP "
                         "from outside, which may land after the save committed)")
    args = ap.parse_args()

    log = _Log(os.environ.get("SPOTFLEET_EVENTS_FILE"), os.environ.get("SPOTFLEET_NODE_ID"))
    ckpt = Path(os.environ.get("SPOTFLEET_CHECKPOINT_URI", "").removeprefix("file://") or ".")
    ckpt.mkdir(parents=True, exist_ok=True)
    state_file = ckpt / f"standin_state_rank{os.environ.get('SPOTFLEET_NODE_RANK', '0')}.json"
    notice = threading.Event()
    seen: list = []

    def deliver(n) -> None:
        seen.append(n)
        notice.set()

    sources = [] if args.ignore_notice else parse_sources(
        os.environ.get("SPOTFLEET_NOTICE_SOURCES"), poll_seconds=0.05)
    for s in sources:
        s.start(deliver)

    step, digest = 0, hashlib.sha256(str(args.seed).encode()).hexdigest()
    resumed = None
    if state_file.exists():
        st = json.loads(state_file.read_text())
        step, digest, resumed = st["step"], st["digest"], st["step"]
    log.emit("start", zone=os.environ.get("SPOTFLEET_ZONE"), resumed_from_step=resumed,
             checkpoint_prior=os.environ.get("SPOTFLEET_CHECKPOINT_SECONDS"))
    if resumed is not None:
        log.emit("restore", step=resumed, location=str(state_file), fell_back=False, reason="latest")

    def save(kind: str) -> None:
        log.emit("save_started", step=step, kind=kind)
        if kind == "emergency" and args.hang_in_emergency_save:
            os.kill(os.getpid(), signal.SIGSTOP)  # silent from here until the deadline's SIGKILL
        tmp = state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"step": step, "digest": digest}))
        os.replace(tmp, state_file)
        log.emit("save_committed", step=step, kind=kind, bytes=tmp.stat().st_size if tmp.exists() else 0,
                 stall_seconds=args.stall, persist_seconds=0.0, location=str(state_file))

    if args.notice_only:
        notice.wait(30)
        if not seen:
            log.emit("exit", reason="error", step=0)
            return 1
        n = seen[0]
        log.emit("notice", source=n.source, deadline_unix=n.deadline)
        log.emit("exit", reason="preempted", step=0)
        return 75

    while step < args.steps:
        if notice.is_set():
            n = seen[0]
            log.emit("notice", source=n.source, deadline_unix=n.deadline)
            save("emergency")
            log.emit("exit", reason="preempted", step=step)
            return 75
        time.sleep(args.step_sleep)
        digest = hashlib.sha256(f"{digest}:{step}".encode()).hexdigest()
        step += 1
        if step % 5 == 0:
            log.emit("progress", step=step, total_steps=args.steps,
                     mean_step_seconds=args.step_sleep, loss=1.0 / step)
        if args.periodic_every and step % args.periodic_every == 0:
            save("periodic")
    log.emit("exit", reason="completed", step=step, state_sha256=digest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
