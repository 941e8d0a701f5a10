"""Semantic mistakes in a pipeline YAML: caught at load, one exact message each, never retried.

The table below is the issue's list of "semantic mistakes pass validation and fail late,
loudly, repeatedly" plus their neighbours. Each row mutates the example pipeline and
asserts the exact message (file, field, value as written, fix); then the same YAML is
given to `spotfleet main`, which must print it once, exit 2 and launch no Dagster run
(so nothing can be retried), and the code location must refuse to load with it.
A mistake that only shows at job start (the script deleted after the code location
loaded) fails its step once: no step retry (Failure(allow_retries=False)) and no run
retry (the run is tagged so Dagster's run retries skip it).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from pipelines.config import EXAMPLE_PIPELINES, PipelineConfigError, parse_pipelines

REPO = Path(__file__).resolve().parents[2]
CATALOG = REPO.parent / "shared" / "data" / "skypilot-catalog-v8"
TRACES = REPO.parent / "shared" / "data" / "spot-traces" / "availability" / "1-node" / "aws-02-15-2023"
NEEDS_CATALOG = pytest.mark.skipif(not CATALOG.is_dir(), reason=f"{CATALOG} absent (shared reference data)")
SRC = "team.yaml"
CAT = f"SkyPilot catalog {CATALOG}"


@pytest.fixture(autouse=True)
def _catalog(monkeypatch):
    monkeypatch.setenv("SPOTFLEET_CATALOG_DIR", str(CATALOG))


def _example() -> dict:
    return yaml.safe_load(EXAMPLE_PIPELINES.read_text())


def _res(p, i=0):
    return p["stages"][i]["resources"]


def _sky(p):
    p["provider"] = "skypilot"


# (id, mutation of pipelines[0], field, message, value as shown, needs the catalog)
CASES = [
    ("unknown_accelerator", lambda p: _res(p).update(accelerator="H9000"),
     "stages[0].resources.accelerator",
     f"unknown accelerator 'H9000': neither the {CAT} nor the built-in price table knows it (did you "
     "mean 'H100'?); use one of A100, A10G, H100, L4, L40S, T4, V100", "'H9000'", True),
    ("accelerator_the_local_market_lacks", lambda p: _res(p, 1).update(accelerator="A100"),
     "stages[1].resources.accelerator",
     "the local fleet's synthetic market emulates V100 nodes (p3.2xlarge) only, so this stage's A100 "
     "would be billed at the V100 price; use accelerator: V100, or provider: skypilot to run on real "
     "A100 nodes", "'A100'", True),
    ("unknown_instance_type", lambda p: _res(p).update(instance_type="p9.mega"),
     "stages[0].resources.instance_type",
     f"unknown instance type 'p9.mega': neither the {CAT} nor the built-in price table lists it; use "
     "one of g5.4xlarge, g6.xlarge, p3.2xlarge or remove instance_type (the planner picks one for the "
     "accelerator)", "'p9.mega'", True),
    ("instance_type_the_local_fleet_does_not_price", lambda p: _res(p).update(instance_type="g5.4xlarge"),
     "stages[0].resources.instance_type",
     "the local fleet prices only p3.2xlarge (market.spot_price_per_hour / on_demand_price_per_hour); "
     "remove instance_type or set it to p3.2xlarge", "'g5.4xlarge'", True),
    ("gpus_per_node_on_the_local_fleet", lambda p: _res(p).update(count=8),
     "stages[0].resources.count",
     "the local fleet emulates nodes with one V100 (p3.2xlarge), so 8 would be billed as 1; use "
     "count: 1 (and nodes: 8 for more accelerators)", "8", True),
    ("unknown_zone", lambda p: _res(p).update(zones=["us-east-1f", "us-east-1z"]),
     "stages[0].resources.zones[1]",
     "unknown zone 'us-east-1z': the local fleet's synthetic market has the zones us-east-1f, "
     "us-east-1c, us-west-2b (did you mean 'us-east-1f'?); use some of those (market.n_zones up to 9 "
     "adds us-west-2a, us-east-2a, us-east-1d, us-west-2c, us-east-2b, us-east-1a)", "'us-east-1z'", False),
    ("zone_beyond_n_zones", lambda p: _res(p, 1).update(zones=["us-west-2a"]),
     "stages[1].resources.zones[0]",
     "zone us-west-2a is not in the local fleet's market: the synthetic market has market.n_zones = 3 "
     "zones (us-east-1f, us-east-1c, us-west-2b); raise market.n_zones to 4 to include us-west-2a, or "
     "remove it", "'us-west-2a'", False),
    ("zone_listed_twice", lambda p: _res(p).update(zones=["us-east-1f", "us-east-1c", "us-east-1f"]),
     "stages[0].resources.zones[2]",
     "zone listed twice; list each zone once, in preference order", "'us-east-1f'", False),
    ("zone_outside_regions", lambda p: _res(p).update(regions=["us-west-2"], zones=["us-west-2b", "us-east-1c"]),
     "stages[0].resources.zones[1]",
     "zone us-east-1c is in region us-east-1, which resources.regions (us-west-2) leaves out; add "
     "us-east-1 to regions or remove the zone", "'us-east-1c'", False),
    ("impossible_deadline", lambda p: p.update(deadline_hours=1),
     "deadline_hours",
     "a deadline of 1 h is shorter than the stages' work (pretrain 4 h + finetune 2 h = 6 h of "
     "work_hours): even on-demand cannot finish in time; raise deadline_hours to at least 6 or lower "
     "the stages' work_hours", "1", False),
    ("impossible_fractional_deadline", lambda p: p.update(deadline_hours=5.5),
     "deadline_hours",
     "a deadline of 5.5 h is shorter than the stages' work (pretrain 4 h + finetune 2 h = 6 h of "
     "work_hours): even on-demand cannot finish in time; raise deadline_hours to at least 6 or lower "
     "the stages' work_hours", "5.5", False),
    ("missing_training_script", lambda p: p["stages"][1].update(script="examples/train_exmaple.py"),
     "stages[1].script",
     f"training script not found (looked in {REPO}) (did you mean 'examples/train_example.py'?); give "
     "a path relative to the working directory or the project root, or an absolute one",
     "'examples/train_exmaple.py'", False),
    ("command_not_on_path", lambda p: (p["stages"][0].pop("script"),
                                       p["stages"][0].update(command=["no-such-trainer", "--fast"])),
     "stages[0].command[0]",
     "not an executable on PATH nor a file here; give the program's full path (e.g. /usr/bin/python3) "
     "or use script: for a Python file", "'no-such-trainer'", False),
    ("fault_injection_for_a_stage_that_does_not_exist",
     lambda p: p["market"]["inject_preemptions_at_steps"].update(pretrian=[50]),
     "market.inject_preemptions_at_steps.pretrian",
     "unknown stage 'pretrian'; the stages are pretrain, finetune: rename the key to one of them",
     "'pretrian'", False),
    ("trace_dir_missing", lambda p: p["market"].update(kind="traces", trace_dir="/nonexistent/traces"),
     "market.trace_dir",
     "no such folder; give a folder of spot-trace JSON files named <zone>_<accelerator>_<count>.json "
     "(e.g. ../shared/data/spot-traces/availability/1-node/aws-02-15-2023)", "'/nonexistent/traces'", False),
    ("on_demand_stage_in_a_pipeline_without_on_demand",
     lambda p: (p.update(on_demand_fallback=False), _res(p).update(spot=False)),
     "stages[0].resources.spot",
     "spot: false asks for on-demand nodes, but the pipeline's on_demand_fallback: false rules "
     "on-demand out: set spot: true, or on_demand_fallback: true", "False", False),
    ("skypilot_count_no_instance_offers",
     lambda p: (_sky(p), _res(p).update(accelerator="A10G", count=4, zones=[])),
     "stages[0].resources.count",
     f"no instance type offers A10G x4; the {CAT} has A10G x1 (g5.4xlarge): use one of those counts "
     "(and more nodes)", "4", True),
    ("skypilot_unknown_zone", lambda p: (_sky(p), _res(p).update(zones=["us-east-1f", "us-east-7q"])),
     "stages[0].resources.zones[1]",
     f"unknown zone 'us-east-7q': the {CAT} has no such AWS zone (did you mean 'us-east-2c'?); AWS "
     "zones are a region plus a letter, e.g. us-east-1a", "'us-east-7q'", True),
    ("skypilot_instance_type_of_another_accelerator",
     lambda p: (_sky(p), _res(p).update(instance_type="g6.xlarge")),
     "stages[0].resources.instance_type",
     "g6.xlarge carries L4 x1, but the stage asks for V100 x1; set accelerator: L4 and count: 1, or "
     "remove instance_type (the planner picks one for V100)", "'g6.xlarge'", True),
]


def _params():
    out = []
    for case in CASES:
        marks = [NEEDS_CATALOG] if case[-1] else []
        out.append(pytest.param(*case[1:5], id=case[0], marks=marks))
    return out


def _mutated(mutate) -> dict:
    raw = _example()
    mutate(raw["pipelines"][0])
    return raw


def _isolate_env(monkeypatch) -> None:
    """`spotfleet main` sets these in os.environ; record them so the test restores them.

    (Not SPOTFLEET_PIPELINES: ``--pipelines`` no longer touches the environment.)"""
    for k in ("DAGSTER_HOME", "SPOTFLEET_VAR_DIR"):
        monkeypatch.setenv(k, "")  # records the original value (or its absence) for teardown
        monkeypatch.delenv(k)


def _expected(field: str, message: str, shown: str) -> str:
    return (f"{SRC}: invalid pipeline configuration (1 problem(s)):\n"
            f"  - pipelines[0].{field}: {message} (got {shown})")


def test_the_table_has_at_least_ten_mistakes():
    assert len(CASES) >= 10 and len({c[0] for c in CASES}) == len(CASES)


def test_the_example_passes_semantic_validation():
    [cfg] = parse_pipelines(_example(), SRC)
    assert cfg.name == "demo"


@pytest.mark.parametrize(("mutate", "field", "message", "shown"), _params())
def test_each_mistake_gives_the_exact_message(mutate, field, message, shown):
    with pytest.raises(PipelineConfigError) as err:
        parse_pipelines(_mutated(mutate), SRC)
    assert str(err.value) == _expected(field, message, shown)


@pytest.mark.parametrize(("mutate", "field", "message", "shown"), _params())
def test_spotfleet_main_prints_it_once_and_launches_no_run(mutate, field, message, shown, tmp_path,
                                                          monkeypatch, capsys):
    """No Dagster run exists afterwards, so neither a step retry nor a run retry can happen;
    the code location refuses to load with the same message."""
    from pipelines.cli import main
    from pipelines.definitions import build_definitions

    _isolate_env(monkeypatch)
    bad = tmp_path / SRC
    bad.write_text(yaml.safe_dump(_mutated(mutate), sort_keys=False))
    var = tmp_path / "var"
    rc = main(["main", "--pipelines", str(bad), "--var-dir", str(var)])
    err = capsys.readouterr().err
    line = _expected(field, message, shown).replace(f"{SRC}:", f"{bad}:", 1)
    assert rc == 2
    assert err.count(line) == 1, err
    assert "Traceback" not in err
    assert not (var / "dagster_home" / "storage").exists()  # Dagster never stored a run or event
    monkeypatch.setenv("SPOTFLEET_PIPELINES", str(bad))
    with pytest.raises(PipelineConfigError) as load_err:
        build_definitions(include_gfs=False)
    assert str(load_err.value) == line


def test_all_mistakes_through_one_instance_leave_no_run(tmp_path, monkeypatch, capsys):
    """Every row of the table through `spotfleet main` into one state folder: the Dagster
    instance there has no run at all (nothing to retry, by a step or a run retry)."""
    from dagster import DagsterInstance

    from pipelines.cli import main

    _isolate_env(monkeypatch)
    var = tmp_path / "var"
    rows = [c for c in CASES if CATALOG.is_dir() or not c[-1]]
    for case in rows:
        bad = tmp_path / f"{case[0]}.yaml"
        bad.write_text(yaml.safe_dump(_mutated(case[1]), sort_keys=False))
        assert main(["main", "--pipelines", str(bad), "--var-dir", str(var)]) == 2
    err = capsys.readouterr().err
    assert err.count("invalid pipeline configuration (1 problem(s))") == len(rows)
    with DagsterInstance.from_config(str(var / "dagster_home")) as instance:
        assert instance.run_retries_enabled  # run retries are on, yet there is nothing to retry
        assert instance.get_runs_count() == 0


def test_several_mistakes_are_listed_together():
    raw = _mutated(lambda p: (p.update(deadline_hours=2), _res(p).update(zones=["us-east-1z"])))
    with pytest.raises(PipelineConfigError) as err:
        parse_pipelines(raw, SRC)
    lines = str(err.value).splitlines()
    assert lines[0] == f"{SRC}: invalid pipeline configuration (2 problem(s)):"
    assert lines[1].startswith("  - pipelines[0].deadline_hours: a deadline of 2 h")
    assert lines[2].startswith("  - pipelines[0].stages[0].resources.zones[0]: unknown zone 'us-east-1z'")


@pytest.mark.skipif(not TRACES.is_dir(), reason=f"{TRACES} absent (shared reference data)")
def test_a_trace_market_knows_its_own_zones():
    raw = _mutated(lambda p: (p["market"].update(kind="traces", trace_dir=str(TRACES)),
                              _res(p).update(zones=["us-east-1a", "eu-west-1a"])))
    with pytest.raises(PipelineConfigError) as err:
        parse_pipelines(raw, SRC)
    msg = str(err.value)
    assert "stages[0].resources.zones[1]: the local fleet's market has no trace for zone 'eu-west-1a'" in msg
    assert "add eu-west-1a_v100_1.json there" in msg and "zones[0]" not in msg


def test_a_config_error_at_job_start_is_not_retried(tmp_path, monkeypatch):
    """The script vanishes after the code location loaded: the first step fails once, the
    RetryPolicy is bypassed and Dagster's run retries will not re-execute the run."""
    from dagster import DagsterInstance, DagsterRunStatus
    from dagster._core.events import RunFailureReason
    from dagster._core.execution.retries import auto_reexecution_should_retry_run

    from pipelines.definitions import build_definitions, pipeline_job_name
    from pipelines.home import prepare_dagster_home
    from pipelines.resources import FleetResource, StatsDB

    script = tmp_path / "train.py"
    shutil.copyfile(REPO / "examples" / "train_example.py", script)
    raw = _example()
    for s in raw["pipelines"][0]["stages"]:
        s["script"] = str(script)
    [cfg] = parse_pipelines(raw, SRC)  # valid now
    var = tmp_path / "var"
    defs = build_definitions([cfg], include_gfs=False, resources={
        "stats_db": StatsDB(var_dir=str(var)), "fleet": FleetResource(var_dir=str(var))})
    script.unlink()
    home = prepare_dagster_home(var)
    with DagsterInstance.from_config(str(home)) as instance:
        assert instance.run_retries_enabled and instance.run_retries_max_retries >= 1
        result = defs.resolve_job_def(pipeline_job_name("demo")).execute_in_process(
            instance=instance, raise_on_error=False)
        assert not result.success
        events = result.all_events
        starts = [e for e in events if e.event_type_value == "STEP_START"]
        failures = [e for e in events if e.event_type_value == "STEP_FAILURE"]
        assert [e.step_key for e in starts] == ["demo__spot_market"]  # nothing after it ran
        assert [e.step_key for e in failures] == ["demo__spot_market"]
        assert not [e for e in events if e.event_type_value in ("STEP_UP_FOR_RETRY", "STEP_RESTARTED")]
        err = failures[0].event_specific_data.error.message
        assert "configuration error: pipeline demo (2 problem(s)):" in err
        assert "pipelines[0]" not in err and "stages[1].script: training script not found" in err
        run = instance.get_run_by_id(result.run_id)
        assert run.status == DagsterRunStatus.FAILURE
        assert run.tags["dagster/retry_on_asset_or_op_failure"] == "false"
        assert run.tags.get("dagster/will_retry") == "false"
        assert auto_reexecution_should_retry_run(instance, run, RunFailureReason.STEP_FAILURE) is False
        assert instance.get_runs_count() == 1
        # contrast: the same failed run without our tag would be re-executed by run retries
        untagged = run.with_tags({k: v for k, v in run.tags.items()
                                  if k != "dagster/retry_on_asset_or_op_failure"})
        assert auto_reexecution_should_retry_run(instance, untagged, RunFailureReason.STEP_FAILURE) is True


def test_a_lost_attempt_on_the_local_fleet_waits_one_market_minute():
    """The retry delay is for capacity to come back: one market minute of the local fleet's
    compressed clock (0.5 wall s in the example), the full 2 s on real clouds."""
    from dagster import Backoff

    from assets.pipeline_assets import TRAIN_RETRY, train_retry_policy

    [local] = parse_pipelines(_example(), SRC)
    sky = _mutated(lambda p: (_sky(p), p["market"].update(inject_preemptions_at_steps={},
                                                          lose_attempt_at_step={})))
    [cloud] = parse_pipelines(sky, SRC)
    assert train_retry_policy(local).delay == pytest.approx(30 / 60)
    assert train_retry_policy(local).max_retries == TRAIN_RETRY.max_retries == 3
    assert train_retry_policy(local).backoff == Backoff.EXPONENTIAL
    assert train_retry_policy(cloud) is TRAIN_RETRY and TRAIN_RETRY.delay == 2.0
