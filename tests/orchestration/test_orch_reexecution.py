"""A real Dagster re-execution from failure: the stored root run id and the group's report.

Run 1 (the root) of a one-stage pipeline on the local fleet fails for good: an injected
preemption at step 30 and an enforced budget too small for the relaunch stop the stage
(a ``Failure`` that disallows retries). The operator does what the message says — raises
``budget_usd`` in the pipeline YAML — and re-executes from failure through Dagster's API
(``execute_job(..., reexecution_options=ReexecutionOptions.from_failure(...))``, what the
UI's "Re-execute from failure" does): the re-execution reloads the code location, runs the
failed training step and the skipped cost report, and resumes from the root's checkpoint.

Checked: the re-execution's ``stage_attempts`` rows carry the root run id (migration 0004),
and both the cost report asset of the re-execution and ``spotfleet cost-report --run
<re-execution>`` cover the run group (root + re-execution) with exactly one first launch
(the root's first node; the re-execution's node resumed from a checkpoint is a restart).
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pytest
import yaml

pytestmark = pytest.mark.slow

ENV_YAML = "SPOTFLEET_TEST_REEXEC_YAML"
ENV_VAR_DIR = "SPOTFLEET_TEST_REEXEC_VAR"
PIPELINE = {
    "name": "rx", "provider": "local", "deadline_hours": 48, "budget_usd": 0.05, "enforce_budget": True,
    "checkpoint_uri": "checkpoints/rx", "schedule_cron": None,
    "market": {"seed": 4, "wall_seconds_per_market_hour": 30, "cloud": "signal", "grace_seconds": 2,
               "inject_preemptions_at_steps": {"train": [30]}},
    "stages": [{"name": "train", "script": "examples/train_example.py",
                "args": ["--steps", "60", "--seed", "1", "--size", "tiny", "--step-sleep", "0.03",
                         "--periodic-every", "20"],
                "work_hours": 0.01, "resources": {"zones": ["us-east-1f", "us-east-1c", "us-west-2b"]}}],
}


def define_rx_job():
    """The reconstructable target (module scope): the training job of the YAML at $ENV_YAML,
    built the way the code location builds it, as Dagster reloads it for a re-execution."""
    from pipelines.config import load_pipelines
    from pipelines.definitions import build_definitions, pipeline_job_name
    from pipelines.resources import FleetResource, StatsDB

    var = os.environ[ENV_VAR_DIR]
    defs = build_definitions(load_pipelines(os.environ[ENV_YAML]), include_gfs=False,
                             resources={"stats_db": StatsDB(url="", var_dir=var),
                                        "fleet": FleetResource(var_dir=var)})
    return defs.resolve_job_def(pipeline_job_name("rx"))


def _write(cfg: Path, **changes) -> None:
    cfg.write_text(yaml.safe_dump({"pipelines": [{**PIPELINE, **changes}]}, sort_keys=False))


def _failure_messages(result) -> list[tuple[str, str]]:
    return [(e.step_key, e.event_specific_data.error.message) for e in result.all_events
            if e.event_type_value == "STEP_FAILURE"]


def test_a_re_execution_from_failure_stores_its_root_and_reports_the_group(tmp_path, monkeypatch, capsys):
    from dagster import DagsterInstance, ReexecutionOptions, execute_job, reconstructable
    from dagster._core.definitions.reconstruct import ReconstructableJob

    from assets import cost_tables as ct
    from infra.db.session import make_engine
    from pipelines.cli import main

    cfg, var = tmp_path / "rx.yaml", tmp_path / "var"
    _write(cfg)
    monkeypatch.setenv(ENV_YAML, str(cfg))
    monkeypatch.setenv(ENV_VAR_DIR, str(var))
    for k in ("SPOTFLEET_DB_URL", "SPOTFLEET_VAR_DIR"):
        monkeypatch.delenv(k, raising=False)
    # set (not only deleted) so that teardown removes it: `spotfleet cost-report --pipelines`
    # below writes it into os.environ, which would leak into the next test
    monkeypatch.setenv("SPOTFLEET_PIPELINES", str(cfg))
    job = reconstructable(define_rx_job)
    (tmp_path / "dagster_home").mkdir()

    with DagsterInstance.local_temp(tempdir=str(tmp_path / "dagster_home")) as instance:
        root = execute_job(job, instance=instance)
        assert not root.success
        [(step, msg)] = _failure_messages(root)
        assert step == "rx__train_train" and "stopped by the budget" in msg and "NOT relaunched" in msg

        # the operator raises the budget in the YAML; Dagster reloads the code location for
        # the re-execution (here: drop the one-entry caches of the reconstructed job)
        _write(cfg, budget_usd=40)
        ReconstructableJob.get_definition.cache_clear()
        ReconstructableJob.get_repository_definition.cache_clear()
        options = ReexecutionOptions.from_failure(run_id=root.run_id, instance=instance)
        with execute_job(job, instance=instance, reexecution_options=options) as rerun:
            assert rerun.success, _failure_messages(rerun)
            run = instance.get_run_by_id(rerun.run_id)
            assert run.root_run_id == root.run_id and run.parent_run_id == root.run_id
            # from failure: only the failed training step and the skipped cost report ran again
            assert {e.step_key for e in rerun.all_events if e.event_type_value == "STEP_SUCCESS"} == {
                "rx__train_train", "rx__cost_report"}
            [report] = [e.event_specific_data.materialization for e in rerun.all_events
                        if e.event_type_value == "ASSET_MATERIALIZATION"
                        and e.event_specific_data.materialization.asset_key.path[-1] == "cost_report"]
            asset_md = {k: v.value for k, v in report.metadata.items()}

    data = ct.load(make_engine(f"sqlite:///{var / 'spotfleet.db'}"), "rx")
    a = data.attempts.sort_values("started_at")
    # every attempt row of the re-execution carries the root run id (migration 0004)
    assert list(zip(a["run_id"], a["root_run_id"], a["status"], strict=True)) == [
        (root.run_id, root.run_id, "failed"), (rerun.run_id, root.run_id, "completed")]
    assert ct.run_group(data, rerun.run_id) == [root.run_id, rerun.run_id]
    # in launch order: each run dates its sessions on its own market clock (anchored at its own
    # start), so the runs are ordered by their attempts' (wall-clock) start
    s = data.sessions.sort_values(["launch_order", "launched_at"])
    assert list(s["run_id"])[:1] == [root.run_id] and list(s["end_reason"])[:1] == ["preempted"]
    mine = s[s["run_id"] == rerun.run_id]
    # its first node that trained resumed from the root's last checkpoint (a node the market
    # preempted while it was still starting has no training event: first_step null)
    root_last = s.loc[s["run_id"] == root.run_id, "last_checkpoint_step"].max()
    trained = mine[mine["first_step"].notna()]
    assert root_last > 0 and len(trained) >= 1
    assert int(trained["first_step"].iloc[0]) == int(root_last)
    first = s[s["first_launch"].astype(bool)]
    assert list(first["run_id"]) == [root.run_id] and len(first) == 1  # exactly one first launch
    group = ct.for_runs(data, [root.run_id, rerun.run_id])
    launch = group.lines[group.lines["category"] == "launch"]
    assert set(launch["node_session_id"]) == set(first["id"])
    restart = group.lines[(group.lines["category"] == "restart")
                          & group.lines["node_session_id"].isin(mine["id"])]
    assert restart["dollars"].sum() > 0  # the re-execution's start-up is a restart, not a launch

    # the cost report asset materialized by the re-execution covers the group
    assert asset_md["run"] == f"{root.run_id}, {rerun.run_id}"
    assert asset_md["spend_usd"] == pytest.approx(group.sessions["cost_usd"].sum(), abs=1e-4)
    assert asset_md["launch_usd"] == pytest.approx(launch["dollars"].sum(), abs=1e-4)
    # ... and so does the CLI's report of the re-execution (run id prefix), in the root's folder
    capsys.readouterr()
    assert main(["cost-report", "--pipelines", str(cfg), "--db-url", f"sqlite:///{var / 'spotfleet.db'}",
                 "--var-dir", str(var), "--pipeline", "rx", "--run", rerun.run_id[:8]]) == 0
    out = capsys.readouterr().out
    assert f"rx, run {root.run_id[:8]}, {rerun.run_id[:8]}: spend ${group.sessions['cost_usd'].sum():.2f}" in out
    table = pd.read_csv(var / "reports" / "rx" / "runs" / root.run_id / "cost_report.csv")
    assert table["spend_usd"].sum() == pytest.approx(group.sessions["cost_usd"].sum(), rel=1e-9)
    assert table["launch_usd"].sum() == pytest.approx(launch["dollars"].sum(), rel=1e-9)
