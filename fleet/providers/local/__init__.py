"""The ``local`` provider: real processes in emulated spot zones with injected preemptions."""

from fleet.providers.local.narrate import Narrator, sessions_table
from fleet.providers.local.policy_adapter import FleetPolicyRelaunch
from fleet.providers.local.provider import LocalFleetConfig, LocalFleetProvider
from fleet.providers.local.provider_events import (
    PROVIDER_EVENT_KINDS,
    EventTail,
    is_provider_event,
    provider_event,
)
from fleet.providers.local.relaunch import Launch, RelaunchContext, RelaunchPolicy

__all__ = [
    "PROVIDER_EVENT_KINDS",
    "EventTail",
    "FleetPolicyRelaunch",
    "Launch",
    "LocalFleetConfig",
    "LocalFleetProvider",
    "Narrator",
    "RelaunchContext",
    "RelaunchPolicy",
    "is_provider_event",
    "provider_event",
    "sessions_table",
]
