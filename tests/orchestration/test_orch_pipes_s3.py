"""The S3 Pipes channel (remote nodes) against a real S3-compatible server (Ceph radosgw).

Dagster side: PipesS3ContextInjector + PipesS3MessageReader; node runner side:
PipesS3ContextLoader + PipesS3MessageWriter; checkpoints in S3 too. Skips with the
reason when the Ceph binaries are missing (scripts/install_test_services.sh installs them).
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import pytest
from dagster import DagsterInstance

from pipelines.config import parse_pipelines
from pipelines.definitions import build_definitions, pipeline_job_name
from pipelines.resources import FleetResource, StatsDB

pytestmark = [pytest.mark.s3, pytest.mark.slow]

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "s3"))


@pytest.fixture(scope="module")
def gateway():
    from s3_radosgw_server import running_gateway

    with running_gateway("spotfleet-pipes-rgw-") as gw:
        yield gw


def test_training_stage_streams_through_the_s3_channel(gateway, tmp_path, monkeypatch):
    for k, v in {"AWS_ACCESS_KEY_ID": gateway.access_key, "AWS_SECRET_ACCESS_KEY": gateway.secret_key,
                 "AWS_DEFAULT_REGION": gateway.region, "AWS_ENDPOINT_URL": gateway.endpoint_url}.items():
        monkeypatch.setenv(k, v)
    bucket = f"pipes-{uuid.uuid4().hex[:12]}"
    s3 = gateway.client()
    s3.create_bucket(Bucket=bucket)
    [cfg] = parse_pipelines({"pipelines": [{
        "name": "remote", "provider": "local", "deadline_hours": 48,
        "checkpoint_uri": f"s3://{bucket}/checkpoints",
        "market": {"seed": 4, "wall_seconds_per_market_hour": 30, "cloud": "signal", "grace_seconds": 3,
                   "inject_preemptions_at_steps": {"train": [30]}},
        "stages": [{"name": "train", "script": "examples/train_example.py",
                    "args": ["--steps", "60", "--seed", "5", "--size", "tiny", "--step-sleep", "0.03",
                             "--periodic-every", "20"],
                    "work_hours": 2, "resources": {"zones": ["us-east-1f", "us-east-1c", "us-west-2b"]}}],
    }]})
    var = tmp_path / "var"
    fleet = FleetResource(var_dir=str(var), pipes_channel="s3", pipes_bucket=bucket,
                          pipes_endpoint_url=gateway.endpoint_url, pipes_poll_seconds=1.0)
    defs = build_definitions([cfg], include_gfs=False,
                             resources={"stats_db": StatsDB(var_dir=str(var)), "fleet": fleet})
    with DagsterInstance.ephemeral() as instance:
        result = defs.resolve_job_def(pipeline_job_name("remote")).execute_in_process(
            instance=instance, raise_on_error=False)
        logs = "\n".join(e.user_message or "" for e in instance.all_logs(result.run_id))
    assert result.success, logs[-3000:]
    # the events came back over S3: training progress, the preemption and the resume
    assert "PREEMPTED in" in logs and "resumed from step" in logs
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert any(k.startswith("checkpoints/train/") for k in keys)  # checkpoints in S3 too
    from infra.db.models import StageAttempt
    from infra.db.recorder import read_table
    from infra.db.session import make_engine

    att = read_table(make_engine(f"sqlite:///{var / 'spotfleet.db'}"), StageAttempt, "remote")
    # The fleet policy (spotfleet: 48 h deadline for 2 h of work) may wait for spot capacity
    # after the second preemption longer than the local provider's max_capacity_wait_seconds;
    # that attempt is lost and Dagster's retry resumes it. Whatever the attempts, the stage
    # completes at step 60 and no attempt ever went backwards (resume, never restart).
    steps = list(att["final_step"])
    assert steps[-1] == 60 and list(att["status"])[-1] == "completed", att
    assert steps == sorted(steps), att
