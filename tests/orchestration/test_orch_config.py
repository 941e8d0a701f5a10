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
])
def test_bad_input_names_the_field_and_the_fix(patch, field, hint):
    with pytest.raises(PipelineConfigError) as err:
        parse_pipelines({"pipelines": [_base(**patch)]}, "team.yaml")
    msg = str(err.value)
    assert msg.startswith("team.yaml: invalid pipeline configuration")
    assert f"  - {field}" in msg
    assert hint in msg


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
