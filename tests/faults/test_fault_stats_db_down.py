"""The statistics DB (PostgreSQL) dies while a stage trains, and comes back later.

Real parts: a PRIVATE PostgreSQL server (initdb / pg_ctl of the system's binaries, on a
free port under a temp folder; the system's server on 5432 is never touched), the real
Dagster job of a one-stage pipeline on the local fleet (``examples/train_example.py``,
an injected preemption at step 30), a re-execution from failure through Dagster's API.

While the stage trains (step 40 of 80, after the preemption and the relaunch) the test
SIGKILLs the server and its backends (``killed``), or SIGSTOPs them (``frozen``: the
connections stay open and nothing answers; before, the step then waited forever in the
record's first query; now each DB call of the stage is waited for at most
``SPOTFLEET_DB_TIMEOUT_SECONDS``, 3 s here). Training is not affected (it does not use the DB):
the stage completes and commits its final checkpoint. Then its attempt has to be
recorded. Before: the write failed with a bare ``OperationalError``, Dagster retried the
step 3 times (each failing at once on the same error) and the attempt's node sessions,
its preemption and its costs were lost for good; a re-execution found no completed
attempt and launched (and billed) a node again. Now the write is retried with backoff
(``SPOTFLEET_DB_RECORD_RETRY_SECONDS``, 2 s here), then kept in ``<var>/db_pending/``;
the step fails saying which DB, that nothing was launched and where the record waits.
With the server back, the re-execution writes the pending record first, finds the stage
complete and launches nothing.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

ENV_YAML = "SPOTFLEET_TEST_DBDOWN_YAML"
ENV_VAR_DIR = "SPOTFLEET_TEST_DBDOWN_VAR"
STEPS = 80
PIPELINE = {
    "name": "dbdown", "provider": "local", "deadline_hours": 48, "checkpoint_uri": "checkpoints/dbdown",
    "schedule_cron": None,
    "market": {"seed": 4, "wall_seconds_per_market_hour": 3600, "cloud": "signal", "grace_seconds": 5,
               "inject_preemptions_at_steps": {"train": [30]}},
    "stages": [{"name": "train", "script": "examples/train_example.py",
                "args": ["--steps", str(STEPS), "--seed", "1", "--size", "tiny", "--step-sleep", "0.05",
                         "--periodic-every", "20"],
                "work_hours": 0.01, "resources": {"zones": ["us-east-1f", "us-east-1c", "us-west-2b"]}}],
}


def _pg_bin() -> Path | None:
    for d in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (d / "initdb").exists() and (d / "pg_ctl").exists():
            return d
    found = shutil.which("initdb")
    return Path(found).parent if found else None


class PrivatePostgres:
    """A throwaway PostgreSQL server of our own: ``kill()`` SIGKILLs it (postmaster and its
    backends, by PID), ``start()`` starts it again on the same port and data folder."""

    def __init__(self, bindir: Path, root: Path, port: int):
        self.bin, self.root, self.port = bindir, root, port
        self.data = root / "data"
        self.user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []

    def _run(self, *args: str) -> None:
        proc = subprocess.run([*self.user, *args], capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            raise RuntimeError(f"{args[0]} failed: {proc.stdout[-1000:]}{proc.stderr[-1000:]}")

    def init(self) -> None:
        if self.user:
            shutil.chown(self.root, "postgres")
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres")
        self.start()
        subprocess.run([str(self.bin / "psql"), "-q", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres",
                        "-c", "CREATE DATABASE spotfleet"], check=True, capture_output=True, timeout=60)

    def start(self) -> None:
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-w", "-l", str(self.root / "log"),
                  "-o", f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1", "start")

    def kill(self) -> None:
        self._signal_all(signal.SIGKILL)

    def _signal_all(self, sig: signal.Signals) -> None:
        pid = int((self.data / "postmaster.pid").read_text().split()[0])
        kids = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
        for p in [pid, *map(int, kids.split())]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, sig)

    def freeze(self) -> None:
        """SIGSTOP the server and its backends: connections stay open, nothing answers."""
        self._signal_all(signal.SIGSTOP)

    def thaw(self) -> None:
        self._signal_all(signal.SIGCONT)

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            subprocess.run([*self.user, str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate",
                            "stop"], capture_output=True, timeout=60)

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/spotfleet"


@pytest.fixture
def private_pg() -> Iterator[PrivatePostgres]:
    bindir = _pg_bin()
    if bindir is None:
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) not installed")
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        pytest.skip("running as root without runuser: initdb refuses root")
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    root = Path(tempfile.mkdtemp(prefix="spotfleet-pg-"))
    pg = PrivatePostgres(bindir, root, port)
    try:
        try:
            pg.init()
        except (RuntimeError, subprocess.SubprocessError, KeyError, LookupError) as exc:
            pytest.skip(f"cannot start a private PostgreSQL server: {exc}")
        yield pg
    finally:
        from infra.db.session import dispose_engines

        dispose_engines()
        with contextlib.suppress(Exception):
            pg.thaw()
        pg.stop()
        shutil.rmtree(root, ignore_errors=True)


def define_dbdown_job():
    """The reconstructable target: the job of the YAML at $ENV_YAML, as the code location builds it."""
    from pipelines.config import load_pipelines
    from pipelines.definitions import build_definitions, pipeline_job_name
    from pipelines.resources import FleetResource, StatsDB

    var = os.environ[ENV_VAR_DIR]
    defs = build_definitions(load_pipelines(os.environ[ENV_YAML]), include_gfs=False,
                             resources={"stats_db": StatsDB(url="", var_dir=var),
                                        "fleet": FleetResource(var_dir=var)})
    return defs.resolve_job_def(pipeline_job_name("dbdown"))


def _fault_at_step(fault, var: Path, step: int, done: threading.Event, killed: list[float]) -> None:
    from checkpointing.events import read_events

    while not done.is_set():
        for f in (var / "fleet").glob("dbdown/*/train/attempt-1/events/*.jsonl"):
            if any(e.kind in ("progress", "save_committed") and int(e.data.get("step") or 0) >= step
                   for e in read_events(f)):
                fault()
                killed.append(time.time())
                return
        time.sleep(0.05)


def _failures(result, step_key: str) -> list[str]:
    """Each STEP_FAILURE's text, causes included (after the last retry Dagster's own message
    is "Exceeded max_retries of 3" and the step's error is its cause)."""
    out = []
    for e in result.all_events:
        if e.event_type_value == "STEP_FAILURE" and e.step_key == step_key:
            err, parts = e.event_specific_data.error, []
            while err is not None:
                parts.append(err.message)
                err = err.cause or err.context
            out.append("\n".join(parts))
    return out


@pytest.mark.parametrize("fault", ["killed", "frozen"])
def test_db_lost_mid_stage_keeps_the_record_and_the_re_execution_launches_nothing(
        fault: str, private_pg: PrivatePostgres, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``killed``: SIGKILL (connections refused). ``frozen``: SIGSTOP (connections open,
    no answer; before, the step waited forever in the record's first query)."""
    from dagster import DagsterInstance, ReexecutionOptions, execute_job, reconstructable

    from assets import cost_tables as ct
    from checkpointing.manifest import list_checkpoints
    from checkpointing.stores.local import LocalStore
    from infra.db.session import dispose_engines, make_engine

    cfg, var = tmp_path / "dbdown.yaml", tmp_path / "var"
    cfg.write_text(yaml.safe_dump({"pipelines": [PIPELINE]}, sort_keys=False))
    monkeypatch.setenv(ENV_YAML, str(cfg))
    monkeypatch.setenv(ENV_VAR_DIR, str(var))
    monkeypatch.setenv("SPOTFLEET_DB_URL", private_pg.url)
    monkeypatch.setenv("SPOTFLEET_DB_RECORD_RETRY_SECONDS", "4")
    monkeypatch.setenv("SPOTFLEET_DB_TIMEOUT_SECONDS", "3")
    monkeypatch.delenv("SPOTFLEET_VAR_DIR", raising=False)
    from dagster._core.definitions.reconstruct import ReconstructableJob

    # the reconstructed job is cached per process: built for an earlier test's YAML and var dir
    ReconstructableJob.get_definition.cache_clear()
    ReconstructableJob.get_repository_definition.cache_clear()
    job = reconstructable(define_dbdown_job)
    (tmp_path / "dagster_home").mkdir()
    done, killed = threading.Event(), []
    act = private_pg.kill if fault == "killed" else private_pg.freeze
    watcher = threading.Thread(target=_fault_at_step, args=(act, var, 40, done, killed), daemon=True)
    watcher.start()
    # a safety valve, not a timing assertion: code that waits forever on the frozen server
    # gets it back after 10 minutes, so this test fails on its assertions instead of hanging
    valve = threading.Timer(600, private_pg.thaw)
    valve.daemon = True
    if fault == "frozen":
        valve.start()
    with DagsterInstance.local_temp(tempdir=str(tmp_path / "dagster_home")) as instance:
        try:
            root = execute_job(job, instance=instance)
        finally:
            done.set()
            valve.cancel()
        assert killed, "the DB fault was never injected: the stage did not reach step 40"
        assert not root.success
        msgs = _failures(root, "dbdown__train_train")
        assert msgs, [e.event_type_value for e in root.all_events]
        last = msgs[-1]
        # the failure names the DB (no password), says nothing was launched and where the record waits
        assert f"statistics DB postgresql+psycopg://***@127.0.0.1:{private_pg.port}/spotfleet does not answer" \
            in last, last
        assert ("Connection refused" if fault == "killed" else "DBNotAnswering: no answer within 3 s") in last, last
        assert "nothing was launched" in last and "1 record(s) of earlier attempts wait in" in last, last
        assert "re-execute the run from failure" in last, last
        pending = sorted((var / "db_pending").glob("*.json"))
        assert [p.name for p in pending] == [f"dbdown__train__{root.run_id}__a1.json"]
        # training was not affected: the final checkpoint is committed
        store = LocalStore(var / "checkpoints" / "dbdown" / "train" / root.run_id)
        assert max(i.step for i in list_checkpoints(store)) == STEPS

        if fault == "killed":
            private_pg.start()
        else:
            private_pg.thaw()
        dispose_engines()
        options = ReexecutionOptions.from_failure(run_id=root.run_id, instance=instance)
        with execute_job(job, instance=instance, reexecution_options=options) as rerun:
            assert rerun.success, _failures(rerun, "dbdown__train_train")
            rerun_id = rerun.run_id

    assert not list((var / "db_pending").glob("*.json"))  # written, then deleted
    data = ct.load(make_engine(private_pg.url), "dbdown")
    a = data.attempts
    # the root's attempt as it ended (completed, every session and the injected preemption);
    # the re-execution found the stage complete and recorded no attempt of its own
    assert list(zip(a["run_id"], a["attempt"], a["status"], a["final_step"], strict=True)) == [
        (root.run_id, 1, "completed", STEPS)]
    s = data.sessions
    assert set(s["run_id"]) == {root.run_id} and len(s) >= 2
    assert "preempted" in set(s["end_reason"])
    assert rerun_id not in set(s["run_id"])  # no node launched, nothing billed
