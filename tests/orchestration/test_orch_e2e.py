"""End to end, in-process: the whole graph on the local fleet with injected preemptions.

One run of a two-stage pipeline (module fixture) backs several assertions:
stages finish by RESUMING from checkpoints (never from step 0 after the first launch),
a whole lost attempt is retried by Dagster's RetryPolicy and resumes from the latest
checkpoint, events land in the statistics DB, the cost report reconciles.
A second, single-stage run on PostgreSQL shows the provider giving up (relaunch budget
exhausted) and Dagster retrying from the checkpoint.
"""

from __future__ import annotations

import pytest
from dagster import DagsterInstance

from pipelines.config import parse_pipelines
from pipelines.definitions import build_definitions, pipeline_job_name
from pipelines.resources import FleetResource, StatsDB

pytestmark = pytest.mark.slow


def _stage(name, steps, seed, periodic, after=None, **extra):
    s = {"name": name, "script": "examples/train_example.py",
         "args": ["--steps", str(steps), "--seed", str(seed), "--size", "tiny", "--step-sleep", "0.03",
                  "--periodic-every", str(periodic), "--progress-every", "5"],
         "work_hours": 2.0,
         "resources": {"zones": ["us-east-1f", "us-east-1c", "us-west-2b"]}}
    if after:
        s["after"] = after
    s.update(extra)
    return s


def _run(tmp_path, pipeline: dict, db_url: str | None = None):
    [cfg] = parse_pipelines({"pipelines": [pipeline]})
    var = tmp_path / "var"
    stats = StatsDB(url=db_url or "", var_dir=str(var))
    defs = build_definitions([cfg], include_gfs=False,
                             resources={"stats_db": stats, "fleet": FleetResource(var_dir=str(var))})
    with DagsterInstance.ephemeral() as instance:
        result = defs.resolve_job_def(pipeline_job_name(cfg.name)).execute_in_process(
            instance=instance, raise_on_error=False)
        logs = [e.user_message for e in instance.all_logs(result.run_id)]
    return cfg, stats, result, logs, var


def _tables(stats: StatsDB, pipeline: str):
    from infra.db.models import (
        CheckpointRecord,
        CostLine,
        NodeSessionRecord,
        PreemptionEvent,
        StageAttempt,
    )
    from infra.db.recorder import read_table

    eng = stats.engine()
    return {m.__tablename__: read_table(eng, m, pipeline)
            for m in (StageAttempt, NodeSessionRecord, PreemptionEvent, CheckpointRecord, CostLine)}


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    pipeline = {
        "name": "e2e", "provider": "local", "deadline_hours": 48, "checkpoint_uri": "checkpoints/e2e",
        "market": {"seed": 4, "wall_seconds_per_market_hour": 30, "cloud": "signal", "grace_seconds": 3,
                   "hours": 240,
                   "inject_preemptions_at_steps": {"pretrain": [60], "finetune": [40]},
                   "lose_attempt_at_step": {"pretrain": 140}},
        "stages": [_stage("pretrain", 200, 1, 50), _stage("finetune", 100, 2, 25, after=["pretrain"])],
    }
    return _run(tmp_path_factory.mktemp("e2e"), pipeline)


def _assert_resumes(sessions, checkpoints):
    """Each node after the first resumes from the latest checkpoint committed before it launched.

    Nodes preempted while still starting (no training event: ``first_step`` is null) did no work.
    """
    sessions = sessions[sessions["first_step"].notna()].sort_values("launched_at")
    assert len(sessions) >= 2
    first = sessions.iloc[0]
    assert first["first_step"] == 0
    for _, s in sessions.iloc[1:].iterrows():
        before = checkpoints[checkpoints["committed_at"] < s["launched_at"]]
        latest = int(before["step"].max())
        assert latest > 0
        assert s["first_step"] == latest, (s["node_id"], s["first_step"], latest)


def test_stages_finish_by_resuming_not_restarting(demo_run):
    cfg, stats, result, logs, _ = demo_run
    assert result.success
    t = _tables(stats, cfg.name)
    attempts = t["stage_attempts"]
    done = attempts[attempts["status"] == "completed"].set_index("stage")
    assert done.loc["pretrain", "final_step"] == 200 and done.loc["finetune", "final_step"] == 100
    for stage in ("pretrain", "finetune"):
        sessions = t["node_sessions"][t["node_sessions"]["stage"] == stage]
        assert len(sessions) >= 2  # at least one preemption -> relaunch
        _assert_resumes(sessions, t["checkpoints"][t["checkpoints"]["stage"] == stage])
    # the preemptions, notices and emergency saves streamed back through Pipes into the run log
    text = "\n".join(m for m in logs if m)
    assert "PREEMPTED in" in text and "resumed from step" in text and "external process successfully opened dagster pipes" in text


def test_lost_attempt_is_retried_by_dagster_and_resumes_from_the_checkpoint(demo_run):
    cfg, stats, result, logs, _ = demo_run
    t = _tables(stats, cfg.name)
    pre = t["stage_attempts"][t["stage_attempts"]["stage"] == "pretrain"].sort_values("attempt")
    assert list(pre["status"]) == ["failed", "completed"]
    ck = t["checkpoints"]
    a1_ckpt = int(ck[(ck["stage"] == "pretrain") & (ck["attempt"] == 1)]["step"].max())
    assert 0 < a1_ckpt < 200
    sessions = t["node_sessions"][t["node_sessions"]["stage"] == "pretrain"]
    a1_last = int(sessions[sessions["attempt"] == 1]["last_step"].max())
    assert a1_last >= 140  # attempt 1 got past the fault point before its node group was lost
    # the retry resumed from attempt 1's latest checkpoint: never further back than it, never
    # ahead of what attempt 1 trained (a save committed in the very instant of the kill may
    # be newer than the last save event that reached the DB)
    start = int(pre.iloc[1]["start_step"])
    assert a1_ckpt <= start <= a1_last
    assert sessions[sessions["attempt"] == 2]["first_step"].min() == start
    retries = [e for e in result.all_events if e.event_type_value == "STEP_UP_FOR_RETRY"]
    assert len(retries) == 1


def test_events_land_in_the_db_and_the_cost_report_reconciles(demo_run):
    cfg, stats, result, _, var = demo_run
    t = _tables(stats, cfg.name)
    assert len(t["preemption_events"]) >= 2
    assert (t["preemption_events"]["notice_at"].notna()).all()
    # the injected notices (pretrain step 60, finetune step 40) are recorded as injections: billed
    # preemptions, but not the market's in the statistics the forecast and the plan read
    ns = t["node_sessions"]
    inj = ns[ns["injected"].astype(bool)]
    # (at least one: an injection finds no running node when the market preempted it first)
    assert len(inj) >= 1 and (inj["end_reason"] == "preempted").all()
    from fleet.stats.preemption import session_stats
    from infra.db.recorder import node_sessions_as_dataclasses

    st = session_stats(node_sessions_as_dataclasses(stats.engine(), cfg.name))
    assert sum(z.injected_preemptions for z in st) == len(inj)
    assert sum(z.preemptions for z in st) == int((ns["end_reason"] == "preempted").sum()) - len(inj)
    assert set(t["checkpoints"]["kind"]) >= {"periodic", "emergency"}
    from assets.checks import reconcile
    from assets.cost_tables import session_costs

    lines, sessions = reconcile(stats.engine(), cfg.name)
    assert lines == pytest.approx(sessions, rel=1e-9) and sessions > 0
    # checks are not planned in the training job (a check whose upstream step failed would show
    # as "execution failed"); the <pipeline>__checks job evaluates them on the latest run
    assert not [e for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
    from pipelines.definitions import checks_job_name

    defs = build_definitions([cfg], include_gfs=False,
                             resources={"stats_db": stats, "fleet": FleetResource(var_dir=str(var))})
    with DagsterInstance.ephemeral() as instance:
        checked = defs.resolve_job_def(checks_job_name(cfg.name)).execute_in_process(instance=instance)
    evals = {(e.event_specific_data.asset_key.path[-1], e.event_specific_data.check_name): e.event_specific_data
             for e in checked.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"}
    assert evals[("cost_report", "cost_reconciles_with_node_sessions")].passed is True
    assert evals[("train_pretrain", "latest_checkpoint_recent")].passed is True
    assert evals[("train_finetune", "latest_checkpoint_recent")].passed is True
    # the pretrain asset reports the whole stage: both attempts, the lost node group, all the cost
    mat = next(e.event_specific_data.materialization for e in result.all_events
               if e.event_type_value == "ASSET_MATERIALIZATION"
               and e.event_specific_data.materialization.asset_key.path[-1] == "train_pretrain")
    md = {k: getattr(v, "value", v) for k, v in mat.metadata.items()}
    pre = t["node_sessions"][t["node_sessions"]["stage"] == "pretrain"]
    assert md["attempts"] == 2 and md["lost_attempts"] == 1
    assert md["node_sessions"] == len(pre) > md["this_attempt_sessions"]
    assert md["preemptions"] >= (pre["end_reason"] == "preempted").sum() + 1  # + the lost node group
    assert md["cost_usd"] == pytest.approx(float(session_costs(pre).sum()), abs=1e-4)
    table = result.output_for_node("e2e__cost_report")
    assert table["spend_usd"].sum() == pytest.approx(sessions, rel=1e-9)
    assert {"useful_usd", "checkpoint_usd", "redo_usd", "restart_usd", "idle_usd", "on_demand_usd"} <= set(table)
    assert table["redo_usd"].sum() > 0  # the lost attempt's work after its checkpoint
    assert (var / "reports" / "e2e" / "cost_report.png").stat().st_size > 1000


@pytest.mark.postgres
def test_provider_giving_up_is_retried_from_the_checkpoint_on_postgres(tmp_path, pg_fresh_url):
    pipeline = {
        "name": "giveup", "provider": "local", "deadline_hours": 48, "checkpoint_uri": "checkpoints/g",
        "market": {"seed": 4, "wall_seconds_per_market_hour": 30, "cloud": "signal", "grace_seconds": 3,
                   "inject_preemptions_at_steps": {"only": [30, 60]}},
        # one relaunch allowed: the second preemption makes the provider give up (AttemptFailed)
        "stages": [_stage("only", 100, 4, 20, max_relaunches=1)],
    }
    cfg, stats, result, _, _ = _run(tmp_path, pipeline, db_url=pg_fresh_url)
    assert result.success
    t = _tables(stats, cfg.name)
    att = t["stage_attempts"].sort_values("attempt")
    # the market may preempt a retry too (the policy lives through the replayed window):
    # every lost attempt is a provider giving up, and a retry finishes from the checkpoint
    statuses = list(att["status"])
    assert statuses[0] == "failed" and statuses[-1] == "completed" and len(statuses) <= 4
    assert all("max_relaunches" in e for e in att[att["status"] == "failed"]["error"])
    ck = t["checkpoints"]
    a1_ckpt = int(ck[ck["attempt"] == 1]["step"].max())
    assert a1_ckpt >= 30  # at least the emergency save at the first injected notice
    assert a1_ckpt <= att.iloc[-1]["start_step"] <= 100 and att.iloc[-1]["final_step"] == 100


def _tight_pipeline(name: str, on_demand_fallback: bool) -> dict:
    """One 400-step stage (0.4 h of work) under a 0.9 h deadline, preempted at steps 100
    and 250 on the local fleet (30 wall s per market hour)."""
    stage = _stage("only", 400, 4, 100, work_hours=0.4)
    stage["args"][stage["args"].index("--step-sleep") + 1] = "0.05"
    return {
        "name": name, "provider": "local", "deadline_hours": 0.9, "checkpoint_uri": "checkpoints/t",
        "on_demand_fallback": on_demand_fallback,
        "market": {"seed": 4, "wall_seconds_per_market_hour": 30, "cloud": "signal", "grace_seconds": 2,
                   "inject_preemptions_at_steps": {"only": [100, 250]}},
        "stages": [stage],
    }


def test_without_on_demand_fallback_no_node_runs_on_demand(tmp_path):
    """The same tight pipeline with ``on_demand_fallback: false``: the stage has no deadline
    and on-demand is ruled out (``StageSpec.on_demand_allowed``); after each injected
    preemption it relaunches on spot, and no node session is on-demand. Before session 14
    the flag only dropped the deadline, and the live policy's no-deadline rule could still
    launch on-demand whenever waiting for spot did not pay."""
    cfg, stats, result, logs, _ = _run(tmp_path, _tight_pipeline("spotonly", on_demand_fallback=False))
    assert result.success
    t = _tables(stats, cfg.name)
    sessions = t["node_sessions"]
    assert len(sessions) >= 3 and sessions["spot"].astype(bool).all()  # two preemptions, spot only
    assert int(t["stage_attempts"].iloc[-1]["final_step"]) == 400
    assert not bool(t["stage_attempts"].iloc[-1]["used_on_demand"])
    assert not any(m and "ON-DEMAND" in m for m in logs)


def test_on_demand_fallback_when_the_deadline_needs_it(tmp_path):
    """The plan starts on spot; preemptions eat the slack; the rest runs on-demand and finishes."""
    cfg, stats, result, logs, _ = _run(tmp_path, _tight_pipeline("tight", on_demand_fallback=True))
    assert result.success
    plan = result.output_for_node("tight__fleet_plan")["only"]
    assert plan.spot_nodes and plan.fallback_slack_hours is not None  # the plan: spot, with a fallback
    t = _tables(stats, cfg.name)
    sessions = t["node_sessions"].sort_values("launched_at")
    assert bool(sessions.iloc[0]["spot"]) is True
    on_demand = sessions[~sessions["spot"].astype(bool)]
    assert len(on_demand) >= 1 and on_demand.iloc[-1]["end_reason"] == "completed"
    assert int(t["stage_attempts"].iloc[-1]["final_step"]) == 400
    assert bool(t["stage_attempts"].iloc[-1]["used_on_demand"]) is True
    od_node = on_demand.iloc[0]["node_id"]
    launch = next(m for m in logs if m and m.startswith(f"[{od_node}] launched"))
    assert "ON-DEMAND" in launch and "deadline" in launch
