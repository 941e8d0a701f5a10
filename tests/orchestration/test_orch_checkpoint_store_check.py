"""A pipeline whose checkpoint store cannot be used fails at job start, before any node.

User audit (session 18): `spotfleet main` with `checkpoint_uri: s3://<a bucket that does
not exist>/demo` launched a node, which died at its first lease read (NoSuchBucket);
Dagster retried the stage 3 times: 4 node sessions billed ($0.11 on the example), the
message named SPOTFLEET_CHECKPOINT_URI rather than the YAML field, and an unreachable
endpoint did the same. Now the first step (`spot_market`, and each train step before it
launches) makes one request to every stage's store and fails the run once, as a
configuration error naming `checkpoint_uri` and the fix, with no node launched.
Real parts: a real radosgw (Ceph) S3 server and real Dagster runs.
"""

from __future__ import annotations

import socket
import sys
import uuid
from pathlib import Path

import pytest

from pipelines.config import parse_pipelines

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "s3"))

REPO = Path(__file__).resolve().parents[2]


def _pipeline(checkpoint_uri: str, provider: str = "local"):
    raw = {"pipelines": [{
        "name": "storecheck", "provider": "local", "deadline_hours": 48,
        "checkpoint_uri": checkpoint_uri,
        "market": {"seed": 4, "wall_seconds_per_market_hour": 30, "cloud": "signal", "grace_seconds": 3},
        "stages": [{"name": name, "script": "examples/train_example.py",
                    "args": ["--steps", "40", "--size", "tiny", "--periodic-every", "20"],
                    "work_hours": 1, "resources": {"zones": ["us-east-1f", "us-east-1c", "us-west-2b"]}}
                   for name in ("pretrain", "finetune")],
    }]}
    [cfg] = parse_pipelines(raw, REPO / "pipelines" / "examples" / "two_stage.yaml")
    return cfg.model_copy(update={"provider": provider}) if provider != "local" else cfg


def _run_job(cfg, var: Path):
    """The pipeline's job, in-process, on the local fleet; returns (result, instance logs, failures, node sessions)."""
    from dagster import DagsterInstance

    from infra.db.models import NodeSessionRecord
    from infra.db.recorder import read_table
    from infra.db.session import make_engine
    from pipelines.definitions import build_definitions, pipeline_job_name
    from pipelines.home import prepare_dagster_home
    from pipelines.resources import FleetResource, StatsDB

    defs = build_definitions([cfg], include_gfs=False, resources={
        "stats_db": StatsDB(var_dir=str(var)), "fleet": FleetResource(var_dir=str(var))})
    with DagsterInstance.from_config(str(prepare_dagster_home(var))) as instance:
        result = defs.resolve_job_def(pipeline_job_name(cfg.name)).execute_in_process(
            instance=instance, raise_on_error=False)
        run = instance.get_run_by_id(result.run_id)
    failures = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    starts = [e.step_key for e in result.all_events if e.event_type_value == "STEP_START"]
    engine = make_engine(f"sqlite:///{var / 'spotfleet.db'}")
    import sqlalchemy as sa

    recorded = "node_sessions" in sa.inspect(engine).get_table_names()  # no table: nothing ran
    sessions = read_table(engine, NodeSessionRecord, cfg.name) if recorded else []
    return result, run, failures, starts, sessions


def _assert_refused_before_any_node(result, run, failures, starts, sessions) -> str:
    assert not result.success
    assert starts == ["storecheck__spot_market"], starts  # the first step; no train step ran
    assert [f.step_key for f in failures] == ["storecheck__spot_market"]
    assert len(sessions) == 0, sessions  # no node was launched, nothing billed
    assert run.tags["dagster/retry_on_asset_or_op_failure"] == "false"  # no run retry either
    return failures[0].event_specific_data.error.message


@pytest.fixture(scope="module")
def gateway():
    from s3_radosgw_server import running_gateway

    with running_gateway("spotfleet-storecheck-rgw-") as gw:
        yield gw


def _s3_env(monkeypatch, gateway) -> None:
    for k, v in {"AWS_ACCESS_KEY_ID": gateway.access_key, "AWS_SECRET_ACCESS_KEY": gateway.secret_key,
                 "AWS_DEFAULT_REGION": gateway.region, "AWS_ENDPOINT_URL": gateway.endpoint_url}.items():
        monkeypatch.setenv(k, v)


@pytest.mark.s3
@pytest.mark.slow
def test_a_missing_bucket_fails_the_run_before_any_node(gateway, tmp_path, monkeypatch):
    _s3_env(monkeypatch, gateway)
    bucket = f"nosuch-{uuid.uuid4().hex[:10]}"
    msg = _assert_refused_before_any_node(*_run_job(_pipeline(f"s3://{bucket}/ck"), tmp_path / "var"))
    assert "configuration error: pipeline storecheck (1 problem(s)):" in msg  # one line for both stages
    assert f"- checkpoint_uri: the checkpoint store of stage pretrain (s3://{bucket}/ck/pretrain)" in msg
    assert f"bucket '{bucket}' does not exist" in msg
    assert "Fix: create the bucket, or set checkpoint_uri to s3://<an existing bucket>/<prefix>" in msg
    assert "Nothing was launched" in msg and f"(got 's3://{bucket}/ck')" in msg
    assert bucket not in {b["Name"] for b in gateway.client().list_buckets()["Buckets"]}  # not created


@pytest.mark.s3
def test_the_store_check_passes_an_existing_bucket_and_names_a_stage_override(gateway, tmp_path, monkeypatch):
    from pipelines.validation import check_checkpoint_stores

    _s3_env(monkeypatch, gateway)
    bucket = f"ok-{uuid.uuid4().hex[:10]}"
    gateway.client().create_bucket(Bucket=bucket)
    cfg = _pipeline(f"s3://{bucket}/ck")
    assert check_checkpoint_stores(cfg, tmp_path) == ([], [])
    # a stage's own checkpoint_uri is reported under that stage's field
    stages = list(cfg.stages)
    stages[1] = stages[1].model_copy(update={"checkpoint_uri": f"s3://{bucket}-gone/ft"})
    problems, warnings = check_checkpoint_stores(cfg.model_copy(update={"stages": stages}), tmp_path)
    assert [p.loc for p in problems] == ["stages[1].checkpoint_uri"] and not warnings
    # on SkyPilot a missing bucket is still an error (it is missing for the nodes too) ...
    sky = cfg.model_copy(update={"stages": stages, "provider": "skypilot"})
    assert [p.loc for p in check_checkpoint_stores(sky, tmp_path)[0]] == ["stages[1].checkpoint_uri"]


@pytest.mark.s3
def test_the_store_check_sees_the_endpoint_and_keys_a_stage_gives_its_nodes(gateway, tmp_path, monkeypatch):
    """A stage's `env:` may carry the S3 endpoint and key pair that spotfleet's own environment
    lacks (tests/faults/test_fault_redaction.py does): the nodes reach the store, so must the check."""
    from pipelines.validation import check_checkpoint_stores

    for k in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
              "AWS_PROFILE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("SPOTFLEET_S3_MAX_ATTEMPTS", "1")
    bucket = f"env-{uuid.uuid4().hex[:10]}"
    gateway.client().create_bucket(Bucket=bucket)
    node_env = {"AWS_ENDPOINT_URL": gateway.endpoint_url, "AWS_ACCESS_KEY_ID": gateway.access_key,
                "AWS_SECRET_ACCESS_KEY": gateway.secret_key, "AWS_REGION": gateway.region}
    cfg = _pipeline(f"s3://{bucket}/ck")
    cfg = cfg.model_copy(update={"stages": [st.model_copy(update={"env": node_env}) for st in cfg.stages]})
    assert check_checkpoint_stores(cfg, tmp_path) == ([], [])
    # a wrong secret in the stage's env is refused as the nodes would be
    bad = cfg.model_copy(update={"stages": [st.model_copy(update={"env": {**node_env, "AWS_SECRET_ACCESS_KEY": "x"}})
                                            for st in cfg.stages]})
    problems, _ = check_checkpoint_stores(bad, tmp_path)
    assert [p.loc for p in problems] == ["checkpoint_uri"] and "access denied" in problems[0].message
    # a profile in the stage's env is not applied by the check: what it cannot see is only a warning
    prof = cfg.model_copy(update={"stages": [st.model_copy(update={"env": {**node_env, "AWS_SECRET_ACCESS_KEY": "x",
                                                                             "AWS_PROFILE": "ci"}})
                                             for st in cfg.stages]})
    problems, warnings = check_checkpoint_stores(prof, tmp_path)
    assert problems == [] and len(warnings) == 1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_endpoint_fails_the_run_before_any_node(tmp_path, monkeypatch):
    """AWS_ENDPOINT_URL pointing at a port where nothing listens (a typo, a server down)."""
    port = _free_port()
    for k, v in {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "AWS_DEFAULT_REGION": "us-east-1",
                 "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "SPOTFLEET_S3_MAX_ATTEMPTS": "1"}.items():
        monkeypatch.setenv(k, v)
    msg = _assert_refused_before_any_node(*_run_job(_pipeline("s3://ckpt/demo"), tmp_path / "var"))
    assert "- checkpoint_uri: the checkpoint store of stage pretrain (s3://ckpt/demo/pretrain)" in msg
    assert f"endpoint http://127.0.0.1:{port}" in msg and "unreachable" in msg
    assert "Fix: check AWS_ENDPOINT_URL (or AWS_ENDPOINT_URL_S3) in spotfleet's environment" in msg


def test_on_skypilot_an_endpoint_unreachable_from_here_is_only_a_warning(tmp_path, monkeypatch):
    """The nodes of a real cloud may reach a store (VPC endpoint, instance role) this machine cannot."""
    from pipelines.validation import check_checkpoint_stores

    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{_free_port()}")
    monkeypatch.setenv("SPOTFLEET_S3_MAX_ATTEMPTS", "1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    problems, warnings = check_checkpoint_stores(_pipeline("s3://ckpt/demo", provider="skypilot"), tmp_path)
    assert problems == [] and len(warnings) == 1
    assert warnings[0].startswith("checkpoint_uri: ") and "the nodes may have their own" in warnings[0]


def test_a_local_checkpoint_location_that_cannot_be_a_directory_fails_before_any_node(tmp_path):
    """checkpoint_uri under a regular file (a typo'd path): refused at job start, not per node."""
    blocker = tmp_path / "ckpt.txt"
    blocker.write_text("not a directory")
    msg = _assert_refused_before_any_node(*_run_job(_pipeline(str(blocker / "demo")), tmp_path / "var"))
    assert f"- checkpoint_uri: the checkpoint store of stage pretrain ({blocker}/demo/pretrain)" in msg
    assert "cannot create checkpoint directory" in msg and "Fix: fix checkpoint_uri" in msg


def test_before_a_stage_launches_an_unreachable_store_is_a_retryable_outage(tmp_path, monkeypatch):
    """At job start an endpoint that does not answer is a configuration error (above); before a
    later stage launches, in a run whose store answered at job start, it is an outage: the train
    step fails retryably (its RetryPolicy tries again) and nothing is launched."""
    from dagster import Failure, build_asset_context

    from assets.pipeline_assets import _check_stores
    from pipelines.resources import FleetResource

    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{_free_port()}")
    monkeypatch.setenv("SPOTFLEET_S3_MAX_ATTEMPTS", "1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    cfg = _pipeline("s3://ckpt/demo")
    fleet = FleetResource(var_dir=str(tmp_path / "var"))
    with build_asset_context() as ctx:
        with pytest.raises(Failure) as at_launch:
            _check_stores(ctx, cfg, fleet, [cfg.stages[1]])
        with pytest.raises(Failure) as at_start:
            _check_stores(ctx, cfg, fleet)
    assert at_launch.value.allow_retries is True
    assert at_launch.value.description.startswith("stage finetune: not launched, its checkpoint store does not answer")
    assert at_start.value.allow_retries is False
    assert at_start.value.description.startswith("configuration error: pipeline storecheck")


def test_spotfleet_main_shows_a_job_start_configuration_error_without_dagsters_stack(tmp_path):
    """Through `spotfleet main` (its own process, as a user runs it: the console is the
    process's): the configuration error is on the console with what to do, not buried under
    Dagster's stack traces and a "not executing" line per later step (before: 110 lines, two
    25-line stacks); `--verbose` keeps Dagster's console as it is."""
    import os
    import subprocess

    import yaml

    from pipelines.commands.console_log import STACK_HIDDEN

    blocker = tmp_path / "ckpt.txt"
    blocker.write_text("not a directory")
    raw = yaml.safe_load((REPO / "pipelines" / "examples" / "two_stage.yaml").read_text(encoding="utf-8"))
    raw["pipelines"][0]["checkpoint_uri"] = str(blocker / "demo")
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(raw, sort_keys=False))
    env = {k: v for k, v in os.environ.items()
           if k not in ("DAGSTER_HOME", "SPOTFLEET_VAR_DIR", "SPOTFLEET_PIPELINES", "SPOTFLEET_DB_URL")}
    outputs = {}
    for flag in ([], ["--verbose"]):
        proc = subprocess.run(
            [sys.executable, "-c", "import sys; from pipelines.cli import main; sys.exit(main(sys.argv[1:]))",
             "main", "--pipelines", str(bad), "--var-dir", str(tmp_path / f"var{len(flag)}"), *flag],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
        outputs[bool(flag)] = proc.stdout + proc.stderr
    quiet, verbose = outputs[False], outputs[True]
    assert "cannot create checkpoint directory" in quiet and "Fix: fix checkpoint_uri" in quiet
    assert "not retried: a configuration error" in quiet
    assert "STEP_FAILURE" in quiet and STACK_HIDDEN in quiet, quiet[-3000:]  # Dagster's lines are there...
    assert "Stack Trace:" not in quiet  # ... without its stacks
    assert "Not executing." not in quiet and "did not yield or return expected outputs" not in quiet
    assert "pretrain: not run" in quiet  # the stage summary still says what did not run
    assert "Stack Trace:" in verbose and "Not executing." in verbose
