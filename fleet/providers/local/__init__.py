"""The ``local`` provider: real processes in emulated spot zones with injected preemptions."""

from fleet.providers.decisions import Launch, PolicyDriver
from fleet.providers.events import (
    PROVIDER_EVENT_KINDS,
    EventTail,
    is_provider_event,
    provider_event,
)
from fleet.providers.local.narrate import Narrator, sessions_table
from fleet.providers.local.provider import LocalFleetConfig, LocalFleetProvider

__all__ = [
    "PROVIDER_EVENT_KINDS",
    "EventTail",
    "Launch",
    "LocalFleetConfig",
    "LocalFleetProvider",
    "Narrator",
    "PolicyDriver",
    "is_provider_event",
    "provider_event",
    "sessions_table",
]
