"""Which job a checkpoint belongs to: a job id (lineage) and a configuration fingerprint.

Every checkpoint's manifest carries ``meta["job"]``::

    {"job_id": "demo/pretrain/8f3c...",      # the lineage: same for every retry / relaunch
     "fingerprint": "1a2b3c4d5e6f7a8b",      # sha256 (16 hex) over the parts below
     "parts": {"model": "<sha of names/shapes/dtypes>", "optimizer": "<class + groups>",
               "scheduler": "LambdaLR", "config": {"seed": 3, "data": {...}, ...}}}

Before a run restores, ``check_job`` compares the identity of this process with that
of every checkpoint on the prefix. A checkpoint of another job id, or of the same job
id with another configuration, raises ``JobConflict`` naming both jobs and the fix:
two different jobs never silently adopt each other's state. Checkpoints written before
identities existed (no ``meta["job"]``) are accepted with a warning.

The job id comes from ``SPOTFLEET_JOB_ID`` (the fleet sets pipeline/stage/run, which
stays the same across Dagster retries and provider relaunches), or
``TrainingSession(job_id=...)``; without either it is ``fp-<fingerprint>``, so two
runs with the same configuration count as one job.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("checkpointing.identity")

ENV_JOB_ID = "SPOTFLEET_JOB_ID"


class JobConflict(RuntimeError):
    """The checkpoint prefix belongs to another job (or another configuration of this one)."""


def _sha(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str,
                                     separators=(",", ":")).encode()).hexdigest()[:16]


def model_signature(model: Any) -> str | None:
    """sha over the model's state_dict names, shapes and dtypes (not the values)."""
    if model is None:
        return None
    sd = model.state_dict()
    return _sha([[k, list(getattr(v, "shape", ())), str(getattr(v, "dtype", type(v).__name__))]
                 for k, v in sd.items()])


#: optimizer hyperparameters that schedulers change while training (not identity)
_MOVING_HYPERPARAMS = frozenset({"lr", "initial_lr", "momentum", "betas", "params"})


def optimizer_signature(optimizer: Any) -> str | None:
    """Class, group sizes and the fixed hyperparameters (not lr, which schedulers move)."""
    if optimizer is None:
        return None
    groups = []
    for g in optimizer.param_groups:
        fixed = {k: v for k, v in g.items() if k not in _MOVING_HYPERPARAMS and
                 isinstance(v, (int, float, str, bool, type(None)))}
        groups.append({"n": len(g["params"]), "shapes": [list(p.shape) for p in g["params"]],
                       "hyper": fixed})
    return _sha([type(optimizer).__name__, groups])


@dataclass(frozen=True)
class JobIdentity:
    """A job id (lineage) plus a fingerprint of what makes its checkpoints compatible."""

    job_id: str
    fingerprint: str
    parts: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def create(cls, *, job_id: str | None = None, model: Any = None, optimizer: Any = None,
               scheduler: Any = None, config: dict[str, Any] | None = None) -> JobIdentity:
        """Fingerprint the structure of model/optimizer/scheduler plus ``config`` (seed, data
        spec, anything JSON-able that must match for a resume to be correct)."""
        parts: dict[str, Any] = {
            "model": model_signature(model),
            "optimizer": optimizer_signature(optimizer),
            "scheduler": type(scheduler).__name__ if scheduler is not None else None,
            "config": json.loads(json.dumps(config or {}, sort_keys=True, default=str)),
        }
        fingerprint = _sha(parts)
        return cls(job_id=job_id or f"fp-{fingerprint[:12]}", fingerprint=fingerprint, parts=parts)

    def to_meta(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "fingerprint": self.fingerprint, "parts": self.parts}

    @staticmethod
    def from_meta(meta: dict[str, Any] | None) -> JobIdentity | None:
        job = (meta or {}).get("job")
        if not isinstance(job, dict) or "job_id" not in job:
            return None
        return JobIdentity(job_id=str(job["job_id"]), fingerprint=str(job.get("fingerprint", "")),
                           parts=dict(job.get("parts") or {}))

    def describe(self) -> str:
        cfg = self.parts.get("config") or {}
        shown = ", ".join(f"{k}={json.dumps(v, sort_keys=True)}" for k, v in sorted(cfg.items()))
        return f"job {self.job_id!r} (fingerprint {self.fingerprint}{'; ' + shown if shown else ''})"


def derived_job_id(ident: JobIdentity) -> bool:
    """The job id was derived from the configuration (no ``SPOTFLEET_JOB_ID`` / ``job_id``)."""
    return bool(ident.fingerprint) and ident.job_id == f"fp-{ident.fingerprint[:12]}"


def differing_parts(a: JobIdentity, b: JobIdentity,
                    detail: dict[str, str] | None = None) -> list[str]:
    """Human-readable list of what differs between two identities' fingerprints (``a``: the
    checkpoint's, ``b``: this process's); ``detail`` names the changed fields of a part."""
    out: list[str] = []
    detail = detail or {}
    for key in ("model", "optimizer", "scheduler"):
        if a.parts.get(key) != b.parts.get(key):
            if key == "scheduler":
                out.append(f"scheduler: {a.parts.get(key)} in the checkpoint, {b.parts.get(key)} now")
            elif detail.get(key):
                out.append(f"{key} structure ({detail[key]})")
            elif key == "optimizer" and detail.get("model"):
                out.append("optimizer structure (the shapes of the model's parameters)")
            else:
                out.append(f"{key} structure")
    ca, cb = a.parts.get("config") or {}, b.parts.get("config") or {}
    for key in sorted(set(ca) | set(cb)):
        if ca.get(key) != cb.get(key):
            out.append(f"{key}: {json.dumps(ca.get(key))} vs {json.dumps(cb.get(key))}")
    return out


def check_job(me: JobIdentity, checkpoints: Iterable[Any], location: str,
              explain: Callable[[Any], dict[str, str]] | None = None) -> None:
    """Raise ``JobConflict`` if any checkpoint (``CheckpointInfo``) on ``location`` was written
    by another job, or by this job with another configuration.

    ``explain(info)`` may name the changed fields of the model / optimizer
    (``{"model": "0.weight: [32, 8] in the checkpoint, [64, 8] now"}``); they are named in
    the message of a changed configuration, and of "another job" when both job ids were
    derived from the configurations (``fp-...``: no job id set, so a changed model IS
    another job id)."""
    legacy = 0
    for info in checkpoints:
        theirs = JobIdentity.from_meta(getattr(info, "meta", None))
        if theirs is None:
            legacy += 1
            continue
        if theirs.job_id == me.job_id and theirs.fingerprint == me.fingerprint:
            continue
        detail: dict[str, str] = {}
        if explain is not None and theirs.fingerprint != me.fingerprint:
            try:
                detail = explain(info) or {}
            except Exception as exc:  # the message must still come out
                log.debug("could not compare %s with this process's state: %s", info.name, exc)
        what = "; ".join(differing_parts(theirs, me, detail)) or "fingerprint"
        if theirs.job_id != me.job_id:
            # both ids derived from the configuration (no job id set): say what changed
            differs = (f" The two configurations differ in: {what}."
                       if derived_job_id(theirs) and derived_job_id(me) else "")
            raise JobConflict(
                f"checkpoint prefix {location} belongs to another job: {info.name} (step {info.step}) "
                f"was written by {theirs.describe()}, but this process is {me.describe()}.{differs} "
                "Two jobs must not share a checkpoint prefix (resuming would train on the other "
                "job's state). Fix: give this job its own SPOTFLEET_CHECKPOINT_URI; or, if this run "
                f"IS a continuation of that job, set SPOTFLEET_JOB_ID={theirs.job_id} and use its "
                "configuration.")
        raise JobConflict(
            f"checkpoint prefix {location} holds job {me.job_id!r} with another configuration: "
            f"{info.name} (step {info.step}) was written with fingerprint {theirs.fingerprint}, "
            f"this process has {me.fingerprint} (differs in: {what}). Resuming would mix two "
            "configurations. Fix: rerun with the configuration the checkpoints were written "
            "with, or start the changed configuration on a fresh SPOTFLEET_CHECKPOINT_URI "
            "(or with another SPOTFLEET_JOB_ID and prefix).")
    if legacy:
        log.warning("%d checkpoint(s) in %s carry no job identity (written by an older spotfleet); "
                    "accepting them as this job's", legacy, location)
