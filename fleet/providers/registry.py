"""Fleet providers by name (``local``, ``skypilot``), built from JSON-able options.

The node runner (pipelines/node_runner.py) builds its provider here from the options
the ``train_<stage>`` asset sent through Dagster Pipes; nothing here imports assets/ or
pipelines/.

``options`` for ``local``: ``market`` (a MarketConfig dict, fleet/market/config.py),
``workdir``, ``extra_env``, ``market_clock_start_unix`` (when the run's market clock
started: a retry or a later stage replays a later part of the market). For
``skypilot``: ``skypilot`` (keyword arguments of ``SkyPilotConfig``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fleet.providers.base import FleetProvider

PROVIDERS = ("local", "skypilot")


def _local(options: dict[str, Any]) -> FleetProvider:
    from fleet.emulation.injector import CapacitySchedule, TimeScale
    from fleet.market.config import MarketConfig
    from fleet.providers.local.provider import LocalFleetConfig, LocalFleetProvider

    m = MarketConfig.model_validate(options.get("market") or {})
    # replay the market's future from where the history ends, advanced by the wall time
    # since the Dagster run started (a retry or a later stage sees a later market)
    start = float(options.get("market_clock_start_unix") or time.time())
    offset = m.history_seconds + max(0.0, time.time() - start) * m.time_scale
    cfg = LocalFleetConfig(
        schedule=CapacitySchedule(m.traces("all"), offset_seconds=offset),
        time_scale=TimeScale(wall_seconds_per_trace_hour=m.wall_seconds_per_market_hour),
        cloud=m.cloud, grace_seconds=m.grace_seconds, prices=m.price_book(),
        workdir=Path(options["workdir"]) if options.get("workdir") else None,
        extra_env=dict(options.get("extra_env") or {}))
    return LocalFleetProvider(cfg)


def _skypilot(options: dict[str, Any]) -> FleetProvider:
    from fleet.providers.skypilot import SkyPilotConfig, SkyPilotProvider

    return SkyPilotProvider(SkyPilotConfig(**(options.get("skypilot") or {})))


_BUILDERS: dict[str, Callable[[dict[str, Any]], FleetProvider]] = {
    "local": _local, "skypilot": _skypilot}


def build_provider(kind: str, options: dict[str, Any] | None = None) -> FleetProvider:
    """A fleet provider by name from JSON-able options (see the module docstring)."""
    if kind not in _BUILDERS:
        raise ValueError(f"unknown provider {kind!r}; use one of {', '.join(PROVIDERS)}")
    return _BUILDERS[kind](dict(options or {}))


def preempt_node_now(provider: FleetProvider, stage: str, node_id: str) -> bool:
    """Fault injection: notice + kill one node of a running stage now.

    Uses the provider's public ``preempt_now`` (the local fleet has one). Returns False
    when the provider cannot inject (no such method, stage or node not running).
    """
    preempt = getattr(provider, "preempt_now", None)
    if preempt is None:
        return False
    return bool(preempt(stage, node_id))
