"""Environment variables through which the fleet configures a training process.

The provider (local or SkyPilot) sets these; a user's script never needs to read
them itself — ``checkpointing.session`` does. All durations are in SECONDS.

    SPOTFLEET_CHECKPOINT_URI   where checkpoints go: ``/abs/dir``, ``file:///abs/dir`` or
                               ``s3://bucket/prefix`` (endpoint from AWS_ENDPOINT_URL)
    SPOTFLEET_EVENTS_FILE      JSONL events file (checkpointing.events)
    SPOTFLEET_NODE_ID          id of this node session (for events)
    SPOTFLEET_ZONE             emulated or real zone name (informational)
    SPOTFLEET_MTTP_SECONDS     mean time to preemption estimate (the plan's prior for the
                               zone the node runs in; both providers set it)
    SPOTFLEET_RESTART_SECONDS  restart cost R (allocation + preparation + restore);
                               ``DEFAULT_RESTART_SECONDS`` (360) when nothing sets it
    SPOTFLEET_INTERVAL_SECONDS the plan's insurance interval (informational: the adaptive
                               policy computes its own, from the same C, MTTP and R first,
                               so its first interval equals this one)
    SPOTFLEET_CHECKPOINT_SECONDS the plan's checkpoint time C: the adaptive policy's prior
                               for delta, weighted as SPOTFLEET_CHECKPOINT_PRIOR_WEIGHT
                               saves (default 10, checkpointing.policy.CKPT_PRIOR_WEIGHT)
                               in the mean of the measured stalls; no bootstrap save then
    SPOTFLEET_STATS_FILE       JSON file {"mttp_seconds": .., "restart_seconds": ..}
                               re-read when it changes; overrides the two above (the
                               providers refresh it during the attempt from what the
                               attempt observed: fleet/contract.py)
    SPOTFLEET_LOSS_UNITS       elastic multi-node stages: how many independent failure units
                               (zones, co-located nodes failing together) the group spans;
                               SPOTFLEET_MTTP_SECONDS is then ONE unit's MTTP and rank 0
                               insures against losing all of them at once
                               (checkpointing.intervals.group_loss_mttp_seconds); 1 (the
                               default) is the single-node meaning. The stats file may
                               carry it as "loss_units" (docs/elastic.md)
    SPOTFLEET_GRACE_SECONDS    notice window T_grace (default 30)
    SPOTFLEET_JOB_ID           the job (lineage) the checkpoints belong to; the pipelines set
                               <pipeline>/<stage>/<root run> (checkpointing.identity)
    SPOTFLEET_LEASE_TTL_SECONDS  lease on the checkpoint prefix, renewed every ttl/3
                               (default 60; checkpointing.lease)
    SPOTFLEET_NOTICE_SOURCES   comma list: ``signal:SIGTERM``, ``aws:http://host:port``,
                               ``gcp:http://host:port``, ``azure:http://host:port``
                               (default ``signal:SIGTERM``)

Fault bounds (issue 9; docs/checkpointing.md "Failure modes"), all optional:

    SPOTFLEET_SAVE_WAIT_SECONDS    longest wait of the loop for a save in flight (10)
    SPOTFLEET_FINAL_SAVE_TIMEOUT_SECONDS  longest wait of finish() for the final save (300)
    SPOTFLEET_SPILL_DIR            local spill area for emergency checkpoints the store
                                   cannot take in time (default under the temp dir; off)
    SPOTFLEET_S3_CONNECT_TIMEOUT_SECONDS / _READ_TIMEOUT_SECONDS / SPOTFLEET_S3_MAX_ATTEMPTS
                                   per-request S3 bounds (3 / 20 / 3 tries)
    SPOTFLEET_EARLY_SIGTERM        ``off``: no recording SIGTERM handler at import
"""

from __future__ import annotations

import math
import os
import threading

EXIT_PREEMPTED = 75  # EX_TEMPFAIL: exited cleanly after a notice (emergency save done or not)
EXIT_COMPLETED = 0

ENV_CHECKPOINT_URI = "SPOTFLEET_CHECKPOINT_URI"
ENV_EVENTS_FILE = "SPOTFLEET_EVENTS_FILE"
ENV_NODE_ID = "SPOTFLEET_NODE_ID"
ENV_ZONE = "SPOTFLEET_ZONE"
ENV_MTTP_SECONDS = "SPOTFLEET_MTTP_SECONDS"
ENV_RESTART_SECONDS = "SPOTFLEET_RESTART_SECONDS"
ENV_INTERVAL_SECONDS = "SPOTFLEET_INTERVAL_SECONDS"
ENV_CHECKPOINT_SECONDS = "SPOTFLEET_CHECKPOINT_SECONDS"
ENV_CHECKPOINT_PRIOR_WEIGHT = "SPOTFLEET_CHECKPOINT_PRIOR_WEIGHT"

#: R (s) when neither the caller, the environment nor the stats file gives one: 6 minutes,
#: the same prior the planner, fleet-sim and the SkyPilot provider use (fleet/contract.py
#: re-exports it). Not 0: R = 0 would shorten tau by sqrt(MTTP / (MTTP + R)).
DEFAULT_RESTART_SECONDS = 360.0
ENV_STATS_FILE = "SPOTFLEET_STATS_FILE"
ENV_LOSS_UNITS = "SPOTFLEET_LOSS_UNITS"
ENV_GRACE_SECONDS = "SPOTFLEET_GRACE_SECONDS"
ENV_NOTICE_SOURCES = "SPOTFLEET_NOTICE_SOURCES"


#: the longest duration (seconds) a variable may give: beyond it a wait cannot be armed
#: (``threading`` refuses timeouts above this)
MAX_ENV_SECONDS = float(threading.TIMEOUT_MAX)


def env_float(name: str, default: float | None = None, *, greater_than: float | None = None,
              at_least: float | None = None, at_most: float | None = MAX_ENV_SECONDS,
              unit: str = "seconds", example: str = "3600") -> float | None:
    """Read a number from the environment variable ``name`` (``default`` when unset or
    empty). The value must be finite and in range (``> greater_than``, ``>= at_least``,
    ``<= at_most``); otherwise a ValueError names the variable, the value, the range
    in ``unit`` and a fix (``example`` is a valid value)."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    fix = (f"set it to e.g. {name}={example}"
           + (f" or unset it (default {default:g} {unit})" if default is not None else " or unset it"))
    try:
        value = float(raw)
    except ValueError as exc:
        raise ValueError(f"{name}={raw!r} is not a number of {unit}; {fix}") from exc
    if not math.isfinite(value):
        raise ValueError(f"{name}={raw!r} is not a finite number of {unit}; {fix}")
    if greater_than is not None and not value > greater_than:
        raise ValueError(f"{name}={raw!r} must be > {greater_than:g} {unit}; {fix}")
    if at_least is not None and not value >= at_least:
        raise ValueError(f"{name}={raw!r} must be >= {at_least:g} {unit}; {fix}")
    if at_most is not None and not value <= at_most:
        raise ValueError(f"{name}={raw!r} must be <= {at_most:g} {unit}; {fix}")
    return value


def loss_units_from_env() -> int | None:
    """``SPOTFLEET_LOSS_UNITS`` as an integer >= 1 (None when unset), or a ValueError naming
    the variable and the fix."""
    raw = os.environ.get(ENV_LOSS_UNITS)
    if raw is None or raw.strip() == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{ENV_LOSS_UNITS}={raw!r} must be an integer >= 1 (independent failure "
                         f"units of the group, e.g. {ENV_LOSS_UNITS}=2) or unset (1)")
    return value


def checkpoint_uri_from_env() -> str:
    """``SPOTFLEET_CHECKPOINT_URI``, or a ValueError naming the variable and the fix."""
    uri = os.environ.get(ENV_CHECKPOINT_URI)
    if not uri:
        raise ValueError(f"{ENV_CHECKPOINT_URI} is not set; set it to a directory or "
                         "s3://bucket/prefix, or pass store=... explicitly")
    return uri
