"""One loop: the fleet policy deciding inside the ``train_<stage>`` asset is the one the
pipeline YAML names, and the same class ``fleet-sim`` evaluates; the plan's priors reach
the provider (and through it the training process)."""

from __future__ import annotations

import pytest
from dagster import AssetKey, DagsterInstance

from fleet.policies.registry import policy_class
from fleet.simulation.sweep import make_policies
from pipelines.config import PipelineConfigError, parse_pipelines
from pipelines.definitions import build_definitions, pipeline_job_name
from pipelines.resources import FleetResource, StatsDB


def _pipeline(policy: str) -> dict:
    return {
        "name": "oneloop", "provider": "local", "deadline_hours": 24, "checkpoint_uri": "checkpoints/ol",
        "market": {"seed": 4, "wall_seconds_per_market_hour": 30, "cloud": "signal", "grace_seconds": 2,
                   "hours": 240},
        "stages": [{"name": "train", "script": "examples/train_example.py", "policy": policy,
                    "args": ["--steps", "60", "--size", "tiny", "--step-sleep", "0.02",
                             "--periodic-every", "0", "--progress-every", "5"],
                    "work_hours": 1.0,
                    "resources": {"zones": ["us-east-1f", "us-east-1c", "us-west-2b"]}}],
    }


def test_unknown_policy_is_a_config_error_naming_the_choices():
    with pytest.raises(PipelineConfigError, match=r"stages\[0\]\.policy.*unknown fleet policy 'nope'"):
        parse_pipelines({"pipelines": [_pipeline("nope")]}, semantic=False)


@pytest.mark.slow
def test_train_asset_runs_the_yaml_policy_that_fleet_sim_evaluates(tmp_path):
    [cfg] = parse_pipelines({"pipelines": [_pipeline("uniform_progress_multi")]})
    var = tmp_path / "var"
    defs = build_definitions([cfg], include_gfs=False,
                             resources={"stats_db": StatsDB(var_dir=str(var)),
                                        "fleet": FleetResource(var_dir=str(var))})
    with DagsterInstance.ephemeral() as instance:
        result = defs.resolve_job_def(pipeline_job_name(cfg.name)).execute_in_process(
            instance=instance, raise_on_error=False)
        logs = [e.user_message or "" for e in instance.all_logs(result.run_id)]
        mat = instance.get_latest_materialization_event(AssetKey(["oneloop", "train_train"]))
    assert result.success
    sim_cls = type(make_policies(["uniform_progress_multi"])[0])
    assert policy_class("uniform_progress_multi") is sim_cls
    decided = [m for m in logs if m.startswith("fleet policy ")]
    assert decided, "the node runner logs every fleet-policy decision"
    assert all(m.startswith(f"fleet policy uniform_progress_multi ({sim_cls.__qualname__})")
               for m in decided)
    # the train asset records which policy ran
    meta = mat.asset_materialization.metadata
    assert meta["fleet_policy"].value == f"uniform_progress_multi ({sim_cls.__qualname__})"


def test_the_train_assets_policy_label_names_spotfleets_version():
    """An operator reading ``fleet_policy`` can tell which results tables describe the run."""
    from assets.pipeline_assets import _policy_label

    assert _policy_label("spotfleet") == "spotfleet v11 (SpotfleetPolicy)"
    assert _policy_label("failover") == f"failover ({policy_class('failover').__qualname__})"
