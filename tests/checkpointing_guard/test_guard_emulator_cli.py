"""The emulators' command-line entry: serve, take a notice via the control path, stop on SIGTERM."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest

from checkpointing.guard import PreemptionGuard
from checkpointing.notices import parse_sources
from checkpointing.notices.base import http_request


@pytest.mark.parametrize("cloud", ["aws", "gcp", "azure"])
def test_cli_server_delivers_notice(cloud: str) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "fleet.emulation.metadata_servers", "--cloud", cloud,
                             "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        spec = re.search(r"SPOTFLEET_NOTICE_SOURCES=(\S+)\)", line).group(1)
        base = spec.split(":", 1)[1]
        with PreemptionGuard(parse_sources(spec, poll_seconds=0.05), grace_seconds=20) as guard:
            assert guard.wait_for_notice(0.3) is None
            deadline = int(time.time()) + 40
            assert http_request("POST", f"{base}/_emulator/preempt?deadline={deadline}", body=b"").status == 200
            notice = guard.wait_for_notice(15)
        assert notice is not None and notice.source == cloud
        if cloud == "gcp":
            assert notice.deadline is None  # GCP announces no deadline: the guard's grace applies
        else:
            assert notice.deadline == pytest.approx(deadline, abs=1.0)
        proc.terminate()
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_cli_rejects_unknown_cloud() -> None:
    result = subprocess.run([sys.executable, "-m", "fleet.emulation.metadata_servers", "--cloud", "ibm"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "invalid choice" in result.stderr


def test_cli_starts_without_a_runpy_warning() -> None:
    # The documented command (docs/preemption-guard.md) printed "RuntimeWarning:
    # 'fleet.emulation.metadata_servers' found in sys.modules after import of package
    # 'fleet.emulation' ..." first: the package imported the module eagerly (s17 audit).
    result = subprocess.run([sys.executable, "-m", "fleet.emulation.metadata_servers", "--help"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "--cloud" in result.stdout
    assert "RuntimeWarning" not in result.stderr, result.stderr
    from fleet.emulation import AwsImdsEmulator, make_emulator  # the package names still resolve
    assert AwsImdsEmulator.__module__ == "fleet.emulation.metadata_servers" and callable(make_emulator)
