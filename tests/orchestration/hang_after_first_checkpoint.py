"""Test stand-in for a deadlocked trainer: examples/train_example.py (same argv) that, on
its first run only (no file at $SPOTFLEET_TEST_HANG_MARKER yet), stops itself (SIGSTOP:
alive, silent, billed) right after its first committed checkpoint, its pid in the marker."""

from __future__ import annotations

import os
import runpy
import signal
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "train_example.py"


def _stop_after_first_checkpoint(events: Path, marker: Path) -> None:
    while True:
        try:
            text = events.read_text(encoding="utf-8")
        except OSError:
            text = ""
        if '"save_committed"' in text:
            marker.write_text(str(os.getpid()), encoding="utf-8")  # for the test's cleanup
            os.kill(os.getpid(), signal.SIGSTOP)
            return
        time.sleep(0.02)


if __name__ == "__main__":
    marker = Path(os.environ["SPOTFLEET_TEST_HANG_MARKER"])
    if not marker.exists():
        threading.Thread(target=_stop_after_first_checkpoint, daemon=True,
                         args=(Path(os.environ["SPOTFLEET_EVENTS_FILE"]), marker)).start()
    sys.argv = [str(EXAMPLE), *sys.argv[1:]]
    sys.path.insert(0, str(EXAMPLE.parent))
    runpy.run_path(str(EXAMPLE), run_name="__main__")
