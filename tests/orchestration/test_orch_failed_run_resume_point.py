"""A stage that fails for good: what its failure tells the operator about resuming.

Attempt 1 of the stage saves at steps 10 and 20 and crashes at step 25; attempts 2-4 restore
step 20 and crash again before their next save, so the last attempt's node commits nothing
itself. Until 2026-11-28 the last failure said "the re-execution resumes from the latest
checkpoint (step 0 in this attempt's nodes)" with ``last_checkpoint_step`` = 0 in its metadata,
and each node's log line read "last checkpoint None", while a re-execution resumed from step 20
(user audit: a failing stage under ``dagster-daemon``). A real Dagster run of the real asset
graph on the local fleet.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent


def test_a_failed_stage_names_the_checkpoint_a_re_execution_resumes_from(tmp_path):
    from dagster import DagsterEventType, DagsterInstance

    from assets import cost_tables as ct
    from infra.db.session import make_engine
    from pipelines.config import PipelineConfig
    from pipelines.definitions import build_definitions, pipeline_job_name
    from pipelines.resources import FleetResource, StatsDB

    var = tmp_path / "var"
    cfg = PipelineConfig.model_validate({
        "name": "crash", "provider": "local", "deadline_hours": 10, "checkpoint_uri": "checkpoints/crash",
        "schedule_cron": None,
        # real time: no market outage (no notice, no emergency save) during the test
        "market": {"seed": 4, "wall_seconds_per_market_hour": 3600},
        "stages": [{"name": "train", "script": str(HERE / "crash_after_restore.py"),
                    "args": ["--steps", "60", "--save-every", "10", "--crash-at", "25"],
                    "work_hours": 1, "resources": {"zones": ["us-east-1f", "us-west-2b"]}}]})
    db = f"sqlite:///{var / 'stats.db'}"
    defs = build_definitions([cfg], include_gfs=False, resources={
        "stats_db": StatsDB(url=db, var_dir=str(var)), "fleet": FleetResource(var_dir=str(var))})
    with DagsterInstance.ephemeral() as instance:
        res = defs.resolve_job_def(pipeline_job_name("crash")).execute_in_process(
            instance=instance, raise_on_error=False)
        assert not res.success
        failures = [e for e in instance.all_logs(res.run_id, of_type=DagsterEventType.STEP_FAILURE)
                    if e.step_key == "crash__train_train"]
        logs = [e.user_message for e in instance.all_logs(res.run_id) if e.user_message]
    assert len(failures) == 1
    data = failures[0].dagster_event.step_failure_data.user_failure_data
    text, meta = data.description, data.metadata
    assert "This was the last attempt (4 of 4" in text
    # what a re-execution resumes from: the group's latest committed checkpoint
    d = ct.load(make_engine(db), "crash")
    assert d.checkpoints["step"].max() == 20
    assert list(d.sessions.sort_values("attempt")["first_step"].fillna(0).astype(int)) == [0, 20, 20, 20]
    assert "the re-execution resumes from the latest checkpoint (step 20," in text, text
    assert "step 0" not in text
    assert meta["last_checkpoint_step"].value == 20
    # the node's log line: it committed nothing, it had resumed step 20 (not "last checkpoint None")
    crashed = [m for m in logs if "FAILED in" in m and "exit code 3" in m]
    assert len(crashed) == 4 and all("last checkpoint None" not in m for m in crashed)
    assert sum("no checkpoint committed by this node, it resumed from step 20" in m for m in crashed) == 3
