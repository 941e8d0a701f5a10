"""The ``skypilot`` provider: stages as SkyPilot managed jobs, with spotfleet's zone rotation."""

from fleet.providers.skypilot.provider import SkyPilotConfig, SkyPilotProvider
from fleet.providers.skypilot.tasks import (
    SkyTaskOptions,
    build_resources,
    build_task,
    hourly_price,
    resolve_instance_type,
    task_from_yaml,
    task_to_yaml,
    zones_of,
)

__all__ = [
    "SkyPilotConfig",
    "SkyPilotProvider",
    "SkyTaskOptions",
    "build_resources",
    "build_task",
    "hourly_price",
    "resolve_instance_type",
    "task_from_yaml",
    "task_to_yaml",
    "zones_of",
]
