"""``python -m checkpointing.elastic_run --host-store`` ends without the store-closed noise.

Found in the s17 audit, running docs/elastic.md's launcher by hand on one node:
``--nnodes 1 --host-store -- examples/train_elastic.py`` trained and exited 0, then printed a
C++ ``recvVector failed ... Connection was likely closed`` stack trace and "has failed to
shutdown the rendezvous ... RendezvousConnectionError": the node dropped the store it hosts
before closing the rendezvous through it (the SkyPilot head node runs the same command).
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_host_store_node_exits_cleanly(tmp_path):
    script = tmp_path / "work.py"
    script.write_text("print('worker done')\n")
    proc = subprocess.run(
        [sys.executable, "-m", "checkpointing.elastic_run", "--nnodes", "1",
         "--rdzv-endpoint", f"127.0.0.1:{_free_port()}", "--rdzv-id", "exit-test",
         "--host-store", "--", str(script)],
        cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "worker done" in proc.stdout
    assert "failed to shutdown the rendezvous" not in proc.stderr, proc.stderr[-3000:]
    assert "recvVector failed" not in proc.stderr, proc.stderr[-3000:]
