"""A SkyPilot pipeline's plan and the SkyPilot task a stage becomes, without a cloud.

A two-node A10G stage (``provider: skypilot``, ``spot: true``) is planned by the real
``fleet_plan`` asset with the SkyPilot catalog of ../shared/data (``SPOTFLEET_CATALOG_DIR``,
what validation reads too). Until 2026-11-28 the plan priced zones with the built-in V100
table only: every zone was rejected for "no price", the plan was "0 spot + 2 on-demand" and
``FleetPlan.apply`` turned the stage into an all on-demand launch (user audit). Then the
stage's task is built the way the SkyPilot provider builds it and parsed back by SkyPilot's
own ``Task.from_yaml_config``: two nodes, spot, the plan's zones in its failover order,
the instance type the catalog prices, the checkpoint URI under the stage's prefix. No launch.
"""

from __future__ import annotations

import pytest

PIPELINE = {
    "name": "skyteam", "provider": "skypilot", "deadline_hours": 12, "budget_usd": 50,
    "checkpoint_uri": "s3://team-ckpt/llm", "schedule_cron": None,
    "stages": [{"name": "ddp", "script": "examples/train_elastic.py", "args": ["--steps", "300"],
                "work_hours": 3,
                "resources": {"accelerator": "A10G", "count": 1, "nodes": 2, "clouds": ["aws"],
                              "zones": ["us-east-2a", "us-west-2b", "us-east-1a"], "spot": True}}],
}


@pytest.fixture
def catalog(shared_data, monkeypatch):
    cat = shared_data / "skypilot-catalog-v8"
    if not cat.is_dir():
        pytest.skip(f"{cat} is absent")
    monkeypatch.setenv("SPOTFLEET_CATALOG_DIR", str(cat))
    # the job-start store check must not find credentials (or reach AWS): on SkyPilot that is a warning
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
              "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    return cat


def test_a_skypilot_stage_is_planned_on_spot_with_catalog_prices_and_becomes_a_valid_task(catalog, tmp_path):
    from dagster import AssetKey, DagsterInstance

    from assets.pipeline_assets import _resolve_command
    from fleet.market.catalog import offline_catalog
    from fleet.providers.base import StageSpec
    from fleet.providers.skypilot.tasks import build_task, task_from_yaml, task_to_yaml
    from pipelines.config import PipelineConfig
    from pipelines.definitions import build_definitions
    from pipelines.resources import FleetResource, StatsDB

    cfg = PipelineConfig.model_validate(PIPELINE)
    var = tmp_path / "var"
    defs = build_definitions([cfg], include_gfs=False, resources={
        "stats_db": StatsDB(url=f"sqlite:///{var / 'stats.db'}", var_dir=str(var)),
        "fleet": FleetResource(var_dir=str(var))})
    keys = {AssetKey(["skyteam", n]) for n in ("spot_market", "preemption_stats", "preemption_forecast",
                                                "fleet_plan")}
    job = defs.resolve_implicit_global_asset_job_def().get_subset(asset_selection=keys)
    with DagsterInstance.ephemeral() as instance:
        res = job.execute_in_process(instance=instance)
        plan = res.output_for_node("skyteam__fleet_plan")["ddp"]
    assert plan.spot_nodes == 2 and plan.on_demand_nodes == 0, plan.explain()
    assert plan.price_source.startswith("skypilot:") and "skypilot-catalog-v8" in plan.price_source
    assert plan.failover_order and set(plan.failover_order) <= set(PIPELINE["stages"][0]["resources"]["zones"])
    # the stage's zones the market has no statistics for are named, not silently dropped
    for z in set(PIPELINE["stages"][0]["resources"]["zones"]) - set(plan.failover_order):
        assert f"not planned {z}: no preemption statistics for this zone" in plan.explain()

    stage = cfg.stages[0]
    spec = plan.apply(StageSpec(
        name=stage.name, command=_resolve_command(stage, "python3", str(tmp_path)),
        checkpoint_uri="s3://team-ckpt/llm/ddp/run0", accelerator="A10G", accelerator_count=1,
        num_nodes=2, clouds=("aws",), zones=tuple(stage.resources.zones), use_spot=True))
    assert spec.use_spot and list(spec.zones) == plan.failover_order
    with offline_catalog(tmp_path / "skyhome", catalog):
        task = build_task(spec, list(spec.zones), spec.use_spot)
        text = task_to_yaml(task)
        back = task_from_yaml(text)  # SkyPilot's own parser
        resources = list(back.resources)
        for r in resources:
            r.validate()
    assert back.num_nodes == 2
    assert [r.zone for r in resources] == plan.failover_order
    assert all(r.use_spot and r.instance_type == "g5.4xlarge" and r.accelerators == {"A10G": 1}
               and r.region == r.zone[:-1] for r in resources)
    assert back.envs["SPOTFLEET_CHECKPOINT_URI"] == "s3://team-ckpt/llm/ddp/run0"
    assert "SPOTFLEET_PLACEMENT" in back.envs


def test_offline_catalog_validates_after_an_earlier_catalog_home_is_gone(catalog, tmp_path):
    """The run worker prices the plan from the catalog in a temporary home (removed after,
    ``PriceBook.from_skypilot``); a later ``offline_catalog`` in the same process must not fall
    back to downloading ``common/accelerators.csv``: the accelerator registry's frame, made at
    its import under the first home, is repointed too."""
    from fleet.market.catalog import offline_catalog
    from fleet.market.prices import PriceBook

    assert PriceBook.from_skypilot(catalog, accelerators=["A10G"]).spot  # its own temporary home
    with offline_catalog(tmp_path / "second", catalog):
        import sky

        sky.Resources(infra="aws/us-west-2/us-west-2b", accelerators={"A10G": 1}, use_spot=True).validate()


# ------------------------------------------- stages on two clouds (review F9, 2026-11-28)

#: GCP attaches the GPU to a host VM and prices them apart (SkyPilot's gcp/vms.csv layout)
GCP_VMS = """InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region,AvailabilityZone
,A100,1,,,A100,2.933908,1.17,us-central1,us-central1-a
,A100,1,,,A100,2.933908,1.10,us-central1,us-central1-b
a2-highgpu-1g,,,12,85,,0.749,0.22,us-central1,us-central1-a
a2-highgpu-1g,,,12,85,,0.749,0.23,us-central1,us-central1-b
"""
AWS_ZONES = ["us-east-1c", "us-east-1f"]
GCP_ZONES = ["us-central1-a", "us-central1-b"]


def _two_cloud_setup(shared_data, tmp_path, monkeypatch, second: dict):
    """A catalog folder with aws (../shared/data) and gcp files, a market of 1-node traces in
    two aws and two gcp zones (48 h, one short outage every 10 h), and a SkyPilot pipeline:
    stage ``a`` (A10G) on aws, stage ``b`` (``second``'s resources) after it."""
    import json
    import shutil

    from pipelines.config import PipelineConfig

    src = shared_data / "skypilot-catalog-v8"
    if not src.is_dir():
        pytest.skip(f"{src} is absent")
    cat = tmp_path / "catalog"
    shutil.copytree(src, cat)
    (cat / "gcp").mkdir()
    (cat / "gcp" / "vms.csv").write_text(GCP_VMS)
    monkeypatch.setenv("SPOTFLEET_CATALOG_DIR", str(cat))
    traces = tmp_path / "traces"
    traces.mkdir()
    for i, z in enumerate(AWS_ZONES + GCP_ZONES):
        data = [0 if (t + 97 * i) % 600 == 0 else 1 for t in range(2 * 48 * 60)]
        (traces / f"{z}_v100_1.json").write_text(json.dumps({"metadata": {"gap_seconds": 60}, "data": data}))
    stage = {"script": "examples/train_elastic.py", "args": ["--steps", "300"], "work_hours": 3}
    return PipelineConfig.model_validate({
        "name": "twocloud", "provider": "skypilot", "deadline_hours": 24, "budget_usd": 200,
        "checkpoint_uri": "s3://team-ckpt/two", "schedule_cron": None,
        "market": {"kind": "traces", "trace_dir": str(traces), "hours": 48},
        "stages": [{**stage, "name": "a", "resources": {"accelerator": "A10G", "clouds": ["aws"],
                                                       "zones": AWS_ZONES, "spot": True}},
                   {**stage, "name": "b", **second}]})


def _plan(cfg, tmp_path):
    from dagster import AssetKey, DagsterInstance

    from pipelines.definitions import build_definitions
    from pipelines.resources import FleetResource, StatsDB

    var = tmp_path / "var"
    defs = build_definitions([cfg], include_gfs=False, resources={
        "stats_db": StatsDB(url=f"sqlite:///{var / 'stats.db'}", var_dir=str(var)),
        "fleet": FleetResource(var_dir=str(var))})
    keys = {AssetKey([cfg.name, n]) for n in ("spot_market", "preemption_stats", "preemption_forecast",
                                               "fleet_plan")}
    job = defs.resolve_implicit_global_asset_job_def().get_subset(asset_selection=keys)
    with DagsterInstance.ephemeral() as instance:
        res = job.execute_in_process(instance=instance, raise_on_error=False)
        if not res.success:
            [failure] = [e for e in res.all_events if e.event_type_value == "STEP_FAILURE"]
            return None, failure.step_failure_data.error.message + str(
                failure.step_failure_data.user_failure_data and failure.step_failure_data.user_failure_data.description)
        return res.output_for_node(f"{cfg.name}__fleet_plan"), ""


def test_stages_on_two_clouds_are_each_priced_from_their_own_cloud(shared_data, tmp_path, monkeypatch):
    """Stage a on aws (A10G), stage b on gcp (A100): each plan is spot in its own cloud's
    zones at that catalog's prices. Until 2026-11-28 the pipeline was priced from the first
    stage's cloud only (aws): every gcp zone of stage b was rejected for "no price" and its
    plan was all on-demand, silently."""
    cfg = _two_cloud_setup(shared_data, tmp_path, monkeypatch, {"resources": {
        "accelerator": "A100", "clouds": ["gcp"], "zones": GCP_ZONES, "spot": True}})
    plans, failure = _plan(cfg, tmp_path)
    assert plans is not None, failure
    a, b = plans["a"], plans["b"]
    assert a.spot_nodes == 1 and a.on_demand_nodes == 0, a.explain()
    assert set(a.failover_order) <= set(AWS_ZONES) and a.instance_type == "g5.4xlarge"
    assert b.spot_nodes == 1 and b.on_demand_nodes == 0, b.explain()
    assert b.failover_order and set(b.failover_order) <= set(GCP_ZONES), b.explain()
    assert b.instance_type == "a2-highgpu-1g"
    # GCP's price is the host VM's plus the attached GPU's (not the host's 0.22 $/h alone)
    assert {z.zone: round(z.spot_price, 4) for z in b.zones} == {"us-central1-a": 1.39, "us-central1-b": 1.33}
    assert not [r for r in b.reasons if "no price" in r], b.explain()


def test_a_stage_whose_cloud_has_no_catalog_file_is_named_not_planned_on_demand(shared_data, tmp_path,
                                                                                 monkeypatch):
    """A stage on azure (no azure/vms.csv in the catalog folder) fails the plan with the
    stage, the cloud and the fix, instead of a silent all on-demand plan; a stage that lists
    another cloud with a catalog is planned there and its plan names the cloud left out."""
    cfg = _two_cloud_setup(shared_data, tmp_path, monkeypatch, {"resources": {
        "accelerator": "A100", "clouds": ["azure"], "zones": GCP_ZONES, "spot": True}})
    plans, failure = _plan(cfg, tmp_path)
    assert plans is None
    assert "stage 'b' runs on azure" in failure and "azure/vms.csv" in failure, failure

    cfg = _two_cloud_setup(shared_data, tmp_path / "2", monkeypatch, {"resources": {
        "accelerator": "A100", "clouds": ["gcp", "azure"], "zones": GCP_ZONES, "spot": True}})
    plans, failure = _plan(cfg, tmp_path / "2")
    assert plans is not None, failure
    b = plans["b"]
    assert b.spot_nodes == 1 and set(b.failover_order) <= set(GCP_ZONES), b.explain()
    assert any("no SkyPilot catalog for cloud azure" in r and "stage b" in r for r in b.reasons)
    assert "no SkyPilot catalog for cloud azure" in b.explain()
