"""The code location loads: keys per pipeline, automation, schedule, retries, checks."""

from __future__ import annotations

import os
import subprocess
import sys

import yaml
from dagster import AssetKey, AutomationConditionSensorDefinition, Backoff

from pipelines.config import EXAMPLE_PIPELINES, load_pipelines, parse_pipelines
from pipelines.definitions import build_definitions, pipeline_job_name


def _two_pipelines():
    raw = yaml.safe_load(EXAMPLE_PIPELINES.read_text())["pipelines"][0]
    other = dict(raw, name="nightly",  # one stage "train": fault injections named the example's stages
                 market={**raw["market"], "inject_preemptions_at_steps": {}, "lose_attempt_at_step": {}})
    other["stages"] = [dict(raw["stages"][0], name="train")]
    return parse_pipelines({"pipelines": [raw, other]})


def test_every_pipeline_gets_its_own_prefixed_graph():
    defs = build_definitions(_two_pipelines(), include_gfs=False)
    keys = set(defs.resolve_asset_graph().get_all_asset_keys())
    for name in ("spot_market", "preemption_stats", "preemption_forecast", "fleet_plan",
                 "train_pretrain", "train_finetune", "cost_report", "node_sessions"):
        assert AssetKey(["demo", name]) in keys
    assert AssetKey(["nightly", "train_train"]) in keys
    assert AssetKey(["nightly", "train_pretrain"]) not in keys
    graph = defs.resolve_asset_graph()
    # training stages in dependency order, after the plan
    assert AssetKey(["demo", "train_pretrain"]) in graph.get(AssetKey(["demo", "train_finetune"])).parent_keys
    assert AssetKey(["demo", "fleet_plan"]) in graph.get(AssetKey(["demo", "train_pretrain"])).parent_keys
    job = defs.resolve_job_def(pipeline_job_name("demo"))
    assert job.asset_layer.selected_asset_keys == {
        AssetKey(["demo", n]) for n in ("spot_market", "preemption_stats", "preemption_forecast", "fleet_plan",
                                        "train_pretrain", "train_finetune", "cost_report")}


def test_automation_sensor_schedule_retries_and_checks_are_declared():
    [cfg] = load_pipelines(EXAMPLE_PIPELINES)
    defs = build_definitions([cfg], include_gfs=False)
    graph = defs.resolve_asset_graph()
    for name in ("preemption_stats", "preemption_forecast", "cost_report"):
        assert graph.get(AssetKey(["demo", name])).automation_condition is not None, name
    assert graph.get(AssetKey(["demo", "train_pretrain"])).automation_condition is None
    sensors = list(defs.sensors or [])
    assert any(isinstance(s, AutomationConditionSensorDefinition) for s in sensors)
    assert any(s.cron_schedule == cfg.schedule_cron for s in defs.schedules or [])
    train = next(a for a in defs.assets if AssetKey(["demo", "train_pretrain"]) in getattr(a, "keys", ()))
    policy = train.op.retry_policy
    assert policy.max_retries >= 1 and policy.backoff == Backoff.EXPONENTIAL
    check_names = {c.name for cd in defs.asset_checks for c in cd.check_specs}
    assert {"cost_reconciles_with_node_sessions", "within_budget", "enough_samples",
            "latest_checkpoint_recent"} <= check_names


def test_dagster_cli_validates_the_code_location(tmp_path):
    env = dict(os.environ, DAGSTER_HOME=str(tmp_path), SPOTFLEET_VAR_DIR=str(tmp_path / "var"))
    out = subprocess.run([sys.executable, "-m", "dagster", "definitions", "validate", "-m", "pipelines.definitions"],
                         capture_output=True, text=True, env=env, timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Validation successful" in out.stdout + out.stderr


def test_statistics_and_cost_report_refresh_when_a_run_lands():
    """Declarative automation: recording node sessions requests stats and cost report, once."""
    from dagster import AssetMaterialization, DagsterInstance, evaluate_automation_conditions

    [cfg] = load_pipelines(EXAMPLE_PIPELINES)
    defs = build_definitions([cfg], include_gfs=False)
    k = lambda n: AssetKey(["demo", n])  # noqa: E731
    with DagsterInstance.ephemeral() as instance:
        for name in ("spot_market", "preemption_stats", "preemption_forecast", "fleet_plan",
                     "train_pretrain", "train_finetune", "cost_report", "node_sessions"):
            instance.report_runless_asset_event(AssetMaterialization(k(name)))
        first = evaluate_automation_conditions(defs=defs, instance=instance)
        quiet = evaluate_automation_conditions(defs=defs, instance=instance, cursor=first.cursor)
        assert quiet.total_requested == 0  # nothing new landed
        # a training run records its node sessions (what train_<stage> reports)
        instance.report_runless_asset_event(AssetMaterialization(k("node_sessions")))
        landed = evaluate_automation_conditions(defs=defs, instance=instance, cursor=quiet.cursor)
        requested = {key for key in (k("preemption_stats"), k("preemption_forecast"), k("cost_report"))
                     if landed.get_num_requested(key)}
        # the forecast rides along in the same request (its upstream will be refreshed)
        assert requested == {k("preemption_stats"), k("preemption_forecast"), k("cost_report")}
        assert landed.get_num_requested(k("fleet_plan")) == 0  # plans and training never auto-run
        assert landed.get_num_requested(k("train_pretrain")) == 0
        # once they refreshed, nothing more is requested until the next run lands
        for name in ("preemption_stats", "preemption_forecast", "cost_report"):
            instance.report_runless_asset_event(AssetMaterialization(k(name)))
        follow = evaluate_automation_conditions(defs=defs, instance=instance, cursor=landed.cursor)
        assert follow.total_requested == 0
