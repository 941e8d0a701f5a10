"""fleet.emulation: local stand-ins for cloud behaviour (preemption injector, and
metadata servers that speak each cloud's documented notice protocol).

The emulator classes are imported on first use (PEP 562), so that
``python -m fleet.emulation.metadata_servers`` (docs/preemption-guard.md) does not find its
own module already imported by the package and print runpy's RuntimeWarning."""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "AwsImdsEmulator",
    "AzureScheduledEventsEmulator",
    "GcpMetadataEmulator",
    "MetadataEmulator",
    "make_emulator",
]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("fleet.emulation.metadata_servers"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
