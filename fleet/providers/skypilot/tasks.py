"""StageSpec -> ``sky.Task`` / ``sky.Resources`` (and their YAML), plus catalog prices.

One ``sky.Resources`` per candidate zone (``infra: aws/<region>/<zone>``), all with the
same accelerator, instance type, ``use_spot`` and ``job_recovery``; the list goes to
``Task.set_resources`` as a list (YAML ``resources.ordered``: try the zones in
preference order) or a set (``resources.any_of``: let the optimizer pick the cheapest).

The training process gets the spotfleet environment (checkpoint URI, events file,
notice sources of the real cloud, grace window) through ``task.envs``.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any

import yaml

from checkpointing import runtime_env as rt
from fleet.providers.base import StageSpec

#: notice sources on a real VM: the cloud's metadata endpoint plus SIGTERM (shutdown)
REAL_NOTICE_SOURCES = {"aws": "aws,signal:SIGTERM", "gcp": "gcp,signal:SIGTERM",
                       "azure": "azure,signal:SIGTERM"}
REAL_GRACE_SECONDS = {"aws": 120.0, "gcp": 30.0, "azure": 30.0}


@dataclass(frozen=True)
class SkyTaskOptions:
    """How a stage becomes a SkyPilot task.

    ``job_recovery`` is SkyPilot's strategy inside one managed job (``EAGER_NEXT_REGION``
    or ``FAILOVER``); spotfleet adds zone blocking on top (see provider.py).
    ``max_restarts_on_errors``: restarts SkyPilot may do on user-code errors.
    ``any_of``: True for ``resources.any_of`` (cheapest first), False for ``ordered``.
    """

    job_recovery: str = "EAGER_NEXT_REGION"
    max_restarts_on_errors: int = 0
    any_of: bool = False
    setup: str | None = None
    workdir: str | None = None
    events_file: str = "~/.spotfleet/events.jsonl"
    extra_envs: dict[str, str] = field(default_factory=dict)


def _region_of(zone: str) -> str:
    return zone[:-1] if zone and zone[-1].isalpha() else zone


def resolve_instance_type(spec: StageSpec, zone: str | None = None, use_spot: bool | None = None) -> str:
    """The cheapest instance type of the catalog with ``spec.accelerator`` x count."""
    if spec.instance_type:
        return spec.instance_type
    import sky.catalog as cat

    spot = spec.use_spot if use_spot is None else use_spot
    types, fuzzy = cat.get_instance_type_for_accelerator(
        spec.accelerator, spec.accelerator_count, use_spot=spot,
        region=_region_of(zone) if zone else None, zone=zone, clouds=spec.clouds[0])
    if not types:
        hint = f" (close matches: {', '.join(fuzzy[:5])})" if fuzzy else ""
        raise ValueError(
            f"StageSpec.accelerator={spec.accelerator!r} x{spec.accelerator_count} is not offered"
            f"{' in ' + zone if zone else ''} by the {spec.clouds[0]} catalog{hint}; pick an "
            "accelerator from the catalog (e.g. A10G or L4) or set StageSpec.instance_type")
    return types[0]


def build_resources(spec: StageSpec, zones: list[str] | None = None, use_spot: bool | None = None,
                    options: SkyTaskOptions | None = None) -> list[Any]:
    """One ``sky.Resources`` per candidate zone (or region, or just the cloud)."""
    import sky

    opts = options or SkyTaskOptions()
    spot = spec.use_spot if use_spot is None else use_spot
    cloud = spec.clouds[0] if spec.clouds else "aws"
    zones = list(spec.zones if zones is None else zones)
    places: list[str] = ([f"{cloud}/{_region_of(z)}/{z}" for z in zones] if zones else
                         [f"{cloud}/{r}" for r in spec.regions] or [cloud])
    out = []
    for place, zone in zip(places, zones or [None] * len(places), strict=True):
        itype = resolve_instance_type(spec, zone, spot)
        out.append(sky.Resources(infra=place, instance_type=itype,
                                 accelerators={spec.accelerator: spec.accelerator_count},
                                 use_spot=spot,
                                 job_recovery={"strategy": opts.job_recovery,
                                               "max_restarts_on_errors": opts.max_restarts_on_errors}))
    return out


def build_task(spec: StageSpec, zones: list[str] | None = None, use_spot: bool | None = None,
               options: SkyTaskOptions | None = None) -> Any:
    """A ``sky.Task`` running ``spec.command`` with the spotfleet environment."""
    import sky

    opts = options or SkyTaskOptions()
    cloud = spec.clouds[0] if spec.clouds else "aws"
    envs = {
        rt.ENV_CHECKPOINT_URI: spec.checkpoint_uri,
        rt.ENV_EVENTS_FILE: opts.events_file,
        rt.ENV_NOTICE_SOURCES: REAL_NOTICE_SOURCES.get(cloud, "signal:SIGTERM"),
        rt.ENV_GRACE_SECONDS: f"{REAL_GRACE_SECONDS.get(cloud, 30.0):g}",
        "SPOTFLEET_STAGE": spec.name,
        **opts.extra_envs,
        **spec.env,
    }
    run = elastic_run_script(spec) if spec.num_nodes > 1 else shlex.join(spec.command)
    task = sky.Task(name=spec.name, run=run, setup=opts.setup,
                    workdir=opts.workdir, envs=envs, num_nodes=spec.num_nodes)
    resources = build_resources(spec, zones, use_spot, opts)
    task.set_resources(set(resources) if opts.any_of else resources)
    return task


#: port of the c10d rendezvous store on the head node
RDZV_PORT = 29400


def elastic_run_script(spec: StageSpec, port: int = RDZV_PORT) -> str:
    """The ``run`` of a multi-node task: every node starts a torch elastic agent
    (``checkpointing.elastic_run``, c10d rendezvous, ``--nnodes 1:K``); the head node
    (first line of ``SKYPILOT_NODE_IPS``, ``SKYPILOT_NODE_RANK`` 0) hosts the rendezvous
    store. ``spec.command`` must be ``[python, script.py, args...]`` (docs/elastic.md)."""
    if len(spec.command) < 2 or not spec.command[1].endswith(".py"):
        raise ValueError(f"StageSpec.command={spec.command!r}: a multi-node stage runs "
                         "[python, script.py, args...] with checkpointing.elastic.ElasticSession "
                         "(e.g. examples/train_elastic.py)")
    py, script, *args = spec.command
    tail = shlex.join(["--", script, *args])
    return "\n".join([
        'HEAD_IP=$(echo "$SKYPILOT_NODE_IPS" | head -n1)',
        'NODE_IP=$(echo "$SKYPILOT_NODE_IPS" | sed -n "$((SKYPILOT_NODE_RANK + 1))p")',
        'HOST_STORE=""',
        'if [ "$SKYPILOT_NODE_RANK" = "0" ]; then HOST_STORE="--host-store"; fi',
        'export SPOTFLEET_NODE_ID="${SKYPILOT_TASK_ID}-n${SKYPILOT_NODE_RANK}"',
        f'exec {shlex.quote(py)} -m checkpointing.elastic_run --nnodes "1:$SKYPILOT_NUM_NODES" '
        f'--rdzv-endpoint "$HEAD_IP:{port}" --rdzv-id "$SKYPILOT_TASK_ID" '
        f'--local-addr "$NODE_IP" $HOST_STORE {tail}',
    ]) + "\n"


def task_to_yaml(task: Any) -> str:
    """The task as SkyPilot task YAML (``sky jobs launch task.yaml`` accepts it).

    SkyPilot's internal keys (``_user_specified_yaml`` after a parse) are left out.
    """
    config = {k: v for k, v in task.to_yaml_config().items() if not k.startswith("_")}
    return yaml.safe_dump(config, sort_keys=False)


def task_from_yaml(text: str) -> Any:
    """Parse SkyPilot task YAML back into a ``sky.Task``.

    Accepts a single task document or SkyPilot's one-task chain-DAG form (a header
    document holding only ``name`` followed by the task), which the SDK sends to the
    API server.
    """
    import sky

    docs = [d for d in yaml.safe_load_all(text) if d is not None]
    if len(docs) == 2 and isinstance(docs[0], dict) and set(docs[0]) <= {"name", "execution"}:
        docs = docs[1:]
    if len(docs) != 1:
        raise ValueError(f"task YAML must hold exactly one task document, found {len(docs)}")
    config = docs[0]
    if not isinstance(config, dict):
        raise ValueError("task YAML must be a mapping with at least 'run' and 'resources'")
    return sky.Task.from_yaml_config(config)


def zones_of(task: Any) -> list[str]:
    """Candidate zones of a task, in its resources order."""
    return [r.zone for r in task.resources if r.zone]


def hourly_price(instance_type: str, spot: bool, zone: str | None = None,
                 region: str | None = None, cloud: str = "aws") -> float:
    """$/h from SkyPilot's catalog: spot per zone, on-demand per region."""
    import sky.catalog as cat

    region = region or (_region_of(zone) if zone else None)
    return float(cat.get_hourly_cost(instance_type, use_spot=spot, region=region,
                                     zone=zone if spot else None, clouds=cloud))
