"""A bad file in the pipeline's market.trace_dir is a config error caught at load, with the
loader's own message, not a Dagster traceback in the spot_market step at run time (the
behaviour until 2026-11-27)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from pipelines.config import EXAMPLE_PIPELINES, PipelineConfigError, parse_pipelines

REPO = Path(__file__).resolve().parents[2]
CATALOG = REPO.parent / "shared" / "data" / "skypilot-catalog-v8"


@pytest.fixture(autouse=True)
def _catalog(monkeypatch):
    monkeypatch.setenv("SPOTFLEET_CATALOG_DIR", str(CATALOG))


def _folder(tmp_path, bad: dict | None) -> Path:
    d = tmp_path / "traces"
    d.mkdir()
    good = {"metadata": {"gap_seconds": 195}, "data": [1, 1, 0, 1] * 200}
    (d / "us-east-1a_v100_1.json").write_text(json.dumps(good))
    (d / "us-east-1b_v100_1.json").write_text(json.dumps(bad or good))
    return d


def _raw(trace_dir: Path, provider: str = "local") -> dict:
    raw = yaml.safe_load(EXAMPLE_PIPELINES.read_text())
    p = raw["pipelines"][0]
    p["market"].update(kind="traces", trace_dir=str(trace_dir), hours=24)
    p["provider"] = provider
    for s in p["stages"]:
        s["resources"]["zones"] = []
    return raw


@pytest.mark.parametrize("provider", ["local", "skypilot"])
def test_a_bad_trace_file_is_a_config_error_naming_file_and_fix(tmp_path, provider):
    d = _folder(tmp_path, {"metadata": {"gap_seconds": 195}, "data": [1, "x", 1]})
    with pytest.raises(PipelineConfigError) as err:
        parse_pipelines(_raw(d, provider), "team.yaml")
    msg = str(err.value)
    assert "invalid pipeline configuration (1 problem(s))" in msg
    assert (f"pipelines[0].market.trace_dir: {d}/us-east-1b_v100_1.json: data[1] = 'x'; every "
            "tick must be a non-negative integer count") in msg


def test_a_folder_the_loader_refuses_as_a_market_is_caught_too(tmp_path):
    # files of two collections (different ticks): check_trace_set's refusal
    d = _folder(tmp_path, {"metadata": {"gap_seconds": 600}, "data": [1, 0] * 100})
    with pytest.raises(PipelineConfigError, match=r"market.trace_dir: .*different gap_seconds"):
        parse_pipelines(_raw(d), "team.yaml")


def test_a_good_folder_passes(tmp_path):
    [cfg] = parse_pipelines(_raw(_folder(tmp_path, None)), "team.yaml")
    assert cfg.market.kind == "traces"


def test_spotfleet_main_stops_before_any_run(tmp_path, monkeypatch, capsys):
    from pipelines.cli import main

    for k in ("DAGSTER_HOME", "SPOTFLEET_VAR_DIR"):
        monkeypatch.setenv(k, "")
        monkeypatch.delenv(k)
    d = _folder(tmp_path, {"metadata": {"gap_seconds": 195}, "data": [1, "x", 1]})
    bad = tmp_path / "team.yaml"
    bad.write_text(yaml.safe_dump(_raw(d), sort_keys=False))
    var = tmp_path / "var"
    assert main(["main", "--pipelines", str(bad), "--var-dir", str(var)]) == 2
    err = capsys.readouterr().err
    assert "market.trace_dir" in err and "data[1] = 'x'" in err and "Traceback" not in err
    assert not (var / "dagster_home" / "storage").exists()


def _h100_raw(tmp_path, instance_type: str | None) -> dict:
    from nomad_traces import write_nomad_trace

    d = tmp_path / "gcp-h100"
    for zone in ("us-central1-a", "us-east4-a"):
        write_nomad_trace(d, zone, [0, 0, 1, 0] * 100, [19.0] * 400, 19.0, 82.5)
    raw = _raw(d)
    for s in raw["pipelines"][0]["stages"]:
        s["resources"].update(accelerator="H100", instance_type=instance_type)
    return raw


def test_a_priced_folder_s_type_is_the_one_the_local_fleet_bills(tmp_path):
    # the check and `local-fleet run` (LocalFleetConfig.with_file_prices) agree on the type:
    # until 2026-11-27 the check said p3.2xlarge on the GCP H100 folder and refused the
    # a3-highgpu-8g that the fleet then billed as an unknown instance type
    from fleet.emulation.injector import CapacitySchedule
    from fleet.providers.local import LocalFleetConfig
    from pipelines.validation import local_market

    [cfg] = parse_pipelines(_h100_raw(tmp_path, "a3-highgpu-8g"), "team.yaml")
    market, problems = local_market(cfg)
    assert problems == [] and market.instance_type == "a3-highgpu-8g"
    run = LocalFleetConfig(schedule=CapacitySchedule(cfg.market.traces("all"))).with_file_prices()
    assert run.instance_type == market.instance_type


def test_a_priced_folder_refuses_the_v100_type_naming_the_files_type(tmp_path):
    with pytest.raises(PipelineConfigError) as err:
        parse_pipelines(_h100_raw(tmp_path, "p3.2xlarge"), "team.yaml")
    assert ("stages[0].resources.instance_type: the local fleet prices only a3-highgpu-8g (the "
            "prices in market.trace_dir's files); remove instance_type or set it to "
            "a3-highgpu-8g (got 'p3.2xlarge')") in str(err.value)


GCP_H100 = REPO.parent / "shared" / "data" / "gcp-h100-2025"


def _gcp_raw(count: int, zones: list[str], nodes: int = 1) -> dict:
    raw = _raw(GCP_H100)
    for s in raw["pipelines"][0]["stages"]:
        s["resources"].update(accelerator="H100", count=count, nodes=nodes, zones=zones)
    return raw


@pytest.mark.skipif(not GCP_H100.is_dir(), reason=f"{GCP_H100} absent (shared reference data)")
def test_the_gcp_h100_folder_s_count_and_zone_messages_are_true_for_it():
    """The folder's machine (a3-highgpu-8g) carries 8 H100 (its files' price_info.components)
    and its files are named <zone>_h100_16.json. Until 2026-11-27 the check refused count: 8
    as "nodes with one H100 (a3-highgpu-8g) ... use count: 1 (and nodes: 8 ...)" (8 machines,
    64 H100), let count: 1 pass (billed as the whole 8-GPU machine), and hinted
    <zone>_h100_1.json for a missing zone."""
    from pipelines.validation import local_market

    [cfg] = parse_pipelines(_gcp_raw(8, ["us-east4-a"]), "team.yaml")  # the machine, as billed
    market, problems = local_market(cfg)
    assert problems == [] and (market.instance_type, market.per_node) == ("a3-highgpu-8g", 8)
    with pytest.raises(PipelineConfigError) as err:
        parse_pipelines(_gcp_raw(1, ["us-east4-a", "us-south1-a"], nodes=3), "team.yaml")
    msg = str(err.value)
    assert ("stages[0].resources.count: the local fleet emulates nodes of one a3-highgpu-8g with "
            "8 H100 (as market.trace_dir's files price it) and bills each node as that whole "
            "machine, so 1 would be billed as 8; use count: 8 and nodes: 1 (8 H100, the fewest "
            "whole machines for the 3 asked for) (got 1)") in msg
    assert ("stages[0].resources.zones[1]: the local fleet's market has no trace for zone "
            f"'us-south1-a': market.trace_dir ({GCP_H100}) has asia-south2-b, ") in msg
    assert "use some of those, or add us-south1-a_h100_16.json there, in the format of its other files" in msg
    assert "one H100" not in msg and "_h100_1.json" not in msg


def test_a_priced_folder_without_itemized_gpus_leaves_count_alone(tmp_path):
    # price_info without components: the files do not say how many H100 the machine has,
    # so no count is claimed (and none refused)
    from pipelines.validation import local_market

    raw = _h100_raw(tmp_path, None)
    for s in raw["pipelines"][0]["stages"]:
        s["resources"]["count"] = 4
    [cfg] = parse_pipelines(raw, "team.yaml")
    assert local_market(cfg)[0].per_node is None


def test_the_count_follows_the_gpus_the_files_itemize(tmp_path):
    from nomad_traces import write_nomad_trace

    d = tmp_path / "gcp-h100-2g"
    for zone in ("us-central1-a", "us-east4-a"):
        p = write_nomad_trace(d, zone, [0, 0, 1, 0] * 100, [9.0] * 400, 9.0, 30.0)
        obj = json.loads(p.read_text())
        obj["metadata"]["price_info"].update(machine_type="a3-highgpu-2g", components=[
            {"label": "cpu", "quantity": 24.0}, {"label": "gpu", "quantity": 2.0}])
        p.write_text(json.dumps(obj))
    raw = _raw(d)
    for s in raw["pipelines"][0]["stages"]:
        s["resources"].update(accelerator="H100", count=2, nodes=3)
    [cfg] = parse_pipelines(raw, "team.yaml")
    raw["pipelines"][0]["stages"][0]["resources"]["count"] = 4
    with pytest.raises(PipelineConfigError) as err:
        parse_pipelines(raw, "team.yaml")
    assert ("nodes of one a3-highgpu-2g with 2 H100 (as market.trace_dir's files price it) and "
            "bills each node as that whole machine, so 4 would be billed as 2; use count: 2 and "
            "nodes: 6 (12 H100, the fewest whole machines for the 12 asked for) (got 4)") in str(err.value)
