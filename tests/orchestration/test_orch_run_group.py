"""Run groups of Dagster re-executions made through Dagster's Python API, without training.

``execute_job(reconstructable(...), reexecution_options=ReexecutionOptions(...))`` sets
``DagsterRun.root_run_id`` but no ``dagster/root_run_id`` tag (the UI sets both). A tiny job
whose op asks the project's own helpers what they see shows which runs a stage, the cost
report and the checks count as "this run", and where the local fleet's market clock starts.
"""

from __future__ import annotations

from dagster import (
    DagsterInstance,
    ReexecutionOptions,
    execute_job,
    in_process_executor,
    job,
    op,
    reconstructable,
)

from assets.cost_assets import ROOT_TAG, run_group
from assets.pipeline_assets import market_clock_start


@op
def ask(context) -> dict:
    return {"group": run_group(context), "clock": market_clock_start(context)}


@job(executor_def=in_process_executor)
def group_job():
    ask()


def test_a_second_re_execution_s_group_has_every_earlier_run_and_its_own_clock(tmp_path):
    target = reconstructable(group_job)
    seen, ids = {}, []

    def run(**kwargs) -> str:
        with execute_job(target, instance=instance, **kwargs) as result:
            assert result.success
            seen[result.run_id] = result.output_for_node("ask")
            ids.append(result.run_id)
            return result.run_id

    with DagsterInstance.local_temp(tempdir=str(tmp_path)) as instance:
        root = run()
        mid = run(reexecution_options=ReexecutionOptions(root))
        last = run(reexecution_options=ReexecutionOptions(mid))
        runs = {r: instance.get_run_by_id(r) for r in ids}
        # the situation this guards: the Python re-execution path records the root, not the tag
        assert runs[last].root_run_id == root and runs[mid].root_run_id == root
        assert ROOT_TAG not in runs[last].tags and ROOT_TAG not in runs[mid].tags
        starts = {r: instance.get_run_record_by_id(r).start_time for r in ids}
    # the second re-execution's group: root first, then both re-executions, oldest first
    assert seen[last]["group"] == [root, mid, last]
    assert seen[mid]["group"] == [root, mid]
    assert seen[root]["group"] == [root]
    # each run's market clock starts at that run's own start, not at the root's
    for rid, out in seen.items():
        assert out["clock"] == starts[rid]
    assert seen[last]["clock"] > seen[root]["clock"]


ENV_YAML, ENV_VAR = "SPOTFLEET_TEST_GROUP_YAML", "SPOTFLEET_TEST_GROUP_VAR"
TINY = {"name": "rg", "provider": "local", "deadline_hours": 48, "budget_usd": 40, "schedule_cron": None,
        "checkpoint_uri": "checkpoints/rg", "market": {"seed": 4, "wall_seconds_per_market_hour": 30},
        "stages": [{"name": "train", "script": "examples/train_example.py",
                    "args": ["--steps", "60", "--size", "tiny"], "work_hours": 0.01,
                    "resources": {"zones": ["us-east-1f", "us-east-1c"]}}]}


def define_train_job():
    """The real ``train_train`` asset behind a stand-in (empty) fleet plan: no market, no planner."""
    import os

    from dagster import AssetKey, Definitions, asset, define_asset_job

    from assets.pipeline_assets import _train_asset
    from pipelines.config import load_pipelines
    from pipelines.resources import FleetResource, StatsDB

    [cfg] = load_pipelines(os.environ[ENV_YAML])

    @asset(key=["rg", "fleet_plan"])
    def fleet_plan() -> dict:
        return {}

    train = _train_asset(cfg, cfg.stages[0], 0, AssetKey(["rg", "node_sessions"]))
    var = os.environ[ENV_VAR]
    return Definitions(assets=[fleet_plan, train],
                       jobs=[define_asset_job("rg_train", executor_def=in_process_executor)],
                       resources={"stats_db": StatsDB(url="", var_dir=var),
                                  "fleet": FleetResource(var_dir=var)}).resolve_job_def("rg_train")


def test_a_re_execution_of_a_completed_stage_launches_nothing(tmp_path, monkeypatch):
    """The root run completed the stage (recorded at step 60); a re-execution of it (Dagster's
    Python path: root_run_id set, no tag) must not launch and bill a node again."""
    import yaml
    from dagster._core.execution.api import execute_run

    from assets import cost_tables as ct
    from infra.db.recorder import record_attempt
    from infra.db.session import make_engine, upgrade

    cfg, var = tmp_path / "rg.yaml", tmp_path / "var"
    cfg.write_text(yaml.safe_dump({"pipelines": [TINY]}))
    monkeypatch.setenv(ENV_YAML, str(cfg))
    monkeypatch.setenv(ENV_VAR, str(var))
    monkeypatch.delenv("SPOTFLEET_DB_URL", raising=False)
    var.mkdir()
    eng = make_engine(f"sqlite:///{var / 'spotfleet.db'}")
    upgrade(eng)
    target = reconstructable(define_train_job)
    (tmp_path / "home").mkdir()
    with DagsterInstance.local_temp(tempdir=str(tmp_path / "home")) as instance:
        job_def = target.get_definition()
        root = instance.create_run_for_job(job_def=job_def)
        record_attempt(eng, run_id=root.run_id, root_run_id=root.run_id, pipeline="rg", stage="train",
                       attempt=1, provider="local", status="completed", sessions=[], events=[],
                       started_at=1.0, ended_at=2.0, start_step=0, final_step=60, total_steps=60,
                       on_demand_price=lambda s: 3.06, error=None)
        rerun = instance.create_run_for_job(job_def=job_def, root_run_id=root.run_id, parent_run_id=root.run_id)
        result = execute_run(target, rerun, instance)
        assert result.success
        mats = [e.event_specific_data.materialization for e in result.all_events
                if e.event_type_value == "ASSET_MATERIALIZATION"]
        logs = [e.message for e in instance.all_logs(rerun.run_id) if e.user_message]
    [train] = [m for m in mats if m.asset_key.path == ["rg", "train_train"]]
    md = {k: v.value for k, v in train.metadata.items()}
    assert md["already_complete"] is True and md["final_step"] == 60
    assert md["completed_in"] == f"run {root.run_id[:8]} attempt 1, final step 60"
    assert md["this_attempt_sessions"] == 0 and md["this_attempt_cost_usd"] == 0.0
    assert any("already complete in this run group" in m and "no node was launched" in m for m in logs)
    # nothing launched: no new attempt recorded, no node session billed
    data = ct.load(eng, "rg")
    assert list(data.attempts["run_id"]) == [root.run_id] and data.sessions.empty


def test_the_last_lost_attempt_says_it_was_the_last_and_what_to_do():
    """Until 2026-11-28 every lost attempt, the last included, said "Dagster retries it"."""
    from assets.pipeline_assets import TRAIN_RETRY, lost_attempt_message

    n = TRAIN_RETRY.max_retries
    first = lost_attempt_message("pretrain", 1, n, "node group lost", 120)
    assert "Dagster retries it (attempt 2 of 4" in first and "last attempt" not in first
    last = lost_attempt_message("pretrain", n + 1, n, "node group lost", 350)
    assert "Dagster retries it" not in last
    assert f"This was the last attempt ({n + 1} of {n + 1}, RetryPolicy max_retries={n})" in last
    assert "Re-execute the run from failure" in last and "resumes from the latest checkpoint (step 350" in last
