"""Pipeline configuration: what a platform team declares in YAML.

One YAML file holds one or more pipelines::

    pipelines:
      - name: demo
        provider: local            # local | skypilot
        deadline_hours: 2.0
        budget_usd: 50
        data_uri: /data/corpus
        checkpoint_uri: ./var/checkpoints/demo
        stages:
          - name: pretrain
            script: examples/train_example.py
            args: [--steps, "400"]
            resources: {accelerator: V100, count: 1, nodes: 1, zones: [...], spot: true}
          - name: finetune
            after: [pretrain]
            ...

Every field is validated; :func:`load_pipelines` raises :class:`PipelineConfigError`
whose message names the file, the field path and how to fix it. Durations are in
hours unless the field name says otherwise; money in US dollars; prices in $/h.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from fleet.market.config import MarketConfig  # the market section lives with the market (fleet/)
from fleet.policies.registry import DEFAULT_POLICY, check_policy_name

_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")


class PipelineConfigError(ValueError):
    """The pipeline YAML is invalid; the message names the field and the fix."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _check_name(value: str, what: str) -> str:
    if not _NAME_RE.match(value):
        raise ValueError(
            f"{what} {value!r} must be lower-case letters, digits and underscores, starting "
            f"with a letter (it becomes part of a Dagster asset key), e.g. 'pretrain'"
        )
    return value


class StageResources(_Strict):
    """Where a stage may run. ``zones`` are in preference order."""

    accelerator: str = "V100"
    count: int = Field(1, ge=1, le=16, description="accelerators per node")
    nodes: int = Field(1, ge=1, le=64, description="nodes per stage (one node group)")
    clouds: list[str] = Field(default_factory=lambda: ["aws"])
    regions: list[str] = Field(default_factory=list)
    zones: list[str] = Field(default_factory=list)
    spot: bool = True
    instance_type: str | None = None

    @field_validator("clouds")
    @classmethod
    def _clouds(cls, v: list[str]) -> list[str]:
        known = {"aws", "gcp", "azure", "local"}
        bad = [c for c in v if c not in known]
        if bad:
            raise ValueError(f"unknown cloud(s) {bad}; use some of {sorted(known)}")
        if not v:
            raise ValueError("list at least one cloud, e.g. [aws]")
        return v


class StageConfig(_Strict):
    """One training stage: a script (run with the project's Python) or a full command."""

    name: str
    script: str | None = None
    command: list[str] | None = None
    args: list[str] = Field(default_factory=list)
    after: list[str] | None = Field(
        None, description="stages that must finish first; default: the previous stage")
    resources: StageResources = Field(default_factory=StageResources)
    work_hours: float = Field(
        1.0, gt=0, description="expected useful compute in hours (for planning)")
    checkpoint_uri: str | None = Field(
        None, description="default: <pipeline checkpoint_uri>/<stage name>")
    max_relaunches: int = Field(20, ge=0, description="relaunches after preemptions per attempt")
    stall_timeout_seconds: float | str | None = Field(
        "auto", description="progress watchdog (local fleet), wall seconds: a running node with no "
                            "training event this long is killed and relaunched from its checkpoint (a multi-node "
                            "stage: no event from any node, the whole group); "
                            "'auto' = max(120, 20 x mean step s x steps per progress); 0 / null: off")
    stall_startup_seconds: float | int = Field(
        600.0, description="the watchdog's limit (wall s) from a node's start to its first progress "
                           "event (the first steps may be slow)")
    terminate_grace_seconds: float | str = Field(
        "auto", description="an operator's Terminate (local fleet), wall seconds: each running node "
                            "gets a preemption notice (emergency save) and is killed if still running "
                            "this long after; 'auto' = the fleet's notice window (market.grace_seconds); "
                            "0 = kill at once (losing the steps since the last checkpoint)")
    env: dict[str, str] = Field(default_factory=dict)
    policy: str = Field(
        DEFAULT_POLICY, description="fleet policy that places and moves the stage's nodes, by its "
                                    "name in fleet/policies/registry.py (the one fleet-sim evaluates)")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _check_name(v, "stage name")

    @field_validator("policy")
    @classmethod
    def _policy(cls, v: str) -> str:
        return check_policy_name(v, "policy")

    @field_validator("args", "command", mode="before")
    @classmethod
    def _argv(cls, v: object, info) -> object:  # noqa: ANN001 - pydantic's ValidationInfo
        """A YAML argv may hold integers (``args: [--steps, 200]``): they are the argv words of
        their decimal text; anything else that is not a string (a float, whose text YAML does
        not keep: ``1.10`` -> ``1.1``; a mapping, a bool) is an error naming the field."""
        if not isinstance(v, list):
            return v
        out = []
        for i, x in enumerate(v):
            if isinstance(x, bool) or not isinstance(x, str | int):
                raise ValueError(f"{info.field_name}[{i}]={x!r} is not an argv word; write it as a string, "
                                 f"e.g. {info.field_name}: [--steps, \"200\"]")
            out.append(x if isinstance(x, str) else str(x))
        return out

    @field_validator("stall_timeout_seconds", mode="before")
    @classmethod
    def _stall_timeout(cls, v: object) -> object:
        from fleet.providers.stall import check_stall_timeout

        return check_stall_timeout(v)

    @field_validator("terminate_grace_seconds", mode="before")
    @classmethod
    def _terminate_grace(cls, v: object) -> object:
        from fleet.providers.terminate import check_terminate_grace

        return check_terminate_grace(v)

    @field_validator("stall_startup_seconds", mode="before")
    @classmethod
    def _stall_startup(cls, v: object) -> float:
        from fleet.providers.stall import check_stall_startup

        return check_stall_startup(v)

    @model_validator(mode="after")
    def _script_or_command(self) -> StageConfig:
        if (self.script is None) == (self.command is None):
            raise ValueError(
                "give exactly one of 'script' (a Python file run with the project's "
                "interpreter, e.g. examples/train_example.py) or 'command' (full argv list)")
        if self.command is not None and not self.command:
            raise ValueError("'command' is empty; give the argv list, e.g. [python, train.py]")
        return self

    def argv(self, python: str | None = None) -> list[str]:
        """The training process argv (script stages run with ``python``)."""
        if self.script is not None:
            return [python or sys.executable, self.script, *self.args]
        return [*(self.command or []), *self.args]


class PipelineConfig(_Strict):
    """One pipeline: an ordered set of stages with a deadline and a budget."""

    name: str
    description: str = ""
    provider: Literal["local", "skypilot"] = "local"
    deadline_hours: float = Field(24.0, gt=0, allow_inf_nan=False)
    budget_usd: float = Field(1000.0, gt=0, allow_inf_nan=False)
    budget_period: Literal["run", "day"] = Field(
        "run", description="what budget_usd caps: one run (with its retries) or one UTC day (all runs)")
    enforce_budget: bool = Field(
        False, description="true: a stage whose launch would push the period's spend (plus its "
                           "expected cost) over budget_usd is not launched; false: warn only")
    data_uri: str | None = None
    checkpoint_uri: str = Field(..., description="root for checkpoints: a directory or s3://bucket/prefix")
    on_demand_fallback: bool = True
    market: MarketConfig = Field(default_factory=MarketConfig)
    stages: list[StageConfig]
    schedule_cron: str | None = Field(
        "0 * * * *", description="cron for refreshing statistics and cost assets; null: none")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _check_name(v, "pipeline name")

    @field_validator("schedule_cron")
    @classmethod
    def _cron(cls, v: str | None) -> str | None:
        # the test ScheduleDefinition applies (it raised DagsterInvalidDefinitionError at load),
        # through Dagster's public API: building a throwaway schedule with this cron string
        from dagster import DagsterInvalidDefinitionError, ScheduleDefinition

        if v is None:
            return v
        try:
            ScheduleDefinition(name="cron_check", cron_schedule=v, job_name="cron_check")
        except DagsterInvalidDefinitionError:
            raise ValueError("not a cron expression; give five fields 'minute hour day-of-month month "
                             "day-of-week' (e.g. \"0 * * * *\" for every hour) or @hourly / @daily, "
                             "or null for no schedule") from None
        return v

    @model_validator(mode="after")
    def _graph(self) -> PipelineConfig:
        if not self.stages:
            raise ValueError("a pipeline needs at least one stage under 'stages'")
        names = [s.name for s in self.stages]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"stage names must be unique; repeated: {dup}")
        seen: set[str] = set()
        for s in self.stages:
            for dep in self.stage_deps(s):
                if dep == s.name:
                    raise ValueError(f"stage {s.name!r} is after itself; a stage cannot wait for itself: "
                                     f"remove {dep!r} from its 'after' list")
                if dep not in names:
                    raise ValueError(f"stage {s.name!r} is after unknown stage {dep!r}; known: {names}")
                if dep not in seen:
                    cycle = self._path(dep, s.name)
                    if cycle:
                        ring = " -> ".join(repr(n) for n in [s.name, *cycle])
                        raise ValueError(
                            f"stages form a cycle: {ring} (each is after the next); no order can run "
                            "them; remove one of these 'after' entries")
                    raise ValueError(
                        f"stage {s.name!r} is after {dep!r}, which is listed later; list "
                        f"stages in dependency order (move {dep!r} before {s.name!r})")
            seen.add(s.name)
        return self

    def _path(self, start: str, goal: str) -> list[str] | None:
        """Stage names from ``start`` to ``goal`` following explicit 'after' lists, or None (the
        default edge, "after the previous stage", follows the order: reordering breaks it)."""
        by_name = {s.name: s for s in self.stages}
        todo, came = [start], {start: None}
        while todo:
            cur = todo.pop()
            if cur == goal:
                path = [cur]
                while came[path[-1]] is not None:
                    path.append(came[path[-1]])
                return path[::-1]
            for nxt in (by_name[cur].after or []) if cur in by_name else []:  # explicit edges only
                if nxt not in came:
                    came[nxt] = cur
                    todo.append(nxt)
        return None

    def stage_deps(self, stage: StageConfig) -> list[str]:
        """Names of the stages ``stage`` waits for."""
        if stage.after is not None:
            return list(stage.after)
        idx = [s.name for s in self.stages].index(stage.name)
        return [self.stages[idx - 1].name] if idx > 0 else []

    def stage_checkpoint_uri(self, stage: StageConfig, base_dir: Path | None = None) -> str:
        """Checkpoint location of a stage (relative local paths resolve against base_dir)."""
        uri = stage.checkpoint_uri or f"{self.checkpoint_uri.rstrip('/')}/{stage.name}"
        if "://" in uri or Path(uri).is_absolute():
            return uri
        return str(((base_dir or Path.cwd()) / uri).resolve())


class PipelinesFile(_Strict):
    pipelines: list[PipelineConfig]

    @model_validator(mode="after")
    def _unique(self) -> PipelinesFile:
        names = [p.name for p in self.pipelines]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"pipeline names must be unique; repeated: {dup}")
        return self


def _got(err) -> str:
    """`` (got <value>)`` for a field's value; nothing for a missing field or a whole pipeline /
    stage mapping (a model-level error: the path names it), long values cut."""
    if err["type"] == "missing" or isinstance(err.get("input"), dict):
        return ""
    text = repr(err.get("input"))
    return f" (got {text if len(text) <= 120 else text[:117] + '...'})"


def _format_errors(source: str, exc: ValidationError) -> str:
    lines = [f"{source}: invalid pipeline configuration ({exc.error_count()} problem(s)):"]
    for err in exc.errors():
        loc = ".".join(str(p) if not isinstance(p, int) else f"[{p}]" for p in err["loc"])
        loc = loc.replace(".[", "[") or "(top level)"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown field; remove it or check the spelling against docs/dagster.md"
        elif err["type"] == "missing":
            msg = "required field is missing; add it"
        lines.append(f"  - {loc}: {msg}{_got(err)}")
    return "\n".join(lines)


def parse_pipelines(data: object, source: str = "<config>", *, semantic: bool = True) -> list[PipelineConfig]:
    """Validate already-parsed YAML/JSON data (a mapping with ``pipelines:`` or one pipeline).

    First the shape (pydantic), then, with ``semantic``, what the values mean against the
    catalog and the market (``pipelines/validation.py``: accelerator, instance type,
    zones, deadline feasibility, script paths). Either raises one
    :class:`PipelineConfigError` listing every problem with its field and fix.
    """
    if isinstance(data, dict) and "pipelines" not in data and "stages" in data:
        data = {"pipelines": [data]}
    if not isinstance(data, dict):
        raise PipelineConfigError(f"{source}: top level must be a mapping with a 'pipelines:' list")
    try:
        pipelines = list(PipelinesFile.model_validate(data).pipelines)
    except ValidationError as exc:
        raise PipelineConfigError(_format_errors(source, exc)) from None
    if semantic:
        from pipelines.validation import check_pipelines

        problems = check_pipelines(pipelines)
        if problems:
            raise PipelineConfigError("\n".join(
                [f"{source}: invalid pipeline configuration ({len(problems)} problem(s)):"]
                + [p.line() for p in problems]))
    return pipelines


def load_pipelines(path: str | Path) -> list[PipelineConfig]:
    """Load and validate a pipelines YAML file."""
    p = Path(path)
    try:
        raw = yaml.safe_load(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PipelineConfigError(f"{p}: no such pipelines file; set SPOTFLEET_PIPELINES to a YAML path") from None
    except yaml.YAMLError as exc:
        raise PipelineConfigError(f"{p}: not valid YAML: {exc}") from None
    return parse_pipelines(raw, str(p))


EXAMPLE_PIPELINES = Path(__file__).parent / "examples" / "two_stage.yaml"


def load_default_pipelines(paths: str | None = None) -> list[PipelineConfig]:
    """Pipelines from ``paths``, else ``$SPOTFLEET_PIPELINES``, else the example.

    ``paths`` is one YAML file or several (':'-separated), e.g. a command's ``--pipelines``:
    it overrides the environment for this call only, so a flag given to one in-process
    command never changes what a later one (or the code location) loads.
    """
    import os

    raw = paths or os.environ.get("SPOTFLEET_PIPELINES")
    paths = [Path(x) for x in raw.split(os.pathsep) if x] if raw else [EXAMPLE_PIPELINES]
    out: list[PipelineConfig] = []
    for p in paths:
        out.extend(load_pipelines(p))
    names = [p.name for p in out]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise PipelineConfigError(f"pipeline names must be unique across files; repeated: {dup}")
    return out
