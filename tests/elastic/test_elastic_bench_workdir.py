"""benchmarks/bench_elastic.py removes its work folder after a completed run and keeps it
(printing where) with --keep or on failure. The benchmark itself is not run here."""

from __future__ import annotations

import importlib.util
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def bench(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # mkdtemp's default folder
    spec = importlib.util.spec_from_file_location("bench_elastic", ROOT / "benchmarks" / "bench_elastic.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _fake_measure(seen: list[Path], code: int):
    def measure(args, tmp: Path) -> int:
        assert tmp.is_dir() and tmp.name.startswith("bench-elastic-")
        (tmp / "work").mkdir()
        (tmp / "work" / "node0.log").write_text("x")
        seen.append(tmp)
        return code
    return measure


@pytest.mark.parametrize(("argv", "code", "kept", "why"), [
    ([], 0, False, None),
    (["--keep"], 0, True, "--keep"),
    ([], 1, True, "the run failed or was stopped"),  # the stage did not complete
    (["--keep"], 1, True, "the run failed or was stopped"),
])
def test_main_removes_the_work_folder_unless_kept_or_failed(bench, monkeypatch, capsys, argv, code, kept, why):
    seen: list[Path] = []
    monkeypatch.setattr(bench, "measure", _fake_measure(seen, code))
    before = signal.getsignal(signal.SIGTERM)
    assert bench.main(argv) == code
    assert signal.getsignal(signal.SIGTERM) is before  # main's handler is its own
    [tmp] = seen
    assert tmp.exists() is kept
    err = capsys.readouterr().err
    if kept:
        assert f"work folder kept ({why}): {tmp}" in err
    else:
        assert "kept" not in err


def test_a_timeout_or_error_keeps_the_folder_and_says_where(bench, capsys):
    seen: list[Path] = []

    def times_out(tmp: Path) -> int:
        seen.append(tmp)
        raise SystemExit("bench_elastic: a 4-node group did not happen within 600 s")

    with pytest.raises(SystemExit):
        bench.in_workdir(times_out)
    assert seen[0].is_dir()
    assert f"work folder kept (the run failed or was stopped): {seen[0]}" in capsys.readouterr().err

    def breaks(tmp: Path) -> int:
        seen.append(tmp)
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        bench.in_workdir(breaks, keep=False)
    assert seen[1].is_dir()


def test_sigterm_unwinds_and_says_where_the_folder_is(tmp_path):
    """`timeout 300 python benchmarks/bench_elastic.py` sends SIGTERM: the folder stays and
    its path is printed (before, the process died silently and left it unnamed)."""
    script = (
        "import importlib.util, sys, tempfile, time\n"
        f"tempfile.tempdir = {str(tmp_path)!r}\n"
        f"spec = importlib.util.spec_from_file_location('b', {str(ROOT / 'benchmarks' / 'bench_elastic.py')!r})\n"
        "mod = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(mod)\n"
        "def measure(args, tmp):\n"
        "    print('ready', flush=True)\n"
        "    time.sleep(120)\n"
        "    return 0\n"
        "assert hasattr(mod, 'measure'), 'no measure() to stub: this would run the benchmark'\n"
        "mod.measure = measure\n"
        "sys.exit(mod.main([]))\n")
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM
    [tmp] = list(tmp_path.glob("bench-elastic-*"))
    assert f"work folder kept (the run failed or was stopped): {tmp}" in err
