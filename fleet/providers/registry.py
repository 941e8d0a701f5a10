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

from collections.abc import Callable
from typing import Any

from fleet.providers.base import FleetProvider

PROVIDERS = ("local", "skypilot")


def _local(options: dict[str, Any]) -> FleetProvider:
    from fleet.providers.local.provider import local_provider_from_options

    return local_provider_from_options(options)


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


def wall_seconds(kind: str, market_seconds: float, market: Any = None) -> float:
    """How many wall seconds ``market_seconds`` of market time last on provider ``kind``:
    the same on a real cloud; on the local fleet the market's compression
    (``fleet/providers/local/clock.py``; ``market``: its MarketConfig or dict). For what
    runs outside the provider on the wall clock (Dagster's retry delay)."""
    if kind != "local":
        return float(market_seconds)
    from fleet.providers.local.clock import wall_seconds_of_market

    return wall_seconds_of_market(market_seconds, market)


def terminate_grace_wall_seconds(kind: str, grace: Any, market: Any = None) -> float:
    """The grace (wall s) an operator's Terminate gives each node of a stage on provider
    ``kind`` (``grace``: the stage's ``terminate_grace_seconds``; ``market``: the local
    fleet's MarketConfig or dict, whose notice window ``"auto"`` means). 0 where the
    provider's ``terminate`` is ``cancel`` (SkyPilot: docs/providers.md)."""
    if kind != "local":
        return 0.0
    from fleet.providers.local.provider import notice_window_seconds
    from fleet.providers.terminate import terminate_grace_seconds

    return terminate_grace_seconds(grace, notice_window_seconds(market))


def preempt_node_now(provider: FleetProvider, stage: str, node_id: str) -> bool:
    """Fault injection: notice + kill one node of a running stage now.

    Uses the provider's public ``preempt_now`` (the local fleet has one). Returns False
    when the provider cannot inject (no such method, stage or node not running).
    """
    preempt = getattr(provider, "preempt_now", None)
    if preempt is None:
        return False
    return bool(preempt(stage, node_id))
