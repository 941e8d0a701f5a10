"""A hung node in a real Dagster run on the local fleet: the progress watchdog kills it,
the DB records it failed, and the stage completes on a relaunch resumed from its
checkpoint (before the watchdog the run waited until an operator terminated it)."""

from __future__ import annotations

import contextlib
import os
import signal
import threading

import pytest
from dagster import DagsterInstance

from pipelines.config import parse_pipelines
from pipelines.definitions import build_definitions, pipeline_job_name
from pipelines.resources import FleetResource, StatsDB

pytestmark = pytest.mark.slow


def test_hung_node_is_killed_and_the_stage_completes_from_its_checkpoint(tmp_path):
    from infra.db.models import NodeSessionRecord
    from infra.db.recorder import read_table

    pipeline = {
        "name": "hung", "provider": "local", "deadline_hours": 48, "checkpoint_uri": "checkpoints/h",
        "market": {"seed": 4, "wall_seconds_per_market_hour": 30, "cloud": "signal"},
        "stages": [{
            "name": "only", "script": "tests/orchestration/hang_after_first_checkpoint.py",
            "args": ["--steps", "100", "--seed", "1", "--size", "tiny", "--step-sleep", "0.03",
                     "--periodic-every", "20", "--progress-every", "5"],
            "work_hours": 2.0, "resources": {"zones": ["us-east-1f"], "spot": False},
            "env": {"SPOTFLEET_TEST_HANG_MARKER": str(tmp_path / "hung-once")},
            "stall_timeout_seconds": 3, "max_relaunches": 1,
        }],
    }
    [cfg] = parse_pipelines({"pipelines": [pipeline]})
    var = tmp_path / "var"
    stats = StatsDB(url="", var_dir=str(var))
    defs = build_definitions([cfg], include_gfs=False,
                             resources={"stats_db": stats, "fleet": FleetResource(var_dir=str(var))})
    out: dict = {}
    with DagsterInstance.ephemeral() as instance:
        def run() -> None:
            out["result"] = defs.resolve_job_def(pipeline_job_name(cfg.name)).execute_in_process(
                instance=instance, raise_on_error=False)

        t = threading.Thread(target=run, daemon=True)
        t.start()
        t.join(timeout=150)
        if t.is_alive():  # the old code: the stage waits on the stopped node forever
            with contextlib.suppress(OSError, ValueError):  # leave no stopped process behind
                os.killpg(int((tmp_path / "hung-once").read_text()), signal.SIGKILL)
            t.join(timeout=60)
            pytest.fail("the run never noticed its SIGSTOPped node (no progress watchdog)")
        result = out["result"]
        logs = [e.user_message for e in instance.all_logs(result.run_id)]
    assert (tmp_path / "hung-once").exists(), "the first node stopped itself after a checkpoint"
    assert result.success
    assert any("stalled: no progress for" in m and "(limit 3 s); killed and relaunched" in m
               for m in logs)
    s = read_table(stats.engine(), NodeSessionRecord, cfg.name).sort_values("launched_at")
    first, last = s.iloc[0], s.iloc[-1]
    assert first["end_reason"] == "failed" and first["last_checkpoint_step"] > 0
    assert first["ended_at"] is not None  # billed up to the kill
    assert last["end_reason"] == "completed" and last["last_step"] == 100
    assert s.iloc[1]["first_step"] == first["last_checkpoint_step"]  # resumed, not restarted
    assert s["attempt"].nunique() == 1  # relaunched inside the attempt, no Dagster retry
