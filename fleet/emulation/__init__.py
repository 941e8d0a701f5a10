"""fleet.emulation: local stand-ins for cloud behaviour (preemption injector, and
metadata servers that speak each cloud's documented notice protocol)."""

from fleet.emulation.metadata_servers import (
    AwsImdsEmulator,
    AzureScheduledEventsEmulator,
    GcpMetadataEmulator,
    MetadataEmulator,
    make_emulator,
)

__all__ = [
    "AwsImdsEmulator",
    "AzureScheduledEventsEmulator",
    "GcpMetadataEmulator",
    "MetadataEmulator",
    "make_emulator",
]
