"""SIGTERM to a guarded training loop in a child process, and bad configuration."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from checkpointing.guard import PreemptionGuard
from checkpointing.notices import NoticeConfigError, SignalSource, parse_sources
from fleet.emulation.metadata_servers import AwsImdsEmulator

CHILD = textwrap.dedent("""
    import json, sys, time
    from checkpointing.guard import PreemptionGuard
    guard = PreemptionGuard.from_env().start()
    print("ready", flush=True)
    step, seen_at = 0, None
    while step < 100000:
        time.sleep(0.005)          # one "training step"
        step += 1
        if guard.notice is not None and seen_at is None:
            seen_at = step         # the loop would do its emergency save here
        if seen_at is not None and step >= seen_at + 20:
            break
    n = guard.notice
    print(json.dumps({"source": n.source, "detail": n.detail, "received_at": n.received_at,
                      "deadline": guard.deadline, "steps_after": step - seen_at,
                      "grace": guard.grace_seconds}), flush=True)
""")


def _run_child(env_extra: dict[str, str], sig: signal.Signals) -> dict:
    env = {**os.environ, **env_extra}
    proc = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, f"child died on {sig.name} (rc={proc.returncode}): {err}"
    return json.loads(out.strip().splitlines()[-1])


def test_sigterm_is_recorded_and_loop_keeps_running() -> None:
    result = _run_child({"SPOTFLEET_NOTICE_SOURCES": "", "SPOTFLEET_GRACE_SECONDS": "12"},
                        signal.SIGTERM)
    assert result["source"] == "signal" and result["detail"]["signal"] == "SIGTERM"
    assert result["steps_after"] == 20  # kept training after the notice
    assert result["deadline"] == pytest.approx(result["received_at"] + 12)


def test_configurable_signal_name() -> None:
    result = _run_child({"SPOTFLEET_NOTICE_SOURCES": "signal:SIGUSR1"}, signal.SIGUSR1)
    assert result["detail"]["signal"] == "SIGUSR1"


def test_stop_restores_previous_handler() -> None:
    before = signal.getsignal(signal.SIGUSR2)
    guard = PreemptionGuard([SignalSource("USR2")]).start()
    assert signal.getsignal(signal.SIGUSR2) is not before
    os.kill(os.getpid(), signal.SIGUSR2)
    assert guard.wait_for_notice(5) is not None
    guard.stop()
    assert signal.getsignal(signal.SIGUSR2) is before


def test_signal_source_refuses_non_main_thread() -> None:
    import threading

    errors = []

    def arm() -> None:
        try:
            PreemptionGuard([SignalSource()]).start()
        except RuntimeError as exc:
            errors.append(str(exc))

    t = threading.Thread(target=arm)
    t.start()
    t.join()
    assert errors and "main thread" in errors[0]


def test_mixed_sources_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    with AwsImdsEmulator() as emu:
        monkeypatch.setenv("SPOTFLEET_NOTICE_SOURCES", f"signal:SIGTERM,{emu.source_spec()}")
        monkeypatch.setenv("SPOTFLEET_NOTICE_POLL_SECONDS", "0.05")
        with PreemptionGuard.from_env() as guard:
            assert [s.describe() for s in guard.sources] == ["signal:SIGTERM", f"aws:{emu.base_url}"]
            emu.schedule_preemption(9_999_999_999.0)
            notice = guard.wait_for_notice(10)
        assert notice is not None and notice.source == "aws"


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("signal:SIGTERM,ibm:http://x:1", "unknown source 'ibm'"),
        ("signal:SIGNOPE", "unknown or uncatchable signal"),
        ("signal:SIGKILL", "unknown or uncatchable signal"),
        ("aws:169.254.169.254", "needs an http(s)://host:port URL"),
        ("signal,signal:SIGTERM", "listed twice"),
    ],
)
def test_bad_sources_name_variable_and_fix(monkeypatch: pytest.MonkeyPatch, spec: str, fragment: str) -> None:
    monkeypatch.setenv("SPOTFLEET_NOTICE_SOURCES", spec)
    with pytest.raises(NoticeConfigError) as info:
        PreemptionGuard.from_env()
    message = str(info.value)
    assert "SPOTFLEET_NOTICE_SOURCES" in message and fragment in message
    assert "e.g. SPOTFLEET_NOTICE_SOURCES=signal:SIGTERM" in message


def test_bad_grace_names_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPOTFLEET_GRACE_SECONDS", "half a minute")
    with pytest.raises(ValueError, match="SPOTFLEET_GRACE_SECONDS"):
        PreemptionGuard.from_env()
    monkeypatch.setenv("SPOTFLEET_GRACE_SECONDS", "-5")
    with pytest.raises(ValueError, match="SPOTFLEET_GRACE_SECONDS"):
        PreemptionGuard.from_env()


def test_default_is_sigterm() -> None:
    sources = parse_sources(None)
    assert [s.describe() for s in sources] == ["signal:SIGTERM"]
