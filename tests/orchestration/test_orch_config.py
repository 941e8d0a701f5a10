"""Pipeline YAML: the example loads, several pipelines coexist, bad input names the field and the fix."""

from __future__ import annotations

import pytest
import yaml

from pipelines.config import (
    EXAMPLE_PIPELINES,
    PipelineConfigError,
    load_default_pipelines,
    load_pipelines,
    parse_pipelines,
)


def _base(**over):
    p = {"name": "p1", "checkpoint_uri": "checkpoints/p1",
         "stages": [{"name": "pretrain", "script": "examples/train_example.py"},
                    {"name": "finetune", "script": "examples/train_example.py"}]}
    p.update(over)
    return p


def test_example_is_a_two_stage_local_pipeline():
    [cfg] = load_pipelines(EXAMPLE_PIPELINES)
    assert cfg.provider == "local"
    assert [s.name for s in cfg.stages] == ["pretrain", "finetune"]
    assert cfg.stage_deps(cfg.stages[1]) == ["pretrain"]
    assert cfg.stages[0].argv("py")[:2] == ["py", "examples/train_example.py"]


def test_several_pipelines_in_one_file_and_across_files(tmp_path, monkeypatch):
    a = tmp_path / "a.yaml"
    b = tmp_path / "b.yaml"
    a.write_text(yaml.safe_dump({"pipelines": [_base(name="alpha"), _base(name="beta")]}))
    b.write_text(yaml.safe_dump(_base(name="gamma")))  # a single pipeline without the list
    monkeypatch.setenv("SPOTFLEET_PIPELINES", f"{a}:{b}")
    assert [p.name for p in load_default_pipelines()] == ["alpha", "beta", "gamma"]
    b.write_text(yaml.safe_dump(_base(name="alpha")))
    with pytest.raises(PipelineConfigError, match="unique across files.*alpha"):
        load_default_pipelines()


@pytest.mark.parametrize(("patch", "field", "hint"), [
    ({"name": "Bad Name"}, "pipelines[0].name", "lower-case"),
    ({"deadline_hours": -1}, "pipelines[0].deadline_hours", "greater than 0"),
    ({"provider": "gke"}, "pipelines[0].provider", "'local' or 'skypilot'"),
    ({"stages": [{"name": "a", "script": "x.py", "resources": {"count": 0}}]},
     "pipelines[0].stages[0].resources.count", "greater than or equal to 1"),
    ({"stages": [{"name": "a", "script": "x.py", "resources": {"clouds": ["ibm"]}}]},
     "pipelines[0].stages[0].resources.clouds", "use some of"),
    ({"stages": [{"name": "a", "script": "x.py", "gpus": 8}]}, "pipelines[0].stages[0].gpus", "remove it"),
    ({"stages": [{"name": "a"}]}, "pipelines[0].stages[0]", "exactly one of 'script'"),
    ({"stages": [{"name": "a", "script": "x.py", "after": ["zzz"]}]}, "pipelines[0]", "unknown stage 'zzz'"),
    ({"stages": [{"name": "a", "script": "x.py", "after": ["b"]}, {"name": "b", "script": "x.py"}]},
     "pipelines[0]", "dependency order"),
    ({"market": {"kind": "traces"}}, "pipelines[0].market", "trace_dir"),
    # until 2026-11-28: "'finetune' is after 'finetune', which is listed later"
    ({"stages": [{"name": "pretrain", "script": "x.py"}, {"name": "finetune", "script": "x.py",
                                                          "after": ["finetune"]}]},
     "pipelines[0]", "stage 'finetune' is after itself; a stage cannot wait for itself"),
    ({"stages": [{"name": "a", "script": "x.py", "after": ["b"]}, {"name": "b", "script": "x.py", "after": ["a"]}]},
     "pipelines[0]", "stages form a cycle: 'a' -> 'b' -> 'a' (each is after the next)"),
    # until 2026-11-28 accepted by the loader; build_definitions raised DagsterInvalidDefinitionError
    ({"schedule_cron": "every hour"}, "pipelines[0].schedule_cron", "not a cron expression"),
    ({"deadline_hours": float("inf")}, "pipelines[0].deadline_hours", "finite number"),
    ({"budget_usd": float("inf")}, "pipelines[0].budget_usd", "finite number"),
    ({"market": {"lose_attempt_at_step": {"pretrain": -5}}},
     "pipelines[0].market.lose_attempt_at_step.pretrain", "greater than or equal to 0"),
    ({"market": {"inject_preemptions_at_steps": {"pretrain": [10, -1]}}},
     "pipelines[0].market.inject_preemptions_at_steps.pretrain[1]", "greater than or equal to 0"),
])
def test_bad_input_names_the_field_and_the_fix(patch, field, hint):
    with pytest.raises(PipelineConfigError) as err:
        parse_pipelines({"pipelines": [_base(**patch)]}, "team.yaml")
    msg = str(err.value)
    assert msg.startswith("team.yaml: invalid pipeline configuration")
    assert f"  - {field}" in msg
    assert hint in msg


def test_a_pipeline_level_error_does_not_repeat_the_whole_pipeline():
    """A model-level problem's path names the pipeline; the message used to end with
    "(got {...the entire pipeline dict...})" (~1.6 KB for the example)."""
    with pytest.raises(PipelineConfigError) as err:
        parse_pipelines({"pipelines": [_base(stages=[{"name": "a", "script": "x.py", "after": ["zzz"]}])]}, "t.yaml")
    [line] = [x for x in str(err.value).splitlines() if x.startswith("  - ")]
    assert line.startswith("  - pipelines[0]: stage 'a' is after unknown stage 'zzz'") and "(got {" not in line
    with pytest.raises(PipelineConfigError) as err:
        parse_pipelines({"pipelines": [_base(description=["x" * 500])]}, "t.yaml")
    assert len(str(err.value).splitlines()[1]) < 250 and "...)" in str(err.value)


def test_a_bad_cron_is_a_config_error_not_a_definition_traceback(tmp_path):
    from pipelines.definitions import build_definitions

    bad = tmp_path / "p.yaml"
    bad.write_text(yaml.safe_dump({"pipelines": [_base(schedule_cron="every hour")]}))
    with pytest.raises(PipelineConfigError) as err:
        build_definitions(load_pipelines(bad), include_gfs=False)
    assert "pipelines[0].schedule_cron: not a cron expression" in str(err.value)
    assert "(got 'every hour')" in str(err.value)
    for ok in ("0 * * * *", "@daily", None):
        [cfg] = parse_pipelines({"pipelines": [_base(schedule_cron=ok)]}, "t.yaml", semantic=False)
        assert cfg.schedule_cron == ok


def test_missing_file_and_broken_yaml_say_what_to_do(tmp_path):
    with pytest.raises(PipelineConfigError, match="SPOTFLEET_PIPELINES"):
        load_pipelines(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("pipelines: [\n")
    with pytest.raises(PipelineConfigError, match="not valid YAML"):
        load_pipelines(bad)


def test_checkpoint_locations_resolve_per_stage(tmp_path):
    [cfg] = parse_pipelines({"pipelines": [_base(checkpoint_uri="s3://bucket/ck")]})
    assert cfg.stage_checkpoint_uri(cfg.stages[0]) == "s3://bucket/ck/pretrain"
    [cfg] = parse_pipelines({"pipelines": [_base()]})
    assert cfg.stage_checkpoint_uri(cfg.stages[1], tmp_path) == str(tmp_path / "checkpoints/p1/finetune")


def _renamed_example(path, name: str):
    raw = yaml.safe_load(EXAMPLE_PIPELINES.read_text(encoding="utf-8"))
    raw["pipelines"][0]["name"] = name
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_a_pipelines_flag_is_scoped_to_its_call(tmp_path, monkeypatch, capsys):
    """`--pipelines X` does not leak into a later in-process call (issue: it used to set
    os.environ): without the flag the next call reads the caller's $SPOTFLEET_PIPELINES, or
    the example when that is unset; the caller's variable is left as it was."""
    import os

    from pipelines.cli import main

    alpha = _renamed_example(tmp_path / "alpha.yaml", "alpha")
    beta = _renamed_example(tmp_path / "beta.yaml", "beta")
    # an empty, migrated database (cost-report reads one; it creates none): "no run of pipeline <name>"
    var = tmp_path / "var"
    var.mkdir()
    assert main(["db", "upgrade", "--url", f"sqlite:///{var / 'spotfleet.db'}"]) == 0
    capsys.readouterr()
    common = ["cost-report", "--var-dir", str(var)]

    def pipeline_used(*flag: str) -> str:
        assert main([*common, *flag]) == 1
        out = capsys.readouterr().out
        assert "no run of pipeline " in out, out
        return out.split("no run of pipeline ", 1)[1].split()[0]

    monkeypatch.delenv("SPOTFLEET_PIPELINES", raising=False)
    assert pipeline_used("--pipelines", str(alpha)) == "alpha"
    assert "SPOTFLEET_PIPELINES" not in os.environ
    assert pipeline_used() == "demo"  # the example again
    monkeypatch.setenv("SPOTFLEET_PIPELINES", str(beta))
    assert pipeline_used("--pipelines", str(alpha)) == "alpha"
    assert os.environ["SPOTFLEET_PIPELINES"] == str(beta)
    assert pipeline_used() == "beta"  # the caller's environment again


def test_spotfleet_main_pipelines_flag_leaves_the_environment_alone(tmp_path, monkeypatch, capsys):
    """Same for `spotfleet main` (a config error stops it before Dagster: a cheap call)."""
    import os

    from pipelines.cli import main

    for k in ("DAGSTER_HOME", "SPOTFLEET_VAR_DIR"):  # main still sets these two in-process
        monkeypatch.setenv(k, "")
        monkeypatch.delenv(k)
    bad = tmp_path / "bad.yaml"
    bad.write_text("pipelines: [\n")
    other = tmp_path / "other.yaml"
    other.write_text("pipelines: [\n")
    var = str(tmp_path / "var")
    monkeypatch.delenv("SPOTFLEET_PIPELINES", raising=False)
    assert main(["main", "--pipelines", str(bad), "--var-dir", var]) == 2
    assert f"{bad}: not valid YAML" in capsys.readouterr().err
    assert "SPOTFLEET_PIPELINES" not in os.environ
    assert [c.name for c in load_default_pipelines()] == ["demo"]
    monkeypatch.setenv("SPOTFLEET_PIPELINES", str(other))
    assert main(["main", "--pipelines", str(bad), "--var-dir", var]) == 2
    assert os.environ["SPOTFLEET_PIPELINES"] == str(other)
    capsys.readouterr()
    assert main(["main", "--var-dir", var]) == 2  # no flag: the caller's file
    err = capsys.readouterr().err
    assert f"{other}: not valid YAML" in err and str(bad) not in err


def test_numbers_in_an_argv_are_its_words_and_other_values_name_the_field():
    """`args: [--steps, 200]` (a YAML number) is the argv `--steps 200`; before 2026-11-28 it
    failed with pydantic's "Input should be a valid string", no fix given."""
    stage = {"name": "s", "script": "examples/train_example.py", "args": ["--steps", 200, "--lr", "0.5"]}
    [cfg] = parse_pipelines({"pipelines": [{"name": "p", "checkpoint_uri": "file:///tmp/argv19",
                                            "stages": [stage]}]}, semantic=False)
    assert cfg.stages[0].args == ["--steps", "200", "--lr", "0.5"]
    # a float's text is not kept by YAML (1.10 -> 1.1), a mapping is no word: named, not guessed
    for bad, shown in (({"n": 1}, "{'n': 1}"), (1.10, "1.1")):
        stage["args"] = ["--steps", bad]
        with pytest.raises(PipelineConfigError) as e:
            parse_pipelines({"pipelines": [{"name": "p", "checkpoint_uri": "file:///tmp/argv19",
                                            "stages": [stage]}]}, semantic=False)
        assert f"args[1]={shown} is not an argv word; write it as a string" in str(e.value)
