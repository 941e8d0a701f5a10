"""The wire format of the run contract: StageSpec, NodeSession and Event as JSON-able
dicts, for the Dagster Pipes extras (asset -> node runner) and the stage result
(node runner -> asset). Both sides import it from here, so neither imports the other.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from checkpointing.events import Event
from fleet.contract import RunPriors
from fleet.providers.base import NodeSession, StageSpec

_TUPLES = ("clouds", "regions", "zones")


def spec_to_dict(spec: StageSpec) -> dict[str, Any]:
    d = dataclasses.asdict(spec)
    for k in _TUPLES:
        d[k] = list(d[k])
    d["priors"] = spec.priors.to_dict()
    return d


def spec_from_dict(d: dict[str, Any]) -> StageSpec:
    """A StageSpec from its dict; unknown keys are an error naming them."""
    d = dict(d)
    fields = {f.name for f in dataclasses.fields(StageSpec)}
    unknown = sorted(set(d) - fields)
    if unknown:
        raise ValueError(f"stage spec: unknown field(s) {unknown}; known: {sorted(fields)}")
    for k in _TUPLES:
        d[k] = tuple(d.get(k) or ())
    d["priors"] = RunPriors.from_dict(d.get("priors"))
    return StageSpec(**d)


def session_to_dict(s: NodeSession) -> dict[str, Any]:
    return dataclasses.asdict(s)


def session_from_dict(d: dict[str, Any]) -> NodeSession:
    fields = {f.name for f in dataclasses.fields(NodeSession)}
    return NodeSession(**{k: v for k, v in d.items() if k in fields})


def event_to_dict(e: Event) -> dict[str, Any]:
    return {"kind": e.kind, "time": e.time, "node_id": e.node_id, "data": e.data}


def event_from_dict(d: dict[str, Any]) -> Event:
    return Event(kind=d["kind"], time=float(d["time"]), node_id=d.get("node_id"),
                 data=d.get("data") or {})
