"""Two re-executions of the same failed run at once (a double-clicked "Re-execute from
failure"): they share every stage's checkpoint prefix (``<checkpoint_uri>/<root run>``)
and lease job id.

Before: both trained. Each took the checkpoint lease from the other at its next launch,
so saves failed with ``LeaseLost``, nodes were relaunched resuming from the OTHER run's
checkpoints, and both runs were billed for the same steps -- and both "succeeded".
Now: the run created first trains; the other stops before launching any node, with a
message naming the running run. Real Dagster (one persistent instance, two run
processes), the real local fleet, real SQLite.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ENV_VAR_DIR = "SPOTFLEET_TEST_CRX_VAR"
PIPELINE = {
    "name": "crx", "provider": "local", "deadline_hours": 48, "checkpoint_uri": "checkpoints/crx",
    "schedule_cron": None,
    "market": {"seed": 4, "wall_seconds_per_market_hour": 30, "cloud": "signal", "grace_seconds": 2},
    "stages": [{"name": "train", "script": "examples/train_example.py",
                "args": ["--steps", "240", "--seed", "1", "--size", "tiny", "--step-sleep", "0.03",
                         "--periodic-every", "40", "--progress-every", "5"],
                "work_hours": 1.0, "resources": {"zones": ["us-east-1f", "us-east-1c", "us-west-2b"]}}],
}


def define_crx_job():
    from pipelines.config import parse_pipelines
    from pipelines.definitions import build_definitions, pipeline_job_name
    from pipelines.resources import FleetResource, StatsDB

    var = os.environ[ENV_VAR_DIR]
    [cfg] = parse_pipelines({"pipelines": [PIPELINE]})
    defs = build_definitions([cfg], include_gfs=False,
                             resources={"stats_db": StatsDB(url="", var_dir=var),
                                        "fleet": FleetResource(var_dir=var)})
    return defs.resolve_job_def(pipeline_job_name("crx"))


def _reexecute(root_id: str, barrier, out) -> None:
    """One run worker: re-execute ``root_id`` from failure in the shared instance."""
    from dagster import DagsterInstance, ReexecutionOptions, execute_job, reconstructable

    with DagsterInstance.get() as instance:
        options = ReexecutionOptions.from_failure(run_id=root_id, instance=instance)
        barrier.wait(timeout=120)
        with execute_job(reconstructable(define_crx_job), instance=instance,
                         reexecution_options=options) as r:
            out.put((r.run_id, r.success, [e.event_specific_data.error.message for e in r.all_events
                                           if e.event_type_value == "STEP_FAILURE"]))


def test_two_reexecutions_of_one_run_at_once_train_once(tmp_path, monkeypatch):
    from dagster import DagsterInstance, execute_job, reconstructable

    from assets import cost_tables as ct
    from infra.db.session import make_engine

    var = tmp_path / "var"
    (tmp_path / "home").mkdir()
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv(ENV_VAR_DIR, str(var))
    for k in ("SPOTFLEET_DB_URL", "SPOTFLEET_VAR_DIR", "SPOTFLEET_FORK_SERVER"):
        monkeypatch.delenv(k, raising=False)

    def terminate_after_first_checkpoint():  # the root fails: terminated mid-stage
        deadline = time.time() + 120
        while time.time() < deadline and not list(var.glob("checkpoints/crx/train/*/ckpt-*/MANIFEST.json")):
            time.sleep(0.1)
        os.kill(os.getpid(), signal.SIGINT)

    with DagsterInstance.get() as instance:
        threading.Thread(target=terminate_after_first_checkpoint, daemon=True).start()
        root = execute_job(reconstructable(define_crx_job), instance=instance)
        assert not root.success
        root_id = root.run_id

    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_reexecute, args=(root_id, barrier, out)) for _ in range(2)]
    for p in procs:
        p.start()
    results = [out.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(timeout=60)

    [(won, _, _)] = [r for r in results if r[1]]
    [(lost, _, [msg])] = [r for r in results if not r[1]]
    assert f"run {won} of the same run group (root {root_id}) is still running" in msg
    assert "Nothing was launched" in msg

    data = ct.load(make_engine(f"sqlite:///{var / 'spotfleet.db'}"), "crx")
    assert lost not in set(data.sessions["run_id"])  # the stopped run launched (billed) nothing
    mine = data.sessions[data.sessions["run_id"] == won]
    assert int(mine["last_step"].max()) == 240
    # no node of the winner failed (a LeaseLost save stopped a node and failed it)
    assert set(mine["end_reason"]) <= {"completed", "preempted"}
    ckpt_prefix = next(Path(var / "checkpoints" / "crx" / "train").iterdir())
    assert ckpt_prefix.name == root_id
