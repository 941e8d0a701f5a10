"""The ``local`` provider: real processes in emulated spot zones with injected preemptions."""

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
    "Launch",
    "LocalFleetConfig",
    "LocalFleetProvider",
    "RelaunchContext",
    "RelaunchPolicy",
    "is_provider_event",
    "provider_event",
]
